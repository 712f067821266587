import { z } from 'zod';

/**
 * Who is calling (docs/auth.md), as Envoy's jwt_authn validated it: the sidecar gets the token's
 * claims only from Envoy, in headers jwt_authn sets from the token it validated (CALLER_CLAIM_HEADERS),
 * never from anything a client sent.
 */
export interface CallerIdentity {
  issuer: string;
  subject: string;
  /** The client the token was issued to: `client_id` (RFC 9068), else `azp`. */
  clientId?: string;
  /** `scope` and `scp` (space-delimited, or lists), together. */
  scopes: string[];
  /** The strings at the route's groups claim. */
  groups: string[];
}

/**
 * The validated token's claims the gateway reads, each in a request header jwt_authn sets from the
 * token it validated (`claim_to_headers`): a string claim as it is, a list as base64 of its JSON.
 * A client's own copies are removed before jwt_authn runs (the listener's early header mutation),
 * and every call route removes them again before a backend could see them.
 */
export const CALLER_CLAIM_HEADERS = {
  iss: 'x-mcpgw-claim-iss',
  sub: 'x-mcpgw-claim-sub',
  client_id: 'x-mcpgw-claim-client-id',
  azp: 'x-mcpgw-claim-azp',
  scope: 'x-mcpgw-claim-scope',
  scp: 'x-mcpgw-claim-scp',
  /** The route's groups claim (its provider's: providers are per groups claim). */
  groups: 'x-mcpgw-claim-groups',
  preferred_username: 'x-mcpgw-claim-username',
} as const;
export type CallerClaim = keyof typeof CALLER_CLAIM_HEADERS;
export const CALLER_HEADER_NAMES: readonly string[] = Object.values(CALLER_CLAIM_HEADERS);

/** A claim header's raw value as Node's HTTP parser gives it (bytes as latin1 characters), as UTF-8 text. */
const text = (header: string | undefined) => (header === undefined || header === '' ? undefined : Buffer.from(header, 'latin1').toString('utf8'));

const stringList = z.array(z.unknown()).transform((values) => values.filter((value): value is string => typeof value === 'string'));

/** A claim that may be a list (Envoy: base64 of its JSON) or one string (as it is). */
function listClaim(header: string | undefined): string[] {
  const value = text(header);
  if (value === undefined) return [];
  if (/^[A-Za-z0-9+/]+={0,2}$/.test(value)) {
    try {
      const list = stringList.safeParse(JSON.parse(Buffer.from(value, 'base64').toString('utf8')));
      if (list.success) return list.data;
    } catch {
      // Not a list Envoy encoded: a string claim that only looks like base64.
    }
  }
  return [value];
}

const words = (claims: string[]) => claims.flatMap((claim) => claim.split(' ')).filter(Boolean);

/**
 * The caller of a request: undefined when Envoy validated no token (an open route: no issuer and
 * subject header), which then counts as no identity at all.
 */
export function callerIdentityOf(header: (name: string) => string | undefined): CallerIdentity | undefined {
  const issuer = text(header(CALLER_CLAIM_HEADERS.iss));
  const subject = text(header(CALLER_CLAIM_HEADERS.sub));
  if (issuer === undefined || subject === undefined) return undefined;
  const clientId = text(header(CALLER_CLAIM_HEADERS.client_id)) ?? text(header(CALLER_CLAIM_HEADERS.azp));
  return {
    issuer,
    subject,
    ...(clientId && { clientId }),
    scopes: [...new Set(words([...listClaim(header(CALLER_CLAIM_HEADERS.scope)), ...listClaim(header(CALLER_CLAIM_HEADERS.scp))]))],
    groups: listClaim(header(CALLER_CLAIM_HEADERS.groups)),
  };
}

/** The owner a session is bound to (docs/adr/0011-caller-identity.md): issuer and subject. */
export const ownerOf = (caller: CallerIdentity | undefined): string | undefined => (caller ? `${caller.issuer} ${caller.subject}` : undefined);

