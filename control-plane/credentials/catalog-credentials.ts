import type { ToolServiceIR } from '../ir/gateway-ir';
import { IdpClient, IdpUnavailableError } from './idp-client';
import { TokenCache } from './token-cache';

/**
 * What the control plane lists a Tool Service's tools with (docs/auth.md, Backends): there is no caller
 * then. `none` sends nothing; a `serviceAccount`'s token is injected by Envoy on the egress listener, as
 * on calls; a Tool Service whose calls carry the caller's identity (tokenExchange, passthrough) is
 * listed with a token of the gateway's own, from the client-credentials grant at the gateway's IdP (with
 * the Tool Service's scopes), cached until shortly before it expires.
 */
export class CatalogCredentials {
  constructor(
    private readonly idp: IdpClient | undefined,
    private readonly cache: TokenCache,
  ) {}

  async authorizationFor(service: Pick<ToolServiceIR, 'id' | 'credentials'>): Promise<string | undefined> {
    const { credentials } = service;
    if (credentials.mode === 'none' || credentials.mode === 'serviceAccount') return undefined;
    const idp = this.idp;
    if (!idp) {
      throw new IdpUnavailableError('(none configured)', `Tool Service ${service.id} is listed with the gateway's own client-credentials token: start the control plane with --idp-token-endpoint`);
    }
    const scopes = credentials.mode === 'tokenExchange' ? [...(credentials.scopes ?? [])].sort() : [];
    return `Bearer ${await this.cache.get(scopes.join(' '), () => idp.clientCredentials(scopes))}`;
  }
}
