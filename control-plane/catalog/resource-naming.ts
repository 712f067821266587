/**
 * How a route names its backends' resources (docs/adr/0015-federated-resources-and-prompts.md): a
 * resource's URI, and a resource template's URI template, get the backend's name in front, so that
 * two backends may both serve `file:///README.md` and the gateway can tell from a URI alone which
 * backend it belongs to and what that backend calls it.
 *
 * - `<scheme-name>+<the backend's own URI>`: `weather+file:///README.md`. The backend name becomes a
 *   URI scheme prefix (`_` written `-`, since a scheme allows letters, digits, `+`, `-` and `.` only;
 *   backend names are snake_case, so no `-` is ambiguous). A valid absolute URI stays valid: only its
 *   scheme grows, and everything after it (authority, path, query, fragment, template expressions) is
 *   the backend's own, byte for byte, so a client that expands a template expands the backend's.
 * - `ui://<scheme-name>+<rest>` for `ui://<rest>`: MCP Apps hosts render only `ui:` resources, so
 *   those keep their scheme and carry the backend in front of their authority.
 *
 * Reversible: the first `+` of an exposed URI (after `ui://` for those) ends the backend's part, since
 * a backend name has none; the rest is the backend's own URI. Collision-free: backend names are
 * unique within a route and their scheme names are too.
 */

const UI_SCHEME = 'ui://';
/** RFC 3986: an absolute URI (or a URI template that starts like one) begins with its scheme. */
const ABSOLUTE = /^[A-Za-z][A-Za-z0-9+.-]*:/;

/** The scheme-safe form of a snake_case backend name. */
export function schemeNameOf(backend: string): string {
  return backend.replace(/_/g, '-');
}

/** The URI (or URI template) agents see for a backend's own; undefined for one that is not absolute (never served). */
export function exposeResourceUri(backend: string, own: string): string | undefined {
  if (!ABSOLUTE.test(own)) return undefined;
  const prefix = `${schemeNameOf(backend)}+`;
  return own.startsWith(UI_SCHEME) ? `${UI_SCHEME}${prefix}${own.slice(UI_SCHEME.length)}` : `${prefix}${own}`;
}

/** The backend's scheme name and its own URI behind an exposed URI; undefined when it has no backend part. */
export function splitResourceUri(exposed: string): { schemeName: string; own: string } | undefined {
  const ui = exposed.startsWith(UI_SCHEME);
  const rest = ui ? exposed.slice(UI_SCHEME.length) : exposed;
  const plus = rest.indexOf('+');
  const schemeName = plus > 0 ? rest.slice(0, plus) : '';
  if (!/^[a-z][a-z0-9]*(-[a-z0-9]+)*$/.test(schemeName)) return undefined;
  const tail = rest.slice(plus + 1);
  return { schemeName, own: ui ? `${UI_SCHEME}${tail}` : tail };
}

/** What an error says about an exposed URI the route cannot place, or undefined when `backends` has its backend. */
export function resourceUriProblem(exposed: string, routeKey: string, backendBySchemeName: ReadonlyMap<string, unknown>): string | undefined {
  const split = splitResourceUri(exposed);
  if (!split) return `resource URI "${exposed}" has no backend prefix: use a URI from resources/list or resources/templates/list of route "${routeKey}" (<backend>+<uri>)`;
  if (!backendBySchemeName.has(split.schemeName)) return `unknown backend "${split.schemeName}" on route "${routeKey}" (resource URI "${exposed}")`;
  return undefined;
}
