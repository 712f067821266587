import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { RegistryDocument, RegistrySource } from './source';

export class RegistryFileError extends Error {}

export function readRegistryDocument(file: string): RegistryDocument {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new RegistryFileError(`cannot read registry file ${file}: ${(error as Error).message}`);
  }
  try {
    return { revision: createHash('sha256').update(text).digest('hex').slice(0, 16), body: parseYaml(text) };
  } catch (error) {
    throw new RegistryFileError(`registry file ${file} is not valid YAML: ${(error as Error).message}`);
  }
}

const WATCH_INTERVAL_MS = 250;

/** The static YAML registry (ADR-0041 phase F1), re-read whenever the file changes. */
export class FileRegistrySource implements RegistrySource {
  readonly description: string;

  constructor(private readonly file: string) {
    this.description = `file ${file}`;
  }

  async poll(knownRevision: string | undefined, waitMs: number, signal: AbortSignal): Promise<RegistryDocument | 'unchanged'> {
    const current = readRegistryDocument(this.file);
    if (current.revision !== knownRevision) return current;
    // Stat polling sees editors that replace the file as well as in-place writes.
    await new Promise<void>((resolve) => {
      const done = () => {
        fs.unwatchFile(this.file, done);
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, waitMs);
      signal.addEventListener('abort', done);
      fs.watchFile(this.file, { interval: WATCH_INTERVAL_MS, persistent: false }, done);
    });
    const next = readRegistryDocument(this.file);
    return next.revision === knownRevision ? 'unchanged' : next;
  }
}
