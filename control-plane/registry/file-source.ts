import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { parse as parseYaml } from 'yaml';
import { RegistryDocument, RegistryDocumentError, RegistrySource } from './source';

export class RegistryFileError extends Error {}

const revisionOf = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16);

function parseRegistryText(file: string, text: string): RegistryDocument {
  const revision = revisionOf(text);
  try {
    return { revision, body: parseYaml(text) };
  } catch (error) {
    throw new RegistryDocumentError('syntax', `registry file ${file} is not valid YAML: ${(error as Error).message}`, revision);
  }
}

/** What tells one version of a file from the next, through symlinks (a ConfigMap's `..data` swap changes the inode). */
const fingerprint = (stats: fs.Stats) => `${stats.dev}:${stats.ino}:${stats.size}:${stats.mtimeMs}:${stats.ctimeMs}`;

/**
 * 500 ms: an in-place write (an editor, `cp`, a shell redirect) takes milliseconds; a Kubernetes
 * ConfigMap update is an atomic symlink swap and only waits this long once.
 */
export const DEFAULT_FILE_SETTLE_MS = 500;

/**
 * Reads a file only once it has stopped changing, so a half-written file is never taken for a
 * document: the file must be unchanged for `settleMs` (judged by its modification time, or by
 * watching it for that long when the time is recent or in the future), and unchanged across the
 * read itself. Follows symlinks on every read. Throws the file system's error when it cannot be read.
 */
export async function readSettledFile(file: string, settleMs: number, signal: AbortSignal): Promise<string> {
  for (;;) {
    signal.throwIfAborted();
    const before = await fs.promises.stat(file);
    const age = Date.now() - before.mtimeMs;
    if (age < settleMs) {
      await sleep(settleMs, undefined, { signal });
      if (fingerprint(await fs.promises.stat(file)) !== fingerprint(before)) continue;
    }
    const text = await fs.promises.readFile(file, 'utf8');
    const after = await fs.promises.stat(file);
    if (fingerprint(after) === fingerprint(before) && Buffer.byteLength(text) === after.size) return text;
  }
}

const WATCH_INTERVAL_MS = 250;

/** Resolves when the file (through its symlinks) may have changed, after at most waitMs, or on abort. */
function fileChange(file: string, waitMs: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      fs.unwatchFile(file, done);
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, waitMs);
    signal.addEventListener('abort', done);
    // Stat polling follows symlinks, so it sees in-place writes, editors that replace the file, and a
    // ConfigMap's `..data` symlink swap alike, also on file systems without change notifications.
    fs.watchFile(file, { interval: WATCH_INTERVAL_MS, persistent: false }, done);
  });
}

/** The static YAML registry (phase F1, docs/adr/0000-federation-decisions.md §10), re-read whenever the file changes. */
export class FileRegistrySource implements RegistrySource {
  readonly description: string;

  constructor(
    private readonly file: string,
    private readonly settleMs = DEFAULT_FILE_SETTLE_MS,
  ) {
    this.description = `file ${file}`;
  }

  private async read(signal: AbortSignal): Promise<string> {
    try {
      return await readSettledFile(this.file, this.settleMs, signal);
    } catch (error) {
      if (signal.aborted) throw error;
      throw new RegistryFileError(`cannot read registry file ${this.file}: ${(error as Error).message}`);
    }
  }

  async poll(knownRevision: string | undefined, waitMs: number, signal: AbortSignal): Promise<RegistryDocument | 'unchanged'> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const text = await this.read(signal);
      // Compared before parsing: a file already refused is not refused again until it changes.
      if (revisionOf(text) !== knownRevision) return parseRegistryText(this.file, text);
      if (Date.now() >= deadline || signal.aborted) return 'unchanged';
      await fileChange(this.file, deadline - Date.now(), signal);
    }
  }
}
