import { z } from 'zod';
import { Registry, Route, RouteAuth, RouteQuotas, registryDocumentSchema, routeAuthSchema, routeQuotasSchema, routeSchema } from './model';

/** Where a value sits in a document: keys and array indexes from the top. */
export type DocumentPath = (string | number)[];

/** One problem in a registry document, located precisely enough to fix it. */
export interface RegistryProblem {
  /** The route key when it could be read, so operators can find the route in the Portal. */
  route?: string;
  /** Dotted path of the offending field inside the document, e.g. routes[1].toolServices[0].url */
  field: string;
  /** The same path as keys and indexes; for an unknown key it ends with that key. */
  path: DocumentPath;
  /** The problem is the key at the end of `path` itself (unknown), not its value. */
  unknownKey?: boolean;
  message: string;
}

export interface RegistryValidation {
  /** Routes that passed on their own; a bad route never blocks the others. */
  registry: Registry;
  problems: RegistryProblem[];
  /**
   * Every route key the document declares, valid or not (knownRoutes, docs/adr/0000-portal-registry-decisions.md §5): a route leaves the
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

const documentSchema = z.object({ revision: z.string().optional(), auth: z.unknown().optional(), quotas: z.unknown().optional(), routes: z.array(z.unknown()) }).strict();

function formatPath(path: DocumentPath): string {
  const dotted = path.reduce<string>((out, part) => (typeof part === 'number' ? `${out}[${part}]` : `${out}.${part}`), '');
  return dotted.replace(/^\./, '') || '(document)';
}

/** Levenshtein distance: the fewest single-character edits that turn one string into the other. */
function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = row[j];
      row[j] = Math.min(above + 1, row[j - 1] + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
      diagonal = above;
    }
  }
  return row[b.length];
}

/** The allowed key a misspelt one most likely meant: a few edits away, ignoring case. */
export function nearestKey(unknown: string, allowed: string[]): string | undefined {
  const scored = allowed.map((key) => ({ key, distance: editDistance(unknown.toLowerCase(), key.toLowerCase()) }));
  const best = scored.sort((a, b) => a.distance - b.distance)[0];
  return best && best.distance <= Math.max(2, Math.floor(unknown.length / 3)) ? best.key : undefined;
}

type JsonSchemaNode = { properties?: Record<string, JsonSchemaNode>; items?: JsonSchemaNode; oneOf?: JsonSchemaNode[]; anyOf?: JsonSchemaNode[] };
let registryJsonSchema: JsonSchemaNode | undefined;

/** The keys the registry format allows in the object at `path` (read from the model's JSON schema). */
function allowedKeysAt(path: DocumentPath): string[] {
  registryJsonSchema ??= z.toJSONSchema(registryDocumentSchema, { io: 'input' }) as JsonSchemaNode;
  let nodes: JsonSchemaNode[] = [registryJsonSchema];
  // A union (credentials' modes) allows the keys of any of its members.
  const members = (node: JsonSchemaNode): JsonSchemaNode[] => [node, ...[...(node.oneOf ?? []), ...(node.anyOf ?? [])].flatMap(members)];
  for (const part of path) {
    nodes = nodes.flatMap(members).flatMap((node) => {
      const next = typeof part === 'number' ? node.items : node.properties?.[part];
      return next ? [next] : [];
    });
  }
  return [...new Set(nodes.flatMap(members).flatMap((node) => Object.keys(node.properties ?? {})))];
}

/** Keys that moved elsewhere in the format, and where to. */
const MOVED_KEYS: Record<string, string> = {
  catalogBearerTokenFile:
    'moved: use credentials: { mode: serviceAccount, tokenFile: <file> } on the Tool Service (the token then authenticates its calls and the sidecar\'s requests too, injected by Envoy)',
};

/**
 * What an unknown key at `path` most likely meant: a near key of the same object, or the same key one
 * level down (`tls` written beside `url` belongs in `transport.tls`).
 */
function meantKey(key: string, path: DocumentPath): string | undefined {
  const allowed = allowedKeysAt(path);
  const near = nearestKey(key, allowed);
  if (near) return near;
  for (const child of allowed) {
    const nested = nearestKey(key, allowedKeysAt([...path, child]));
    if (nested) return `${child}.${nested}`;
  }
  return undefined;
}

/** zod's issues as problems: one per unknown key, each with the key it most likely meant. */
function problemsOf(issues: z.core.$ZodIssue[], base: DocumentPath, route: string | undefined): RegistryProblem[] {
  return issues.flatMap((issue): RegistryProblem[] => {
    const path = [...base, ...(issue.path as DocumentPath)];
    if (issue.code !== 'unrecognized_keys') return [{ route, field: formatPath(path), path, message: issue.message }];
    return issue.keys.map((key) => {
      const keyPath = [...path, key];
      const moved = MOVED_KEYS[key];
      if (moved) return { route, field: formatPath(keyPath), path: keyPath, unknownKey: true, message: moved };
      const meant = meantKey(key, path);
      return { route, field: formatPath(keyPath), path: keyPath, unknownKey: true, message: `unknown key${meant ? ` (did you mean "${meant}"?)` : ''}` };
    });
  });
}

