import { isIP } from 'node:net';
import { AccessSettings, AllowList } from './settings';
import { TYPE_URL } from './type-urls';

/**
 * Who may reach the gateway (docs/auth.md): Host and Origin checked by Envoy's route table (virtual
 * host domains, an Origin route ahead of every other), and Envoy's CORS filter answering the preflight
 * of browser pages on allowed origins. All of it comes from gateway settings, none from the registry.
 */

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];

function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  return bare === 'localhost' || (isIP(bare) === 4 && bare.startsWith('127.')) || bare === '::1';
}

/** A listener address as URL host: 0.0.0.0 and :: (every address) are reached on loopback locally. */
function urlHost(address: string): string {
  if (address === '0.0.0.0') return '127.0.0.1';
  if (address === '::') return '[::1]';
  return isIP(address) === 6 ? `[${address}]` : address;
}

export function defaultPublicUrl(listener: { address: string; port: number }): string {
  return `http://${urlHost(listener.address)}:${listener.port}`;
}

/**
 * Safe defaults (docs/auth.md): a gateway on a loopback address serves the loopback names and its
 * public URL's host, and browser pages of loopback origins and its public origin; on any other address
 * it serves any Host (it cannot know every name a load balancer or a client uses: set --allowed-hosts)
 * and only its public origin.
 */
export function defaultAccess(listener: { address: string; port: number }, publicUrl = defaultPublicUrl(listener)): AccessSettings {
  const publicHost = new URL(publicUrl).host;
  const publicOrigin = new URL(publicUrl).origin;
  if (!isLoopback(listener.address)) return { publicUrl, allowedHosts: '*', allowedOrigins: [publicOrigin] };
  const hosts = LOOPBACK_NAMES.flatMap((name) => [name, `${name}:${listener.port}`]);
  const origins = LOOPBACK_NAMES.flatMap((name) => ['http', 'https'].flatMap((scheme) => [`${scheme}://${name}`, `${scheme}://${name}:*`]));
  return {
    publicUrl,
    allowedHosts: [...new Set([...hosts, publicHost])],
    allowedOrigins: [...new Set([...origins, publicOrigin])],
  };
}

/**
 * An allowed origin as Envoy's string matcher: exact, a prefix when its only `*` ends it
 * (`http://localhost:*`), else a small regular expression where `*` stands for characters of a host
 * name or port. One matcher per origin keeps each within RE2's program-size limit, whatever the list.
 */
export function originMatcher(origin: string) {
  const wildcards = origin.split('*').length - 1;
  if (wildcards === 0) return { exact: origin };
  if (wildcards === 1 && origin.endsWith('*')) return { prefix: origin.slice(0, -1) };
  const regex = origin
    .split('*')
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
    .join('[A-Za-z0-9.-]*');
  return { safe_regex: { regex: `^${regex}$` } };
}

/** MCP's request headers a browser page sends, and the response headers it must be able to read. */
const CORS_REQUEST_HEADERS = ['authorization', 'content-type', 'accept', 'mcp-session-id', 'mcp-protocol-version', 'mcp-method', 'mcp-name', 'last-event-id'];
const CORS_EXPOSED_HEADERS = ['mcp-session-id', 'mcp-protocol-version', 'www-authenticate'];
/** How long a browser may keep a preflight's answer. */
const CORS_MAX_AGE_SECONDS = 600;

/** Envoy's CORS policy for the allowed origins, on the virtual host (the preflight is answered by Envoy). */
export function corsPolicy(origins: AllowList) {
  return {
    '@type': TYPE_URL.corsPolicy,
    allow_origin_string_match: origins === '*' ? [{ prefix: '' }] : origins.map(originMatcher),
    allow_methods: 'GET, POST, DELETE, OPTIONS',
    allow_headers: CORS_REQUEST_HEADERS.join(', '),
    expose_headers: CORS_EXPOSED_HEADERS.join(', '),
    max_age: String(CORS_MAX_AGE_SECONDS),
    // A preflight from any other origin goes on and meets the Origin route's 403.
    forward_not_matching_preflights: true,
  };
}

/**
 * The listener's check of a browser's Origin (MCP's transport: a request whose Origin is present and
 * not allowed "MUST" get 403, against DNS rebinding): an RBAC policy that denies it before any other
 * filter but CORS reads the request; a request without Origin (not from a browser) is not concerned.
 */
export function originCheckFilter(origins: AllowList) {
  const allowed = origins === '*' ? [] : origins.map((origin) => ({ header: { name: 'origin', string_match: originMatcher(origin) } }));
  return {
    name: 'envoy.filters.http.rbac',
    typed_config: {
      '@type': TYPE_URL.rbac,
      rules: {
        action: 'DENY',
        policies:
          origins === '*'
            ? {}
            : {
                [ORIGIN_POLICY]: {
                  permissions: [{ any: true }],
                  principals: [{ and_ids: { ids: [{ header: { name: 'origin', present_match: true } }, { not_id: { or_ids: { ids: allowed } } }] } }],
                },
              },
      },
    },
  };
}

/** The RBAC policy's name, which Envoy's details of a refused request carry (local-replies.ts). */
export const ORIGIN_POLICY = 'origin_not_allowed';

/** The virtual host every other Host value meets: 403 (DNS rebinding); none when every host is allowed. */
export function hostDeniedVirtualHost(hosts: AllowList) {
  if (hosts === '*') return [];
  return [
    {
      name: 'host_denied',
      domains: ['*'],
      routes: [
        {
          name: 'host_denied',
          match: { prefix: '/' },
          direct_response: { status: 403, body: { inline_string: 'Host not allowed: this gateway serves its allowed host names only (settings: --allowed-hosts)' } },
        },
      ],
    },
  ];
}

/** The allowed hosts, and the hosts of the registry's own public URLs (a route's auth.publicUrl): a route is reachable where it says it is. */
export const servedDomains = (hosts: AllowList, registryHosts: string[]) => (hosts === '*' ? ['*'] : [...new Set([...hosts, ...registryHosts])]);
