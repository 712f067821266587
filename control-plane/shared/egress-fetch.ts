import { EGRESS_UPSTREAM_HEADER } from '../xds/translate/settings';

/**
 * The fetch the sidecar (backend sessions, notifications, DELETE) and the control plane (tools/list)
 * reach a Tool Service with: through Envoy's egress listener at `egress` (HOST:PORT), plain HTTP, naming
 * the Tool Service's cluster, so that Envoy applies the same credentials, TLS and rotation as to calls
 * (docs/adr/0013-backend-credentials.md). Node never holds a backend's CA, client certificate or
 * service-account token. The URL asked for (the Tool Service's own, as an SDK transport derives it)
 * keeps its path and query; Envoy sends the request to the cluster's endpoint.
 */
export function egressFetch(egress: string, cluster: string): typeof fetch {
  return (input, init) => {
    const asked = new URL(input instanceof Request ? input.url : String(input));
    const viaEgress = `http://${egress}${asked.pathname}${asked.search}`;
    const headers = new Headers(input instanceof Request ? input.headers : undefined);
    new Headers(init?.headers).forEach((value, name) => headers.set(name, value));
    headers.set(EGRESS_UPSTREAM_HEADER, cluster);
    return fetch(input instanceof Request ? new Request(viaEgress, input) : viaEgress, { ...init, headers });
  };
}
