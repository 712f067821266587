import * as fs from 'node:fs/promises';
import type { ToolServiceIR } from '../ir/gateway-ir';
import { IdpClient, IdpUnavailableError } from './idp-client';
import { TokenCache } from './token-cache';

/**
 * What the control plane lists a Tool Service's tools with (docs/auth.md, Backends): there is no caller
 * then. `none` sends nothing; a `serviceAccount` sends its token, read from the same file Envoy injects
 * it from, at every listing (so it rotates with the file); a Tool Service whose calls carry the caller's
 * identity (tokenExchange, passthrough) is listed with a token of the gateway's own, from the
 * client-credentials grant at the gateway's IdP (with the Tool Service's scopes), cached until shortly
 * before it expires.
 */
export class CatalogCredentials {
  constructor(
    private readonly idp: IdpClient | undefined,
    private readonly cache: TokenCache,
  ) {}

  async authorizationFor(service: Pick<ToolServiceIR, 'id' | 'credentials'>): Promise<string | undefined> {
    const { credentials } = service;
    if (credentials.mode === 'none') return undefined;
    if (credentials.mode === 'serviceAccount') return `Bearer ${await readToken(credentials.tokenFile)}`;
    const idp = this.idp;
    if (!idp) {
      throw new IdpUnavailableError('(none configured)', `Tool Service ${service.id} is listed with the gateway's own client-credentials token: start the control plane with --idp-token-endpoint`);
    }
    const scopes = credentials.mode === 'tokenExchange' ? [...(credentials.scopes ?? [])].sort() : [];
    return `Bearer ${await this.cache.get(scopes.join(' '), () => idp.clientCredentials(scopes))}`;
  }
}

async function readToken(file: string): Promise<string> {
  let token: string;
  try {
    token = (await fs.readFile(file, 'utf8')).trim();
  } catch (error) {
    throw new Error(`cannot read credentials.tokenFile ${file}: ${(error as Error).message}`);
  }
  if (!token) throw new Error(`credentials.tokenFile ${file} is empty`);
  return token;
}
