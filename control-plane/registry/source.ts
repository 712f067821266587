/** A registry document as a source last published it. */
export interface RegistryDocument {
  /** The source's revision (the Portal's ETag, a file's content hash). */
  revision: string;
  /** Not yet validated: the controller validates every document the same way, whatever its source. */
  body: unknown;
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
