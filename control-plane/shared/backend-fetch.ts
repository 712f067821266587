import * as fs from 'node:fs';
import { Agent, fetch as undiciFetch } from 'undici';

/** How to reach a Tool Service over TLS: the CA to trust and the name to check (from the registry). */
export interface BackendTls {
  caFile: string;
  sni: string;
}

const agents = new Map<string, Agent>();

/**
 * The fetch the control plane (tools/list) and the sidecar (backend sessions) use to reach a Tool
 * Service directly: with the same CA file and server name Envoy uses for it, so a Tool Service behind
 * a private CA is reachable by all three. One connection pool per (CA, name).
 */
export function backendFetch(tls: BackendTls | undefined): typeof fetch {
  if (!tls) return fetch;
  const key = `${tls.caFile}\0${tls.sni}`;
  let agent = agents.get(key);
  if (!agent) {
    agent = new Agent({ connect: { ca: fs.readFileSync(tls.caFile), servername: tls.sni } });
    agents.set(key, agent);
  }
  const dispatcher = agent;
  return ((input: Parameters<typeof fetch>[0], init?: Parameters<typeof fetch>[1]) =>
    undiciFetch(input as never, { ...(init as object), dispatcher } as never)) as unknown as typeof fetch;
}
