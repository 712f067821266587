import * as fs from 'node:fs/promises';
import { z } from 'zod';

/**
 * The gateway as an OAuth client of its identity provider (docs/auth.md, Backends): RFC 8693 token
 * exchange for per-caller backend tokens, and the client-credentials grant for the gateway's own
 * tokens (catalog listings). It authenticates as its own confidential client (client_secret_basic),
 * with the secret read from a file at every request, so that the secret rotates with the file.
 * Tokens are never logged, and never put into an error message.
 */

export interface IdpSettings {
  /** How errors name the IdP to callers and operators (-32004 "identity provider <name> is unavailable"). */
  name: string;
  tokenEndpoint: string;
  clientId: string;
  /** A file holding the client secret (a mounted secret). */
  clientSecretFile: string;
  /** Limit for one token request. */
  timeoutMs: number;
}

export const IDP_DEFAULTS = { timeoutMs: 5000 };

/** A token the IdP issued, and when it stops being valid. */
export interface IssuedToken {
  accessToken: string;
  expiresAtMs: number;
}

/** The IdP answered, and said no (RFC 6749 §5.2): the caller may not have this token. */
export class IdpRefusedError extends Error {
  constructor(
    readonly idp: string,
    readonly oauthError: string,
    description: string | undefined,
  ) {
    super(`identity provider ${idp} refused: ${oauthError}${description ? ` (${description})` : ''}`);
  }
}

/** The IdP could not be asked, or did not answer usefully: nobody said no. */
export class IdpUnavailableError extends Error {
  constructor(
    readonly idp: string,
    reason: string,
  ) {
    super(`identity provider ${idp} is unavailable: ${reason}`);
  }
}

const TokenResponse = z.object({ access_token: z.string().min(1), expires_in: z.number().positive().optional() });
const ErrorResponse = z.object({ error: z.string(), error_description: z.string().optional() });

const TOKEN_EXCHANGE_GRANT = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
/** A description the IdP writes is cut to this: it is shown to callers. */
const MAX_DESCRIPTION = 200;
/** A token whose lifetime the IdP does not say, and whose own exp cannot be read, is used once. */
const UNKNOWN_LIFETIME_MS = 0;

/** The `exp` of a JWT, in ms; undefined for a token that is not a JWT (opaque tokens are fine). */
export function jwtExpiryMs(token: string): number | undefined {
  const claims = jwtClaims(token);
  return typeof claims?.exp === 'number' ? claims.exp * 1000 : undefined;
}

/** A JWT's claims, read without verifying it (Envoy's jwt_authn verifies callers' tokens); undefined for anything else. */
export function jwtClaims(token: string): Record<string, unknown> | undefined {
  const payload = token.split('.')[1];
  if (payload === undefined) return undefined;
  try {
    const claims: unknown = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
    return typeof claims === 'object' && claims !== null && !Array.isArray(claims) ? (claims as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Why a request never got an answer, as operators read it. */
function unreachableReason(error: unknown): string {
  const err = error as Error & { cause?: { code?: string } };
  if (err.name === 'TimeoutError' || err.name === 'AbortError') return 'no answer in time';
  const code = err.cause?.code;
  return code ? `${code === 'ECONNREFUSED' ? 'connection refused' : code}` : err.message;
}

export class IdpClient {
  constructor(readonly settings: IdpSettings) {}

  get name(): string {
    return this.settings.name;
  }

  /** RFC 8693: the caller's token for one whose audience is the backend. */
  exchange(subjectToken: string, request: { audience: string; resource?: string; scopes?: string[] }): Promise<IssuedToken> {
    return this.tokenRequest({
      grant_type: TOKEN_EXCHANGE_GRANT,
      subject_token: subjectToken,
      subject_token_type: ACCESS_TOKEN_TYPE,
      requested_token_type: ACCESS_TOKEN_TYPE,
      audience: request.audience,
      ...(request.resource && { resource: request.resource }),
      ...(request.scopes?.length && { scope: request.scopes.join(' ') }),
    });
  }

  /** The gateway's own token (client credentials). */
  clientCredentials(scopes: string[] = []): Promise<IssuedToken> {
    return this.tokenRequest({ grant_type: 'client_credentials', ...(scopes.length && { scope: scopes.join(' ') }) });
  }

  private async clientAuthorization(): Promise<string> {
    let secret: string;
    try {
      secret = (await fs.readFile(this.settings.clientSecretFile, 'utf8')).trim();
    } catch (error) {
      throw new IdpUnavailableError(this.name, `cannot read the gateway's client secret file ${this.settings.clientSecretFile}: ${(error as Error).message}`);
    }
    // RFC 6749 §2.3.1: both parts form-encoded before Basic.
    const form = (value: string) => encodeURIComponent(value).replace(/%20/g, '+');
    return `Basic ${Buffer.from(`${form(this.settings.clientId)}:${form(secret)}`).toString('base64')}`;
  }

  private async tokenRequest(form: Record<string, string>): Promise<IssuedToken> {
    const requestedAt = Date.now();
    let response: Response;
    try {
      response = await fetch(this.settings.tokenEndpoint, {
        method: 'POST',
        headers: { authorization: await this.clientAuthorization(), 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body: new URLSearchParams(form),
        signal: AbortSignal.timeout(this.settings.timeoutMs),
      });
    } catch (error) {
      if (error instanceof IdpUnavailableError) throw error;
      throw new IdpUnavailableError(this.name, unreachableReason(error));
    }
    let body: unknown;
    try {
      body = await response.json();
    } catch {
      body = undefined;
    }
    if (response.status >= 400 && response.status < 500) {
      const refusal = ErrorResponse.safeParse(body);
      const description = refusal.success ? refusal.data.error_description?.replace(/\s+/g, ' ').slice(0, MAX_DESCRIPTION) : undefined;
      throw new IdpRefusedError(this.name, refusal.success ? refusal.data.error : `HTTP ${response.status}`, description);
    }
    const issued = TokenResponse.safeParse(body);
    if (!response.ok || !issued.success) {
      throw new IdpUnavailableError(this.name, response.ok ? 'its token response has no access_token' : `it answered HTTP ${response.status}`);
    }
    const { access_token: accessToken, expires_in: expiresIn } = issued.data;
    const fromResponse = expiresIn !== undefined ? requestedAt + expiresIn * 1000 : undefined;
    const fromToken = jwtExpiryMs(accessToken);
    const candidates = [fromResponse, fromToken].filter((value): value is number => value !== undefined);
    return { accessToken, expiresAtMs: candidates.length > 0 ? Math.min(...candidates) : requestedAt + UNKNOWN_LIFETIME_MS };
  }
}
