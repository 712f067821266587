import { EGRESS_UPSTREAM_HEADER } from '../xds/translate/settings';
import { InternalTls } from './internal-tls';

/**
 * The body of a reply Envoy's egress listener makes itself when it could not get an answer from the Tool
 * Service (listener.ts): why, in Envoy's own terms, and the address it tried.
 */
export const EGRESS_FAILURE_BODY = {
  mcpgw_egress: {
    flags: '%RESPONSE_FLAGS%',
    details: '%RESPONSE_CODE_DETAILS%',
    transport_failure: '%UPSTREAM_TRANSPORT_FAILURE_REASON%',
    upstream: '%UPSTREAM_HOST%',
    cluster: '%UPSTREAM_CLUSTER%',
  },
};

/**
 * An operator's sentence for such a reply (as the sidecar's errors say it):
 * connection refused, a TLS failure, no healthy host — or undefined for any other body.
 */
export function describeEgressFailure(body: string): string | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return undefined;
  }
  const failure = (parsed as { mcpgw_egress?: Record<string, unknown> } | null)?.mcpgw_egress;
  if (typeof failure !== 'object' || failure === null) return undefined;
  const field = (name: string) => (typeof failure[name] === 'string' && failure[name] !== '-' ? (failure[name] as string) : '');
  const [flags, details, transport, upstream] = ['flags', 'details', 'transport_failure', 'upstream'].map(field);
  const where = upstream ? ` (${upstream})` : '';
  if (/TLS_error|CERTIFICATE|SSL/i.test(transport)) return `TLS error: ${transport.replace(/_/g, ' ')}${where}`;
  if (/refused/i.test(transport) || /refused/i.test(details)) return `connection refused${where}`;
  if (/UH/.test(flags)) return `no healthy endpoint: Envoy's health check finds the Tool Service down${where}`;
  if (/UT/.test(flags)) return `timed out${where}`;
  return `Envoy could not reach the Tool Service: ${[details, flags, transport].filter(Boolean).join(', ')}${where}`;
}

/** Envoy's egress listener itself could not be reached: nothing was asked of the Tool Service. */
export class EgressUnreachableError extends Error {}

/**
 * The fetch the sidecar reaches a Tool Service with for its own requests (backend sessions, relayed
 * notifications and answers, DELETE): through Envoy's egress listener at `egress` (HOST:PORT), naming
 * the Tool Service's cluster, so that Envoy applies the same credentials, TLS and rotation as to calls
 * (docs/adr/0013-backend-credentials.md). Node never holds a backend's CA, client certificate or
 * service-account token. With `internalTls` (the closed inside, docs/adr/0017-closed-inside.md) it
 * speaks mutual TLS with the sidecar's own certificate, which is all the listener lets in, and requires
 * Envoy's; without, plain HTTP (loopback only). The URL asked for (the Tool Service's own, as an SDK
 * transport derives it) keeps its path and query; Envoy sends the request to the cluster's endpoint.
 */
export function egressFetch(egress: string, cluster: string, internalTls?: InternalTls): typeof fetch {
  return async (input, init) => {
    const asked = new URL(input instanceof Request ? input.url : String(input));
    const viaEgress = `${internalTls ? 'https' : 'http'}://${egress}${asked.pathname}${asked.search}`;
    const headers = new Headers(input instanceof Request ? input.headers : undefined);
    new Headers(init?.headers).forEach((value, name) => headers.set(name, value));
    headers.set(EGRESS_UPSTREAM_HEADER, cluster);
    try {
      // Node's fetch takes a `dispatcher` of the undici package (the version Node bundles); its types are undici-types' own.
      const overTls: { dispatcher?: unknown } = internalTls ? { dispatcher: internalTls.clientDispatcher('envoy') } : {};
      return await fetch(input instanceof Request ? new Request(viaEgress, input) : viaEgress, { ...init, ...overTls, headers } as RequestInit);
    } catch (error) {
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      const code = cause?.code;
      // Refused or reset before an answer: Envoy is not there (yet). Anything else (a timeout, an abort) is the request's own.
      if (code === 'ECONNREFUSED' || code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') {
        throw new EgressUnreachableError(`Envoy's egress listener ${egress} is not reachable (${code}): is Envoy running with this gateway's configuration?`, { cause: error });
      }
      // The inside's handshake failed: the two certificates are not of one internal CA, or a role is wrong.
      if (internalTls && (code?.startsWith('ERR_SSL') || code?.startsWith('ERR_TLS') || /certificate/i.test(cause?.message ?? ''))) {
        throw new EgressUnreachableError(`Envoy's egress listener ${egress} refused the TLS handshake or was refused (${cause?.message ?? code}): Envoy's and the sidecar's --internal-tls must be of one CA`, { cause: error });
      }
      throw error;
    }
  };
}