function keyOf(raw: unknown): string | undefined {
  const key = (raw as { key?: unknown } | null)?.key;
  return typeof key === 'string' ? key : undefined;
}

/** What this gateway allows a registry to ask for, beyond the format itself. */
export interface RegistryPolicy {
  /**
   * `credentials.mode: passthrough` (the caller's own token to a backend that is its audience): off
   * unless the operator turns it on (the control plane's --allow-token-passthrough), so that no
   * Portal entry alone can make the gateway forward callers' tokens (docs/auth.md).
   */
  allowTokenPassthrough: boolean;
}

export const DEFAULT_REGISTRY_POLICY: RegistryPolicy = { allowTokenPassthrough: false };

/** Problems of a valid route that this gateway's policy refuses. */
/**
 * What decides on the caller's token needs the route's auth (jwt_authn validates the token first):
 * access rules, and backend credentials made from the caller's token — an exchange's subject token,
 * a passthrough's checked audience — which must be a token the gateway validated.
 */
function authProblems(route: Route, base: DocumentPath): RegistryProblem[] {
  if (route.auth) return [];
  const problem = (path: DocumentPath, message: string) => ({ route: route.key, field: formatPath(path), path, message });
  const ruleWithoutAuth = route.toolServices.findIndex((service) => service.policy?.rules);
  if (ruleWithoutAuth >= 0) {
    return [problem([...base, 'toolServices', ruleWithoutAuth, 'policy', 'rules'], 'rules decide on the caller\'s token: give the route an auth (or the document a default auth)')];
  }
  const perCallerWithoutAuth = route.toolServices.findIndex((service) => service.credentials?.mode === 'tokenExchange' || service.credentials?.mode === 'passthrough');
  if (perCallerWithoutAuth >= 0) {
    const mode = route.toolServices[perCallerWithoutAuth].credentials!.mode;
    return [
      problem(
        [...base, 'toolServices', perCallerWithoutAuth, 'credentials', 'mode'],
        `${mode} makes the backend's credentials from the caller's token, which the gateway must validate first: give the route an auth (or the document a default auth)`,
      ),
    ];
  }
  return [];
}

function policyProblems(route: Route, base: DocumentPath, policy: RegistryPolicy): RegistryProblem[] {
  if (policy.allowTokenPassthrough) return [];
  return route.toolServices.flatMap((service, index) => {
    if (service.credentials?.mode !== 'passthrough') return [];
    const path = [...base, 'toolServices', index, 'credentials', 'mode'];
    return [
      {
        route: route.key,
        field: formatPath(path),
        path,
        message: 'passthrough (the caller\'s own token to the backend) is off on this gateway: start the control plane with --allow-token-passthrough, or use tokenExchange',
      },
    ];
  });
}

/**
 * Validates a registry document route by route. Cross-route rules (unique keys, one URL per Tool
 * Service id) reject the later route, so the earlier, already-accepted one keeps serving.
 */
