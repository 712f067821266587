import * as fs from 'node:fs';
import * as path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { waitFor } from '../../control-plane/devstack/processes';

const execFileAsync = promisify(execFile);

/**
 * The instructions a process under Valgrind's callgrind ran since its counters were last zeroed or
 * dumped: asks callgrind for a dump (`callgrind_control --dump`) and reads the total of the dump file
 * that appears for it — the one file in `dir` named `filePrefix…` that was not there before. Under
 * callgrind a dump can take seconds to be written on a loaded machine, hence the minute's wait.
 */
export async function dumpedInstructions(pid: number, dir: string, filePrefix: string): Promise<number> {
  const dumps = () => fs.readdirSync(dir).filter((name) => name.startsWith(filePrefix));
  const before = new Set(dumps());
  await execFileAsync('callgrind_control', ['--dump', String(pid)]);
  const total = await waitFor(
    `callgrind to dump the counts of pid ${pid}`,
    async () => {
      const added = dumps().filter((name) => !before.has(name));
      return added.length === 1 ? /^(?:totals|summary): (\d+)/m.exec(fs.readFileSync(path.join(dir, added[0]), 'utf8'))?.[1] : undefined;
    },
    { timeoutMs: 60_000 },
  );
  return Number(total);
}
