import { isDeepStrictEqual } from 'node:util';
import { Registry, Route } from './model';
import { DEFAULT_REGISTRY_POLICY, RegistryPolicy, RegistryProblem, RegistryValidation, validateRegistry } from './validate';

export interface RegistryMerge {
  registry: Registry;
  added: string[];
  removed: string[];
  changed: string[];
  /** Declared routes that failed validation and keep their previous good state (or stay absent). */
  rejected: RegistryProblem[];
}

/**
 * Folds a validated document into the routes served so far, route by route (docs/adr/0000-portal-registry-decisions.md §4, §5):
 * - a valid route replaces its previous state;
 * - an invalid route keeps its previous good state;
 * - a route leaves only when the document no longer declares it (knownRoutes).
 */
export function mergeRegistry(current: Registry, validation: RegistryValidation, policy: RegistryPolicy = DEFAULT_REGISTRY_POLICY): RegistryMerge {
  const previous = new Map(current.routes.map((route) => [route.key, route]));
  const valid = new Map(validation.registry.routes.map((route) => [route.key, route]));
  const candidates: Route[] = [];
  for (const key of validation.knownRoutes) {
    const route = valid.get(key) ?? previous.get(key);
    if (route) candidates.push(route);
  }
  // Kept-previous routes can clash with new ones (one Tool Service id, two URLs): validate the result
  // as a whole, and keep the previous state of any route that loses.
  candidates.sort((a, b) => a.key.localeCompare(b.key));
  const combined = validateRegistry({ routes: candidates }, policy);
  const served = new Map(combined.registry.routes.map((route) => [route.key, route]));
  for (const problem of combined.problems) {
    const fallback = problem.route ? previous.get(problem.route) : undefined;
    if (fallback && !served.has(fallback.key)) served.set(fallback.key, fallback);
  }
  const routes = [...served.values()].sort((a, b) => a.key.localeCompare(b.key));
  return {
    registry: { routes },
    added: routes.filter((route) => !previous.has(route.key)).map((route) => route.key),
    removed: [...previous.keys()].filter((key) => !served.has(key)),
    changed: routes.filter((route) => previous.has(route.key) && !isDeepStrictEqual(previous.get(route.key), route)).map((route) => route.key),
    rejected: [...validation.problems, ...combined.problems],
  };
}
