import * as fs from 'node:fs';
import { execFileSync } from 'node:child_process';

/** The kernel's clock ticks per second, the unit of /proc's CPU times. */
export const CLOCK_TICKS_PER_SECOND = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

/** User + system CPU seconds of a process so far (/proc/<pid>/stat: utime and stime, after the command name). */
export function cpuSecondsOf(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
}

/**
 * CPU time of every thread of a process so far, in ns (/proc/<pid>/task/<tid>/schedstat, whose first
 * field is the time on a CPU): finer than the clock ticks of cpuSecondsOf, for work of a few ms.
 */
export function threadsCpuNanosecondsOf(pid: number): number {
  let ns = 0;
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return ns;
}

/**
 * Context switches of every live thread of a process so far (voluntary and not, from
 * /proc/<pid>/task/<tid>/status): how often its work was handed to or taken from the CPU.
 */
export function contextSwitchesOf(pid: number): number {
  let switches = 0;
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      const status = fs.readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
      for (const match of status.matchAll(/^(?:non)?voluntary_ctxt_switches:\s+(\d+)$/gm)) switches += Number(match[1]);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return switches;
}