export function validateRegistry(document: unknown, policy: RegistryPolicy = DEFAULT_REGISTRY_POLICY): RegistryValidation {
  const top = documentSchema.safeParse(document);
  if (!top.success) {
    return {
      registry: { routes: [] },
      knownRoutes: [],
      documentRejected: true,
      problems: problemsOf(top.error.issues, [], undefined),
    };
  }
  const problems: RegistryProblem[] = [];
  const defaultQuotas = top.data.quotas === undefined ? { ok: true as const } : parseDefaultQuotas(top.data.quotas, problems);
  const defaultAuth = top.data.auth === undefined ? { ok: true as const } : parseDefaultAuth(top.data.auth, problems);
  const routes: Route[] = [];
  const routeKeys = new Set<string>();
  /** A Tool Service id is one Envoy cluster, so every route must describe it the same way. */
  const endpointByServiceId = new Map<string, string>();
  const endpointOf = (service: Route['toolServices'][number]) =>
    JSON.stringify([service.url, service.transport ?? {}, service.fallback ?? {}, service.credentials ?? { mode: 'none' }, service.quotas ?? {}]);

  top.data.routes.forEach((raw, index) => {
    const base = ['routes', index];
    const parsed = routeSchema.safeParse(raw);
    if (!parsed.success) {
      problems.push(...problemsOf(parsed.error.issues, base, keyOf(raw)));
      return;
    }
    const withAuth = withEffectiveAuth(parsed.data, defaultAuth);
    if (typeof withAuth === 'string') {
      problems.push({ route: parsed.data.key, field: formatPath([...base, 'auth']), path: [...base, 'auth'], message: withAuth });
      return;
    }
    const route = withEffectiveQuotas(withAuth, defaultQuotas);
    if (typeof route === 'string') {
      problems.push({ route: parsed.data.key, field: formatPath([...base, 'quotas']), path: [...base, 'quotas'], message: route });
      return;
    }
    const refused = [...authProblems(route, base), ...policyProblems(route, base, policy)];
    if (refused.length > 0) {
      problems.push(...refused);
      return;
    }
    if (routeKeys.has(route.key)) {
      const path = [...base, 'key'];
      problems.push({ route: route.key, field: formatPath(path), path, message: `duplicate route key "${route.key}"` });
      return;
    }
    const conflict = route.toolServices.findIndex((service) => {
      const known = endpointByServiceId.get(service.id);
      return known !== undefined && known !== endpointOf(service);
    });
    if (conflict >= 0) {
      const service = route.toolServices[conflict];
      const [knownUrl] = JSON.parse(endpointByServiceId.get(service.id)!) as [string];
      const path = [...base, 'toolServices', conflict];
      problems.push({
        route: route.key,
        field: formatPath(path),
        path,
        message: `Tool Service id "${service.id}" is already registered with another URL, transport, credentials, fallback or quotas (${knownUrl})`,
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

type DefaultQuotas = { ok: true; quotas?: RouteQuotas } | { ok: false };

/** The document's `quotas`, the defaults of every route's limits; its problems are reported once, at `quotas`. */
function parseDefaultQuotas(raw: unknown, problems: RegistryProblem[]): DefaultQuotas {
  const parsed = routeQuotasSchema.safeParse(raw);
  if (parsed.success) return { ok: true, quotas: parsed.data };
  problems.push(...problemsOf(parsed.error.issues, ['quotas'], undefined));
  return { ok: false };
}

type DefaultAuth = { ok: true; auth?: RouteAuth } | { ok: false };

/** The document's `auth`, the default of every route without its own; its problems are reported once, at `auth`. */
function parseDefaultAuth(raw: unknown, problems: RegistryProblem[]): DefaultAuth {
  const parsed = routeAuthSchema.safeParse(raw);
  if (parsed.success) return { ok: true, auth: parsed.data };
  problems.push(...problemsOf(parsed.error.issues, ['auth'], undefined));
  return { ok: false };
}

/**
 * The route with the limits it gets: each one it sets itself, the document's default for the others.
 * A route keeps what it resolved to (one saved for a cold start must not depend on the document); one
 * whose defaults are invalid is refused, so it keeps its previous state.
 */
function withEffectiveQuotas(route: Route, defaults: DefaultQuotas): Route | string {
  if (!defaults.ok) return "inherits the document's quotas, which are invalid (see the problems at quotas)";
  const fallback = defaults.quotas;
  if (!fallback) return route;
  const own = route.quotas ?? {};
  const merged = <T extends object>(mine: T | undefined, theirs: T | undefined): T | undefined => (mine || theirs ? { ...theirs, ...mine } as T : undefined);
  const quotas: RouteQuotas = Object.fromEntries(
    Object.entries({
      calls: merged(own.calls, fallback.calls),
      discovery: merged(own.discovery, fallback.discovery),
      concurrency: merged(own.concurrency, fallback.concurrency),
    }).filter(([, value]) => value !== undefined),
  );
  return Object.keys(quotas).length > 0 ? { ...route, quotas } : route;
}

/**
 * The route with the auth it gets: its own, none (`auth: false`), or the document's default. A route
 * keeps what it resolved to (a route saved for a cold start must not depend on the document's
 * default); one that would inherit an invalid default is refused, so it keeps its previous state.
 */
function withEffectiveAuth(route: Route, defaultAuth: DefaultAuth): Route | string {
  if (route.auth !== undefined) return route;
  if (!defaultAuth.ok) return 'inherits the document\'s auth, which is invalid (see the problems at auth)';
  return defaultAuth.auth ? { ...route, auth: defaultAuth.auth } : route;
}

export function describeProblem(problem: RegistryProblem): string {
  const where = problem.route ? `route "${problem.route}", ${problem.field}` : problem.field;
  return `${where}: ${problem.message}`;
}

/**
 * How many route entries the problems reject: a route with several problems counts once; one whose key
 * could not be read counts by its place in the document.
 */
export function rejectedRouteCount(problems: RegistryProblem[]): number {
  const routes = problems.flatMap((problem) => {
    if (problem.route !== undefined) return [`key ${problem.route}`];
    const [list, index] = problem.path;
    return list === 'routes' && typeof index === 'number' ? [`entry ${index}`] : [];
  });
  return new Set(routes).size;
}
