import { z } from 'zod';

/**
 * Who is calling (docs/auth.md), as Envoy's jwt_authn validated it: the sidecar gets the token's
 * payload only from Envoy, in a header Envoy sets from its own metadata on every gateway-lane route
 * and in every session check (a client's copy is removed first), never from anything a client sent.
 */
export interface CallerIdentity {
  issuer: string;
  subject: string;
  /** The client the token was issued to: `client_id` (RFC 9068), else `azp`. */
  clientId?: string;
  /** `scope` (space-delimited, or a list once Envoy normalized it) and `scp`, together. */
  scopes: string[];
  /** The strings at the route's groups claim. */
  groups: string[];
}

/** The header Envoy sets from `%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:jwt_payload)%`: the payload as JSON. */
export const CALLER_PAYLOAD_HEADER = 'x-mcpgw-jwt-payload';
/** The dynamic-metadata namespace and key jwt_authn leaves the validated payload under. */
export const JWT_METADATA = { namespace: 'envoy.filters.http.jwt_authn', payloadKey: 'jwt_payload' } as const;

const scopeClaim = z.union([z.string(), z.array(z.string())]).optional();

const payloadSchema = z.looseObject({
  iss: z.string().min(1),
  sub: z.string().min(1),
  client_id: z.string().min(1).optional(),
  azp: z.string().min(1).optional(),
  scope: scopeClaim,
  scp: scopeClaim,
});

const words = (claim: string | string[] | undefined) => (typeof claim === 'string' ? claim.split(' ') : (claim ?? [])).filter(Boolean);

function claimAt(payload: Record<string, unknown>, path: readonly string[]): unknown {
  return path.reduce<unknown>((node, name) => (typeof node === 'object' && node !== null && !Array.isArray(node) ? (node as Record<string, unknown>)[name] : undefined), payload);
}

function groupsAt(payload: Record<string, unknown>, path: readonly string[]): string[] {
  const value = claimAt(payload, path);
  if (typeof value === 'string') return [value];
  return Array.isArray(value) ? value.filter((group): group is string => typeof group === 'string') : [];
}

/** The owner a session is bound to (docs/adr/0011-caller-identity.md): issuer and subject. */
export const ownerOf = (caller: CallerIdentity | undefined): string | undefined => (caller ? `${caller.issuer} ${caller.subject}` : undefined);

/** One payload is parsed once: every request made with the same token carries the same header. */
const PARSED_MAX = 10_000;
const parsed = new Map<string, CallerIdentity | undefined>();

/**
 * The caller of a request: undefined when Envoy validated no token (an open route), and also for a
 * payload that is not one (no iss or sub), which then counts as no identity at all.
 * `header` is the raw value as Node's HTTP parser gives it (bytes as latin1 characters).
 */
export function callerIdentityOf(header: string | undefined, groupsClaim: readonly string[]): CallerIdentity | undefined {
  if (header === undefined || header === '') return undefined;
  const key = `${groupsClaim.join('\n')}\n\n${header}`;
  if (parsed.has(key)) return parsed.get(key);
  let caller: CallerIdentity | undefined;
  try {
    const payload = payloadSchema.safeParse(JSON.parse(Buffer.from(header, 'latin1').toString('utf8')));
    if (payload.success) {
      const { iss, sub, client_id: clientId, azp, scope, scp } = payload.data;
      caller = {
        issuer: iss,
        subject: sub,
        ...((clientId ?? azp) && { clientId: clientId ?? azp }),
        scopes: [...new Set([...words(scope), ...words(scp)])],
        groups: groupsAt(payload.data, groupsClaim),
      };
    }
  } catch {
    caller = undefined;
  }
  if (parsed.size >= PARSED_MAX) parsed.clear();
  parsed.set(key, caller);
  return caller;
}
