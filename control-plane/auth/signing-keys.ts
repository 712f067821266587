import { JsonWebKeyInput, createPublicKey } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { z } from 'zod';
import { SigningKeySource } from '../ir/gateway-ir';
import { Logger } from '../shared/log';

/**
 * The issuers' signing keys (docs/adr/0011-caller-identity.md): the control plane reads each issuer's
 * JWKS and hands it to every Envoy inline in jwt_authn's configuration (ECDS), instead of each Envoy
 * fetching it. So an identity-provider outage changes nothing: the last keys that were read keep
 * validating in every Envoy, a fresh Envoy started during the outage gets them from the control plane,
 * and a control plane restarted during the outage reads them back from Redis.
 */

export interface SigningKeySettings {
  /** How often an issuer's keys are read again (a rotated key is served within this time). */
  refreshMs: number;
  /** First wait after a failed read, doubling up to retryMaxMs. */
  retryMinMs: number;
  retryMaxMs: number;
  /** Deadline of one read (discovery document and JWKS together). */
  timeoutMs: number;
}

export const SIGNING_KEY_DEFAULTS: SigningKeySettings = { refreshMs: 300_000, retryMinMs: 1000, retryMaxMs: 30_000, timeoutMs: 5000 };

/** A JWKS or discovery document is a few kilobytes; anything past this is not one. */
const MAX_DOCUMENT_BYTES = 1024 * 1024;

/** Signature algorithms Envoy's jwt_authn verifies (RFC 7518, RFC 8037). */
const SIGNATURE_ALGORITHMS = new Set(['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA']);

const jwkSchema = z.looseObject({
  kty: z.enum(['RSA', 'EC', 'OKP']),
  use: z.string().optional(),
  alg: z.string().optional(),
  kid: z.string().optional(),
  crv: z.string().optional(),
});
/** Curves Envoy's jwt_authn verifies with (ES256/384/512, EdDSA over Ed25519). */
const CURVES: Record<string, Set<string>> = { EC: new Set(['P-256', 'P-384', 'P-521']), OKP: new Set(['Ed25519']) };

/** A key that is what it says: its parameters make a public key (one that does not would make Envoy refuse every issuer's keys). */
function importable(key: Record<string, unknown>): boolean {
  try {
    return createPublicKey({ key: key as JsonWebKeyInput['key'], format: 'jwk' }).type === 'public';
  } catch {
    return false;
  }
}
const jwksSchema = z.object({ keys: z.array(z.unknown()) });
const discoverySchema = z.looseObject({ issuer: z.string(), jwks_uri: z.string().url() });

/**
 * The keys of a JWKS that verify signatures. Encryption keys, keys of other algorithms or curves, and
 * keys whose parameters make no public key are left out: one key Envoy cannot read makes it refuse
 * jwt_authn's whole configuration, the routes of every issuer with it.
 */
export function signatureKeys(document: unknown): Record<string, unknown>[] {
  const { keys } = jwksSchema.parse(document);
  return keys.flatMap((key) => {
    const parsed = jwkSchema.safeParse(key);
    if (!parsed.success) return [];
    const { kty, use, alg, crv } = parsed.data;
    if (use !== undefined && use !== 'sig') return [];
    if (alg !== undefined && !SIGNATURE_ALGORITHMS.has(alg)) return [];
    if (CURVES[kty] && !(crv !== undefined && CURVES[kty].has(crv))) return [];
    return importable(parsed.data) ? [parsed.data] : [];
  });
}

async function readJson(url: string, signal: AbortSignal): Promise<unknown> {
  const response = await fetch(url, { signal, headers: { accept: 'application/json' }, redirect: 'follow' });
  if (!response.ok) throw new Error(`${url} answered HTTP ${response.status}`);
  const declared = Number(response.headers.get('content-length') ?? '0');
  if (declared > MAX_DOCUMENT_BYTES) throw new Error(`${url} is ${declared} bytes; a key document is at most ${MAX_DOCUMENT_BYTES}`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of response.body ?? []) {
    size += chunk.length;
    if (size > MAX_DOCUMENT_BYTES) throw new Error(`${url} is over ${MAX_DOCUMENT_BYTES} bytes; a key document is not`);
    chunks.push(Buffer.from(chunk));
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new Error(`${url} is not JSON`);
  }
}

