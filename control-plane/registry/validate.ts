import { z } from 'zod';
import { Registry, Route, routeSchema } from './model';

/** One problem in a registry document, located precisely enough to fix it. */
export interface RegistryProblem {
  /** The route key when it could be read, so operators can find the route in the Portal. */
  route?: string;
  /** Dotted path of the offending field inside the document, e.g. routes[1].toolServices[0].url */
  field: string;
  message: string;
}

export interface RegistryValidation {
  /** Routes that passed on their own; a bad route never blocks the others. */
  registry: Registry;
  problems: RegistryProblem[];
  /**
   * Every route key the document declares, valid or not (ADR-0013 knownRoutes): a route leaves the
   * gateway only when it is no longer declared, never because it failed validation this time.
   */
  knownRoutes: string[];
  /** The source's own revision of the document, when it gives one. */
  revision?: string;
  /**
   * The document is not a registry at all (not an object with a list of routes): it declares no
   * routes, and a source's such document must change nothing (RegistryDocumentError).
   */
  documentRejected: boolean;
}

const documentSchema = z.object({ revision: z.string().optional(), routes: z.array(z.unknown()) }).strict();

function formatPath(base: string, path: ReadonlyArray<PropertyKey>): string {
  return path.reduce<string>((out, part) => (typeof part === 'number' ? `${out}[${part}]` : `${out}.${String(part)}`), base);
}

function keyOf(raw: unknown): string | undefined {
  const key = (raw as { key?: unknown } | null)?.key;
  return typeof key === 'string' ? key : undefined;
}

/**
 * Validates a registry document route by route. Cross-route rules (unique keys, one URL per Tool
 * Service id) reject the later route, so the earlier, already-accepted one keeps serving.
 */
export function validateRegistry(document: unknown): RegistryValidation {
  const top = documentSchema.safeParse(document);
  if (!top.success) {
    return {
      registry: { routes: [] },
      knownRoutes: [],
      documentRejected: true,
      problems: top.error.issues.map((issue) => ({ field: formatPath('', issue.path).replace(/^\./, '') || '(document)', message: issue.message })),
    };
  }
  const problems: RegistryProblem[] = [];
  const routes: Route[] = [];
  const routeKeys = new Set<string>();
  /** A Tool Service id is one Envoy cluster, so every route must describe it the same way. */
  const endpointByServiceId = new Map<string, string>();
  const endpointOf = (service: Route['toolServices'][number]) => JSON.stringify([service.url, service.transport ?? {}, service.fallback ?? {}]);

  top.data.routes.forEach((raw, index) => {
    const base = `routes[${index}]`;
    const parsed = routeSchema.safeParse(raw);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) {
        problems.push({ route: keyOf(raw), field: formatPath(base, issue.path), message: issue.message });
      }
      return;
    }
    const route = parsed.data;
    if (routeKeys.has(route.key)) {
      problems.push({ route: route.key, field: `${base}.key`, message: `duplicate route key "${route.key}"` });
      return;
    }
    const conflict = route.toolServices.findIndex((service) => {
      const known = endpointByServiceId.get(service.id);
      return known !== undefined && known !== endpointOf(service);
    });
    if (conflict >= 0) {
      const service = route.toolServices[conflict];
      const [knownUrl] = JSON.parse(endpointByServiceId.get(service.id)!) as [string];
      problems.push({
        route: route.key,
        field: `${base}.toolServices[${conflict}]`,
        message: `Tool Service id "${service.id}" is already registered with another URL, transport or fallback (${knownUrl})`,
      });
      return;
    }
    routeKeys.add(route.key);
    route.toolServices.forEach((service) => endpointByServiceId.set(service.id, endpointOf(service)));
    routes.push(route);
  });
  const knownRoutes = [...new Set(top.data.routes.map(keyOf).filter((key): key is string => key !== undefined))];
  return { registry: { routes }, problems, knownRoutes, revision: top.data.revision, documentRejected: false };
}

export function describeProblem(problem: RegistryProblem): string {
  const where = problem.route ? `route "${problem.route}", ${problem.field}` : problem.field;
  return `${where}: ${problem.message}`;
}
