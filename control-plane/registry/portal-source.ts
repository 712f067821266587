import { createHash } from 'node:crypto';
import { RegistryDocument, RegistryDocumentError, RegistrySource } from './source';

/** Longest long-poll the contract allows (docs/portal-contract.md). */
export const PORTAL_MAX_WAIT_SECONDS = 60;

export interface PortalSourceOptions {
  /** Base URL of the Portal; the registry is GET {baseUrl}/v1/registry. */
  baseUrl: string;
  /** Sent as `Authorization: Bearer …` when set. */
  token?: string;
  /** Allowance on top of the long-poll wait before a request counts as failed. */
  requestTimeoutMs?: number;
}

function etagValue(header: string | null): string | undefined {
  return header?.replace(/^W\//, '').replace(/^"(.*)"$/, '$1') || undefined;
}

/**
 * Client of the Portal registry API (docs/portal-contract.md): conditional GET with If-None-Match,
 * held open by the Portal for up to `wait` seconds until the mapping changes (long-poll).
 */
export class PortalRegistrySource implements RegistrySource {
  readonly description: string;
  private readonly registryUrl: URL;

  constructor(private readonly options: PortalSourceOptions) {
    this.registryUrl = new URL('v1/registry', options.baseUrl.endsWith('/') ? options.baseUrl : `${options.baseUrl}/`);
    this.description = `portal ${this.registryUrl.origin}`;
  }

  async poll(knownRevision: string | undefined, waitMs: number, signal: AbortSignal): Promise<RegistryDocument | 'unchanged'> {
    const url = new URL(this.registryUrl);
    const headers: Record<string, string> = { accept: 'application/json' };
    const waitSeconds = knownRevision ? Math.min(Math.floor(waitMs / 1000), PORTAL_MAX_WAIT_SECONDS) : 0;
    if (knownRevision) headers['if-none-match'] = `"${knownRevision}"`;
    if (waitSeconds > 0) url.searchParams.set('wait', String(waitSeconds));
    if (this.options.token) headers.authorization = `Bearer ${this.options.token}`;
    const deadline = AbortSignal.timeout(waitSeconds * 1000 + (this.options.requestTimeoutMs ?? 5000));

    let response: Response;
    try {
      response = await fetch(url, { headers, signal: AbortSignal.any([signal, deadline]) });
    } catch (error) {
      const reason = deadline.aborted ? 'timed out' : ((error as Error).cause as Error | undefined)?.message ?? (error as Error).message;
      throw new Error(`Portal unreachable at ${url.origin}: ${reason}`);
    }
    if (response.status === 304) return 'unchanged';
    const answeredAt = performance.now();
    const text = await response.text();
    if (!response.ok) {
      throw new Error(`Portal answered ${response.status} ${response.statusText}${text ? `: ${text.slice(0, 200)}` : ''}`);
    }
    const revision = etagValue(response.headers.get('etag')) ?? createHash('sha256').update(text).digest('hex').slice(0, 16);
    if (text.trim() === '') throw new RegistryDocumentError('empty', `Portal sent an empty registry document (${response.status})`, revision);
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch (error) {
      // A body cut short (a Portal that died mid-response) is a refused document, not an outage.
      throw new RegistryDocumentError('syntax', `Portal sent a registry document that is not JSON: ${(error as Error).message}`, revision);
    }
    return { revision, body, readMs: performance.now() - answeredAt };
  }
}
