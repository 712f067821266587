import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import Redis from 'ioredis';
import { z } from 'zod';
import { canonicalJson } from '../audit/arguments-hash';
import { RISKS } from '../registry/model';

/**
 * Approvals (docs/approval-and-audit.md), kept in Redis so that every sidecar replica finds them: the
 * check that asked for one and the page where a person decides may run on different replicas.
 *
 *   <prefix>approval:req:<id>        the request: what is to be approved, for whom, until when
 *   <prefix>approval:bind:<binding>  the request id of a binding (caller, route, backend, tool, arguments)
 *   <prefix>approval:decision:<id>   the decision, written once (SET NX): the first approver wins
 *   <prefix>approval:history:<tool>  the last decisions on a tool, with their comments
 *   <prefix>approval:login:<state>   an approver's sign-in in progress (PKCE verifier, nonce)
 *   <prefix>approval:approver:<sid>  a signed-in approver's browser session
 *   <prefix>approval:cont:<key>      a continuation: the one retry of an approved call that its backend
 *                                    answered `input_required` (2026-07-28), by binding and the backend's
 *                                    requestState (or the keys of its inputRequests)
 *
 * A granted decision carries a grant signed with the gateway's key (HMAC-SHA256): the binding and
 * the expiry, so that whoever can write to Redis still cannot make a grant the check accepts. A
 * continuation is signed the same way, and names what it continues, so neither passes for the other.
 */


/** What an approval is bound to: who calls (or, on a route without identity, which session), where, what, with which arguments. */
export const bindingSchema = z
  .object({
    issuer: z.string().optional(),
    subject: z.string().optional(),
    session: z.string().optional(),
    route: z.string(),
    backend: z.string(),
    tool: z.string(),
    argumentsSha256: z.string(),
  })
  .strict();
export type ApprovalBinding = z.infer<typeof bindingSchema>;

export const personSchema = z.object({ issuer: z.string(), subject: z.string(), name: z.string().optional() }).strict();
export type Person = z.infer<typeof personSchema>;

export const approvalRequestSchema = z
  .object({
    id: z.string(),
    binding: bindingSchema,
    exposedTool: z.string(),
    risk: z.enum(RISKS),
    /** The group whose members may decide; absent: the caller themself. */
    approvers: z.string().optional(),
    /** A readable summary of the arguments: top-level names and shortened values. */
    summary: z.array(z.object({ name: z.string(), value: z.string() }).strict()),
    requestedBy: personSchema.optional(),
    createdAt: z.iso.datetime(),
    expiresAt: z.iso.datetime(),
  })
  .strict();
export type ApprovalRequest = z.infer<typeof approvalRequestSchema>;

export const decisionSchema = z
  .object({
    decision: z.enum(['granted', 'declined']),
    by: personSchema,
    at: z.iso.datetime(),
    comment: z.string().optional(),
    /** For a grant: `<payload>.<mac>`, both base64url; the payload is the binding, the id and the expiry. */
    grant: z.string().optional(),
  })
  .strict();
export type Decision = z.infer<typeof decisionSchema>;

export const historyEntrySchema = decisionSchema.omit({ grant: true }).extend({ id: z.string(), argumentsSha256: z.string(), requestedBy: personSchema.optional() });
export type HistoryEntry = z.infer<typeof historyEntrySchema>;

/** A grant, or (with `continues`: the SHA-256 of the continuation's token) a continuation of the call it let through. */
const grantPayloadSchema = z.object({ v: z.literal(1), id: z.string(), binding: bindingSchema, exp: z.number(), by: personSchema, continues: z.string().optional() }).strict();
type GrantPayload = z.infer<typeof grantPayloadSchema>;

/** An approval request id: 128 random bits, base64url. */
export const APPROVAL_ID_PATTERN = /^[A-Za-z0-9_-]{22}$/;
export const newApprovalId = () => randomBytes(16).toString('base64url');

/** The Redis key part of a binding: the SHA-256 of its canonical JSON. */
export const bindingKey = (binding: ApprovalBinding) => createHash('sha256').update(canonicalJson(binding)).digest('hex');

/** The minimum key length: HMAC-SHA256 gains nothing past 64 bytes and is weak below 32. */
export const MIN_KEY_BYTES = 32;

