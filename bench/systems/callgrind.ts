import * as fs from 'node:fs';
import * as path from 'node:path';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { envoyBinary } from '../../control-plane/devstack/envoy';
import { waitFor } from '../../control-plane/devstack/processes';
import { RepeatedValue, pairedAddedMedian, spreadOf } from '../load/stats';

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

/**
 * Envoy under callgrind, as ENVOY_BIN for a gateway stack: not instrumented until told
 * (callgrind_control --instr=on), so that it starts within the stack's time for it; one output file
 * per dump, named `outFile` (a `%p` in it becomes the pid, for several Envoys writing into one directory).
 */
export function callgrindEnvoy(outDir: string, outFile = path.join(outDir, 'callgrind.out')): string {
  const wrapper = path.join(outDir, 'envoy-under-callgrind.sh');
  fs.writeFileSync(wrapper, `#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=${outFile} --instr-atstart=no --dump-line=no "${envoyBinary()}" "$@"\n`, { mode: 0o755 });
  return wrapper;
}

/** The instructions every thread of a process under callgrind ran since its counters were last zeroed, without a dump. */
export function runningInstructions(pid: number): number {
  const out = execFileSync('callgrind_control', ['-e', 'Ir', String(pid)], { encoding: 'utf8' });
  return [...out.matchAll(/^\s*Th\s+\d+\s+([\d,]+)\s*$/gm)].reduce((sum, match) => sum + Number(match[1].replace(/,/g, '')), 0);
}

/** Zeroes the counters of a process under callgrind. */
export const zeroInstructions = (pid: number) => execFileSync('callgrind_control', ['-z', String(pid)], { stdio: 'ignore' });

/**
 * A markdown table of instructions per call by variant: thousands, median (min–max), and added over
 * `baseline`, the median of the differences within each repetition.
 */
export function instructionTable(counted: Record<string, RepeatedValue[]>, baseline: string): string[] {
  const kilo = (value: number | undefined) => (value === undefined ? '–' : `${value >= 0 ? '+' : ''}${(value / 1000).toFixed(1)}`);
  const rows = Object.entries(counted).map(([variant, values]) => {
    const spread = spreadOf(values.map((entry) => entry.value));
    return `| ${variant} | ${(spread.median / 1000).toFixed(1)} (${(spread.min / 1000).toFixed(1)}–${(spread.max / 1000).toFixed(1)}) | ${variant === baseline ? '' : kilo(pairedAddedMedian(counted[baseline], values))} |`;
  });
  return [`| variant | k instructions per call | added over ${baseline} (paired) |`, '| --- | --- | --- |', ...rows];
}