/** OpenID Connect discovery (the issuer's path + /.well-known/openid-configuration), else RFC 8414 (the well-known path inserted before it). */
function discoveryUrls(issuer: string): string[] {
  const url = new URL(issuer);
  const path = url.pathname.replace(/\/$/, '');
  return [`${url.origin}${path}/.well-known/openid-configuration`, `${url.origin}/.well-known/oauth-authorization-server${path}`];
}

async function discoverJwksUri(issuer: string, signal: AbortSignal): Promise<string> {
  const failures: string[] = [];
  for (const url of discoveryUrls(issuer)) {
    try {
      const discovery = discoverySchema.parse(await readJson(url, signal));
      // OpenID Connect Discovery §4.3, RFC 8414 §3.3: a document for another issuer must not be used.
      if (discovery.issuer !== issuer) throw new Error(`${url} is the document of issuer ${discovery.issuer}`);
      return discovery.jwks_uri;
    } catch (error) {
      if (signal.aborted) throw error;
      failures.push((error as Error).message);
    }
  }
  throw new Error(`no discovery document of ${issuer}: ${failures.join('; ')}`);
}

/** An issuer's signature keys as a JWKS document for Envoy. */
export async function readSigningKeys(source: SigningKeySource, timeoutMs: number): Promise<string> {
  const signal = AbortSignal.timeout(timeoutMs);
  const jwksUri = source.jwksUri ?? (await discoverJwksUri(source.issuer, signal));
  const keys = signatureKeys(await readJson(jwksUri, signal));
  if (keys.length === 0) throw new Error(`${jwksUri} holds no signature key (RSA, EC or OKP, use sig)`);
  return JSON.stringify({ keys });
}

/** What the control plane knows of an issuer's keys (/status). */
export interface SigningKeyStatus {
  source: string;
  issuer: string;
  jwksUri?: string;
  /** ok: read at the last try; stale: serving the last keys read while reads fail; missing: never read (its routes answer 503). */
  state: 'ok' | 'stale' | 'missing';
  keyIds: string[];
  readAt?: string;
  lastError?: string;
  failingSince?: string;
}

interface KeyEntry {
  source: SigningKeySource;
  jwks?: string;
  readAt?: Date;
  lastError?: string;
  failingSince?: Date;
  failures: number;
  timer?: NodeJS.Timeout;
}

/** Where the last keys read are kept across control-plane restarts (Redis). */
export interface SigningKeyPersistence {
  save(source: string, saved: SavedSigningKeys): void;
  load(): Promise<Map<string, SavedSigningKeys>>;
}

export const savedSigningKeysSchema = z.object({ issuer: z.string(), jwks: z.string(), readAt: z.string() });
export type SavedSigningKeys = z.output<typeof savedSigningKeysSchema>;

const keyIdsOf = (jwks: string | undefined) =>
  jwks ? (JSON.parse(jwks) as { keys: { kid?: string }[] }).keys.map((key) => key.kid ?? '(no kid)') : [];

/**
 * The keys of every issuer the registry names, each read at once when it appears, again every
 * refreshMs, and after a failure with backoff; a failed read never drops keys read before. Emits
 * 'change' whenever the keys Envoy should have change, and 'read' ('ok' | 'failed') after each read.
 */
export class SigningKeyStore extends EventEmitter {
  private readonly entries = new Map<string, KeyEntry>();
  private saved = new Map<string, SavedSigningKeys>();
  private closed = false;

  constructor(
    private readonly settings: SigningKeySettings,
    private readonly log: Logger,
    private readonly persistence?: SigningKeyPersistence,
    private readonly read: (source: SigningKeySource, timeoutMs: number) => Promise<string> = readSigningKeys,
  ) {
    super();
  }

