/** A registry document as a source last published it. */
export interface RegistryDocument {
  /** The source's revision (the Portal's ETag, a file's content hash). */
  revision: string;
  /** Not yet validated: the controller validates every document the same way, whatever its source. */
  body: unknown;
  /** How long reading and parsing the answer took once the source had answered (a long-poll's wait excluded), when the source measures it. */
  readMs?: number;
}

/**
 * Where the route → Tool Service mapping comes from: the Portal API, or a static file (F1).
 * Small on purpose: fetching is the source's job, validation and merging are the controller's.
 */
export interface RegistrySource {
  /** For logs, metrics and status, e.g. "portal http://portal:8080" or "file /etc/mcpgw/registry.yaml". */
  readonly description: string;
  /**
   * Resolves with the document as soon as its revision differs from `knownRevision`, or with
   * 'unchanged' after at most `waitMs`. Rejects when the source is unreachable, answers with an
   * error status, or sends something that is not a document at all.
   */
  poll(knownRevision: string | undefined, waitMs: number, signal: AbortSignal): Promise<RegistryDocument | 'unchanged'>;
  close?(): void;
}

/**
 * Why a whole document was refused (docs/registry.md): `syntax` not JSON or YAML (cut short, say),
 * `empty` nothing in it, `not-a-registry` no list of routes at its top (`{}`, `routes: null`).
 */
export const DOCUMENT_REJECTION_REASONS = ['syntax', 'empty', 'not-a-registry'] as const;
export type DocumentRejectionReason = (typeof DOCUMENT_REJECTION_REASONS)[number];

/**
 * A document that is not a registry at all. It declares no routes, so it cannot say that any route
 * left: the gateway keeps the last good registry and reports the document (docs/adr/0000-portal-registry-decisions.md §6).
 */
export class RegistryDocumentError extends Error {
  constructor(
    readonly reason: DocumentRejectionReason,
    message: string,
    /** The source's revision of the refused document, when known: the next poll waits for a newer one. */
    readonly revision?: string,
  ) {
    super(message);
  }
}
