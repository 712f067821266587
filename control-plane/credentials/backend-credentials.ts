import { createHash } from 'node:crypto';
import type { BackendCredentialsMessage } from '../catalog/catalog-store';
import { IdpClient, IdpUnavailableError, jwtClaims, jwtExpiryMs } from './idp-client';
import { TokenCache } from './token-cache';

/**
 * Which Authorization the gateway sends a Tool Service on a caller's behalf (docs/auth.md, Backends),
 * for every request kind alike: calls, prompts/get, completion/complete and resources/* (the call
 * script asks for it), the sidecar's own requests (session open and renewal, notifications, clients'
 * answers, DELETE, logging/setLevel, backend streams) and nothing else.
 * - none, serviceAccount: nothing from here. Envoy removes the caller's header, and for a service
 *   account injects the gateway's own token (the cluster's credential injector).
 * - tokenExchange: the caller's token exchanged at the IdP for one whose audience is the backend
 *   (RFC 8693), cached per (caller token, audience, resource, scopes).
 * - passthrough: the caller's own token, only when its audience includes the backend's.
 */

/** The caller may not reach the backend with the token it presented: outcome denied (-32003). */
export class CredentialsDeniedError extends Error {}

/** A bearer token from an Authorization header; undefined for none or another scheme. */
export function bearerToken(authorization: string | undefined): string | undefined {
  const match = authorization === undefined ? null : /^Bearer[ \t]+([^\s]+)\s*$/i.exec(authorization);
  return match?.[1];
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** How long a passthrough verdict (this token's audience names the backend) may be remembered, at most. */
const PASSTHROUGH_VERDICT_MS = 60_000;

export class BackendCredentialsProvider {
  constructor(
    /** The gateway's IdP client; without it, token exchange is refused as unavailable. */
    private readonly idp: IdpClient | undefined,
    private readonly cache: TokenCache,
  ) {}

  /**
   * The Authorization header for `backend` on behalf of a caller who presented `callerAuthorization`,
   * or undefined for none. Throws CredentialsDeniedError (the caller's token cannot be used, or the
   * IdP refused it) or IdpUnavailableError (the IdP could not be asked, and no cached token is valid).
   */
  async authorizationFor(backend: { name: string; credentials: BackendCredentialsMessage }, callerAuthorization: string | undefined): Promise<string | undefined> {
    return (await this.credentialFor(backend, callerAuthorization)).authorization;
  }

  /**
   * The same, with how long it may be used as it is (ms): by an Envoy worker that remembers it, so
   * that it never serves a token the cache here would already have renewed. 0: ask again next time.
   */
  async credentialFor(
    backend: { name: string; credentials: BackendCredentialsMessage },
    callerAuthorization: string | undefined,
  ): Promise<{ authorization?: string; ttlMs: number }> {
    const { credentials } = backend;
    if (credentials.mode === 'none' || credentials.mode === 'serviceAccount') return { ttlMs: 0 };
    const token = bearerToken(callerAuthorization);
    if (!token) {
      throw new CredentialsDeniedError(`backend ${backend.name} acts on the caller's identity (${credentials.mode}): the request carries no bearer token`);
    }
    if (credentials.mode === 'passthrough') {
      const audience = jwtClaims(token)?.aud;
      const audiences = Array.isArray(audience) ? audience : [audience];
      if (!audiences.includes(credentials.audience)) {
        throw new CredentialsDeniedError(`backend ${backend.name} takes the caller's own token only when its audience includes "${credentials.audience}"`);
      }
      const expiresAt = jwtExpiryMs(token);
      return { authorization: `Bearer ${token}`, ttlMs: Math.max(0, Math.min(expiresAt === undefined ? PASSTHROUGH_VERDICT_MS : expiresAt - Date.now(), PASSTHROUGH_VERDICT_MS)) };
    }
    const idp = this.idp;
    if (!idp) throw new IdpUnavailableError('(none configured)', `backend ${backend.name} needs a token exchange: start the sidecar with --idp-token-endpoint`);
    const scopes = [...credentials.scopes].sort();
    const key = [sha256(token), credentials.audience, credentials.resource, scopes.join(' ')].join('\n');
    const exchanged = await this.cache.lookup(
      key,
      () => idp.exchange(token, { audience: credentials.audience, ...(credentials.resource && { resource: credentials.resource }), scopes }),
      jwtExpiryMs(token),
    );
    return { authorization: `Bearer ${exchanged.token}`, ttlMs: Math.max(0, exchanged.renewAtMs - Date.now()) };
  }
}
