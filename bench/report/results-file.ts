import * as fs from 'node:fs';
import * as path from 'node:path';
import { projectPath } from '../../control-plane/shared/paths';

/** Where the benches write their results (committed: the docs and ADRs quote them). */
export const RESULTS_DIR = projectPath('bench', 'results');

/**
 * A bench's results: bench/results/<name>.json (every figure) and <name>.md (the tables the docs
 * quote), the tables also on stdout so that a run ends with what it measured.
 */
export function writeBenchResults(name: string, figures: unknown, markdown: string, log?: (line: string) => void): void {
  fs.writeFileSync(path.join(RESULTS_DIR, `${name}.json`), `${JSON.stringify(figures, null, 2)}\n`);
  fs.writeFileSync(path.join(RESULTS_DIR, `${name}.md`), markdown);
  log?.(`wrote bench/results/${name}.json and .md`);
  process.stdout.write(markdown);
}
