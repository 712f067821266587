import * as fs from 'node:fs';
import { execFileSync } from 'node:child_process';

/** The kernel's clock ticks per second, the unit of /proc's CPU times. */
export const CLOCK_TICKS_PER_SECOND = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

/** User + system CPU seconds of a process so far (/proc/<pid>/stat: utime and stime, after the command name). */
export function cpuSecondsOf(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
}
