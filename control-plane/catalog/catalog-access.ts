import * as fs from 'node:fs/promises';
import { Agent, fetch as undiciFetch } from 'undici';
import { CatalogCredentials } from '../credentials/catalog-credentials';
import { ToolServiceIR, UpstreamTls } from '../ir/gateway-ir';

/**
 * How one listing reaches a Tool Service: opened for that listing alone and closed after it, so that
 * every listing reads the Tool Service's files (token, CA, client certificate) as they are now.
 */
export interface CatalogConnection {
  fetch: typeof fetch;
  /** The Authorization the listing carries, if any. */
  authorization?: string;
  close(): Promise<void>;
}

export interface CatalogAccess {
  connect(service: ToolServiceIR): Promise<CatalogConnection>;
}

async function readFile(file: string, what: string): Promise<Buffer> {
  try {
    return await fs.readFile(file);
  } catch (error) {
    throw new Error(`cannot read ${what} ${file}: ${(error as Error).message}`);
  }
}

/** The TLS a listing uses: the same files and server name as Envoy's cluster for the Tool Service, read now. */
async function tlsAgent(tls: UpstreamTls): Promise<Agent> {
  const [ca, cert, key] = await Promise.all([
    readFile(tls.caFile, 'transport.tls.caFile'),
    tls.clientCert && readFile(tls.clientCert.certFile, 'transport.tls.clientCertFile'),
    tls.clientCert && readFile(tls.clientCert.keyFile, 'transport.tls.clientKeyFile'),
  ]);
  return new Agent({ connect: { ca, servername: tls.sni, ...(cert && key && { cert, key }) } });
}

/**
 * The control plane's listings go straight to the Tool Service, not through Envoy: the control plane
 * is what configures Envoy, and a catalog that needed an Envoy first would deadlock a fresh install (no
 * catalog → control plane not ready → no Envoy; docs/adr/0013-backend-credentials.md). So it does
 * here, for listings only, what Envoy does for everything else, from the same registry settings and
 * the same files — read anew for every listing, so a rotation needs no watch: the CA, the client
 * certificate (mTLS), and the Authorization the catalog's credentials give (a service account's token
 * file, or the gateway's own client-credentials token).
 */
export function directCatalogAccess(credentials: Pick<CatalogCredentials, 'authorizationFor'>): CatalogAccess {
  return {
    connect: async (service) => {
      const authorization = await credentials.authorizationFor(service);
      const agent = service.endpoint.tls ? await tlsAgent(service.endpoint.tls) : undefined;
      const viaAgent = agent
        ? (((input: Parameters<typeof fetch>[0], init?: Parameters<typeof fetch>[1]) =>
            undiciFetch(input as never, { ...(init as object), dispatcher: agent } as never)) as unknown as typeof fetch)
        : fetch;
      return { fetch: viaAgent, ...(authorization !== undefined && { authorization }), close: async () => agent?.close() };
    },
  };
}