  /** Cold start: the keys kept in Redis, used for a source until it is read (they may be all there is while the identity provider is down). */
  async restore(): Promise<void> {
    this.saved = (await this.persistence?.load()) ?? new Map();
  }

  /** The registry's key sources now: new ones are read at once (resolves when each answered or failed), gone ones forgotten. */
  async setSources(sources: SigningKeySource[]): Promise<void> {
    const wanted = new Map(sources.map((source) => [source.name, source]));
    let changed = false;
    for (const [name, entry] of this.entries) {
      if (wanted.has(name)) continue;
      clearTimeout(entry.timer);
      this.entries.delete(name);
      changed ||= entry.jwks !== undefined;
    }
    const added: KeyEntry[] = [];
    for (const source of wanted.values()) {
      if (this.entries.has(source.name)) continue;
      const saved = this.saved.get(source.name);
      const entry: KeyEntry = { source, failures: 0, ...(saved?.issuer === source.issuer && { jwks: saved.jwks, readAt: new Date(saved.readAt) }) };
      changed ||= entry.jwks !== undefined;
      this.entries.set(source.name, entry);
      added.push(entry);
    }
    if (changed) this.emit('change');
    await Promise.all(added.map((entry) => this.refresh(entry)));
  }

  /** The keys Envoy gets, by source name. */
  keys(): Map<string, string> {
    return new Map([...this.entries].flatMap(([name, entry]) => (entry.jwks ? [[name, entry.jwks] as const] : [])));
  }

  status(): SigningKeyStatus[] {
    return [...this.entries.values()].map((entry) => ({
      source: entry.source.name,
      issuer: entry.source.issuer,
      ...(entry.source.jwksUri && { jwksUri: entry.source.jwksUri }),
      state: !entry.jwks ? 'missing' : entry.failingSince ? 'stale' : 'ok',
      keyIds: keyIdsOf(entry.jwks),
      ...(entry.readAt && { readAt: entry.readAt.toISOString() }),
      ...(entry.lastError && { lastError: entry.lastError }),
      ...(entry.failingSince && { failingSince: entry.failingSince.toISOString() }),
    }));
  }

  private async refresh(entry: KeyEntry): Promise<void> {
    const { source } = entry;
    try {
      const jwks = await this.read(source, this.settings.timeoutMs);
      if (this.entries.get(source.name) !== entry) return;
      const changed = jwks !== entry.jwks;
      if (entry.failingSince) this.log.info('signing keys read again', { issuer: source.issuer, failingSince: entry.failingSince.toISOString() });
      Object.assign(entry, { jwks, readAt: new Date(), lastError: undefined, failingSince: undefined, failures: 0 });
      this.emit('read', 'ok');
      if (changed) {
        this.log.info('signing keys changed', { issuer: source.issuer, keys: keyIdsOf(jwks) });
        this.persistence?.save(source.name, { issuer: source.issuer, jwks, readAt: entry.readAt!.toISOString() });
        this.emit('change');
      }
    } catch (error) {
      if (this.entries.get(source.name) !== entry) return;
      entry.lastError = (error as Error).message;
      entry.failingSince ??= new Date();
      entry.failures += 1;
      this.emit('read', 'failed');
      this.log.warn(entry.jwks ? 'cannot read signing keys; the last keys read keep validating' : 'cannot read signing keys; routes of this issuer answer 503 until they are read', {
        issuer: source.issuer,
        error: entry.lastError,
      });
    }
    this.schedule(entry);
  }

  private schedule(entry: KeyEntry): void {
    if (this.closed) return;
    const { refreshMs, retryMinMs, retryMaxMs } = this.settings;
    const wait = entry.failures === 0 ? refreshMs : Math.min(retryMinMs * 2 ** (entry.failures - 1), retryMaxMs) * (0.8 + Math.random() * 0.4);
    entry.timer = setTimeout(() => void this.refresh(entry), wait);
    entry.timer.unref();
  }

  close(): void {
    this.closed = true;
    for (const entry of this.entries.values()) clearTimeout(entry.timer);
  }
}