export function signGrant(key: Buffer, payload: GrantPayload): string {
  const body = Buffer.from(JSON.stringify(payload)).toString('base64url');
  return `${body}.${createHmac('sha256', key).update(body).digest('base64url')}`;
}

/** The grant's payload if the gateway's key signed it; undefined for anything else. */
export function verifyGrant(key: Buffer, grant: string): GrantPayload | undefined {
  const [body, mac, ...rest] = grant.split('.');
  if (!body || !mac || rest.length > 0) return undefined;
  const expected = createHmac('sha256', key).update(body).digest();
  const given = Buffer.from(mac, 'base64url');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
  try {
    const parsed = grantPayloadSchema.safeParse(JSON.parse(Buffer.from(body, 'base64url').toString('utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** A grant is good for this call when its signature, binding and expiry all hold (and it is no continuation). */
export function grantAllows(key: Buffer, grant: string, id: string, binding: ApprovalBinding, now: number): boolean {
  const payload = verifyGrant(key, grant);
  return payload !== undefined && payload.continues === undefined && payload.id === id && payload.exp > now && canonicalJson(payload.binding) === canonicalJson(binding);
}

/**
 * What names one continuation on the retry (MCP 2026-07-28, basic/patterns/mrtr): the backend's
 * `requestState`, which the client must echo verbatim; a backend that sent none is continued by the
 * retry that answers exactly the keys of its `inputRequests`.
 */
export function continuationToken(retry: { requestState?: string; answeredKeys: string[] }): string {
  return retry.requestState !== undefined ? `state:${retry.requestState}` : `keys:${JSON.stringify([...retry.answeredKeys].sort())}`;
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** A continuation of the call grant `id` let through, signed: good until `exp` for the retry `token` names. */
export function signContinuation(key: Buffer, grant: Omit<GrantPayload, 'v' | 'continues'>, token: string): string {
  return signGrant(key, { v: 1, ...grant, continues: sha256(token) });
}

/** The continuation's payload when signature, binding, token and expiry all hold. */
export function continuationAllows(key: Buffer, signed: string, binding: ApprovalBinding, token: string, now: number): GrantPayload | undefined {
  const payload = verifyGrant(key, signed);
  const holds = payload !== undefined && payload.continues === sha256(token) && payload.exp > now && canonicalJson(payload.binding) === canonicalJson(binding);
  return holds ? payload : undefined;
}

export interface ApprovalStoreSettings {
  prefix: string;
  key: Buffer;
  /** A declined or expired request is reported once for this long after it expired, then forgotten. */
  reportGraceMs: number;
  /** Decisions kept per tool (route, backend, tool) for the page's history. */
  historyLength: number;
  /** How long an approver stays signed in on the approval pages. */
  approverSessionMs: number;
}

export const APPROVAL_STORE_DEFAULTS = { reportGraceMs: 3_600_000, historyLength: 50, approverSessionMs: 3_600_000, loginMs: 600_000 };

const parseWith = <T>(schema: z.ZodType<T>, text: string | null): T | undefined => {
  if (text === null) return undefined;
  try {
    const parsed = schema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
};

export const loginSchema = z.object({ verifier: z.string(), nonce: z.string(), approvalId: z.string() }).strict();
export const approverSchema = personSchema.extend({ groups: z.array(z.string()), csrf: z.string() });
export type Approver = z.infer<typeof approverSchema>;

export class ApprovalStore {
  constructor(
    private readonly redis: Redis,
    readonly settings: ApprovalStoreSettings,
  ) {}

  private key(kind: string, id: string): string {
    return `${this.settings.prefix}approval:${kind}:${id}`;
  }

  /** The request a binding has, with its decision if there is one. */
  async findByBinding(binding: ApprovalBinding): Promise<{ request: ApprovalRequest; decision?: Decision } | undefined> {
    const id = await this.redis.get(this.key('bind', bindingKey(binding)));
    if (id === null) return undefined;
    return this.get(id);
  }

  async get(id: string): Promise<{ request: ApprovalRequest; decision?: Decision } | undefined> {
    const [request, decision] = await this.redis.mget(this.key('req', id), this.key('decision', id));
    const parsed = parseWith(approvalRequestSchema, request);
    return parsed && { request: parsed, decision: parseWith(decisionSchema, decision) };
  }

  /**
   * Stores a new request for its binding; when another replica stored one for the same binding a
   * moment before, that one is returned instead.
   */
  async create(request: ApprovalRequest): Promise<ApprovalRequest> {
    const keepMs = Date.parse(request.expiresAt) - Date.now() + this.settings.reportGraceMs;
    await this.redis.set(this.key('req', request.id), JSON.stringify(request), 'PX', keepMs);
    const bound = await this.redis.set(this.key('bind', bindingKey(request.binding)), request.id, 'PX', keepMs, 'NX');
    if (bound === 'OK') return request;
    const existing = await this.findByBinding(request.binding);
    return existing?.request ?? request;
  }

  /** Records the decision unless one was recorded first; the one that counts is returned. */
  async decide(request: ApprovalRequest, decision: Decision): Promise<Decision> {
    const keepMs = Math.max(1, Date.parse(request.expiresAt) - Date.now() + this.settings.reportGraceMs);
    const written = await this.redis.set(this.key('decision', request.id), JSON.stringify(decision), 'PX', keepMs, 'NX');
    if (written !== 'OK') return (await this.get(request.id))?.decision ?? decision;
    const history = this.key('history', canonicalJson([request.binding.route, request.binding.backend, request.binding.tool]));
    const entry: HistoryEntry = {
      id: request.id,
      decision: decision.decision,
      by: decision.by,
      at: decision.at,
      ...(decision.comment ? { comment: decision.comment } : {}),
      argumentsSha256: request.binding.argumentsSha256,
      ...(request.requestedBy ? { requestedBy: request.requestedBy } : {}),
    };
    await this.redis.multi().lpush(history, JSON.stringify(entry)).ltrim(history, 0, this.settings.historyLength - 1).exec();
    return decision;
  }

  /** The last decisions on the tool of a request, newest first. */
  async history(binding: ApprovalBinding): Promise<HistoryEntry[]> {
    const entries = await this.redis.lrange(this.key('history', canonicalJson([binding.route, binding.backend, binding.tool])), 0, -1);
    return entries.flatMap((entry) => parseWith(historyEntrySchema, entry) ?? []);
  }

  /**
   * Ends a binding's request (used up, or reported declined or expired): true for the one caller that
   * ended it, so a grant lets exactly one call through.
   */
  async release(binding: ApprovalBinding, id: string): Promise<boolean> {
    const key = this.key('bind', bindingKey(binding));
    // Only if it still names this request: compare and delete in one step.
    const removed = await this.redis.eval("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0", 1, key, id);
    return removed === 1;
  }

  private continuationKey(binding: ApprovalBinding, token: string): string {
    return this.key('cont', sha256(`${bindingKey(binding)}\n${sha256(token)}`));
  }

  /** Records that the approved call `id` may be continued once, until `exp`, by the retry that `token` names. */
  async recordContinuation(id: string, binding: ApprovalBinding, by: Person, token: string, exp: number): Promise<void> {
    const signed = signContinuation(this.settings.key, { id, binding, exp, by }, token);
    await this.redis.set(this.continuationKey(binding, token), signed, 'PX', Math.max(1, exp - Date.now()));
  }

  /** The continuation of an approved call that this retry names, used up (GETDEL: one retry per continuation); undefined when there is none. */
  async takeContinuation(binding: ApprovalBinding, token: string, now: number): Promise<{ id: string; by: Person } | undefined> {
    const signed = await this.redis.getdel(this.continuationKey(binding, token));
    const payload = signed === null ? undefined : continuationAllows(this.settings.key, signed, binding, token, now);
    return payload && { id: payload.id, by: payload.by };
  }

  async startLogin(state: string, login: z.infer<typeof loginSchema>): Promise<void> {
    await this.redis.set(this.key('login', state), JSON.stringify(login), 'PX', APPROVAL_STORE_DEFAULTS.loginMs);
  }

  /** A sign-in's state, once: a replayed callback finds nothing. */
  async finishLogin(state: string): Promise<z.infer<typeof loginSchema> | undefined> {
    return parseWith(loginSchema, await this.redis.getdel(this.key('login', state)));
  }

  async saveApprover(sessionId: string, approver: Approver): Promise<void> {
    await this.redis.set(this.key('approver', sessionId), JSON.stringify(approver), 'PX', this.settings.approverSessionMs);
  }

  async approver(sessionId: string): Promise<Approver | undefined> {
    return parseWith(approverSchema, await this.redis.get(this.key('approver', sessionId)));
  }

  close(): void {
    this.redis.disconnect();
  }
}
