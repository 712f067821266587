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
 * Time of the given cores so far (µs) from /proc/stat: softirq (network delivery on loopback runs there,
 * charged to no process), busy (user, nice, system, irq and softirq of whatever ran there) and idle
 * (idle and iowait); steal, the hypervisor's, is in neither.
 */
export function coreMicros(cores: number[]): { softirq: number; busy: number; idle: number } {
  const lines = fs.readFileSync('/proc/stat', 'utf8').split('\n');
  const total = { softirq: 0, busy: 0, idle: 0 };
  for (const core of cores) {
    const [user, nice, system, idle, iowait, irq, softirq] = lines.find((line) => line.startsWith(`cpu${core} `))!.trim().split(/\s+/).slice(1).map(Number);
    total.softirq += softirq;
    total.busy += user + nice + system + irq + softirq;
    total.idle += idle + iowait;
  }
  const micros = (ticks: number) => (ticks * 1_000_000) / CLOCK_TICKS_PER_SECOND;
  return { softirq: micros(total.softirq), busy: micros(total.busy), idle: micros(total.idle) };
}

/** The cores of a taskset list such as `0`, `0-2` or `0,3-4`. */
export function coresOfList(list: string): number[] {
  return list.split(',').flatMap((part) => {
    const [first, last = first] = part.split('-').map(Number);
    return Array.from({ length: last - first + 1 }, (_, index) => first + index);
  });
}

/**
 * How long the main thread of a process has waited, runnable, for a core so far (µs): the second field
 * of /proc/<pid>/schedstat. For the load generator, the time its event loop was kept from reading
 * answers and sending the next requests by whatever else ran on its core.
 */
export function runQueueWaitMicrosOf(pid: number): number {
  return Number(fs.readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[1]) / 1000;
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

/** One thread's CPU time so far (ns, /proc/<pid>/task/<tid>/schedstat) and the core it last ran on. */
interface ThreadTime {
  /** The process's name (its main thread's command), or the kernel thread's. */
  process: string;
  pid: number;
  /** The process's parent: to tell the bench's own processes from the rest of the machine's. */
  parentPid: number;
  cpuNanos: number;
  core: number;
}

/** Every thread on the machine, by `pid/tid`: for naming what ran on a core that no counted process explains. */
export function threadTimes(): Map<string, ThreadTime> {
  const threads = new Map<string, ThreadTime>();
  for (const pidEntry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pidEntry)) continue;
    try {
      const process = fs.readFileSync(`/proc/${pidEntry}/comm`, 'utf8').trim();
      for (const tid of fs.readdirSync(`/proc/${pidEntry}/task`)) {
        const stat = fs.readFileSync(`/proc/${pidEntry}/task/${tid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
        const cpuNanos = Number(fs.readFileSync(`/proc/${pidEntry}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
        // Field 39 of stat (`processor`), the 37th after the command name.
        // Field 4 of stat (the parent's pid), the 2nd after the command name.
        threads.set(`${pidEntry}/${tid}`, { process, pid: Number(pidEntry), parentPid: Number(stat[1]), cpuNanos, core: Number(stat[36]) });
      }
    } catch {
      // The process or thread ended between the listing and the read.
    }
  }
  return threads;
}

/**
 * CPU µs that threads outside `countedPids` spent between two snapshots, by process name, for threads
 * last seen on one of `cores` (exact for pinned threads and per-core kernel threads; for a thread free
 * to move, the core it was on at the second snapshot stands for the whole interval). Threads that ended
 * in between are missing: their time shows only in their process's total (counted processes) or nowhere.
 */
export function uncountedThreadMicros(
  before: Map<string, ThreadTime>,
  after: Map<string, ThreadTime>,
  counted: { pids: Set<number>; cores: number[]; labels: Map<number, string>; bench: number },
): Record<string, number> {
  const parentOf = new Map([...after.values()].map((thread) => [thread.pid, thread.parentPid]));
  const startedByBench = (pid: number) => {
    for (let ancestor = parentOf.get(pid); ancestor !== undefined && ancestor > 1; ancestor = parentOf.get(ancestor)) if (ancestor === counted.bench) return true;
    return false;
  };
  const byProcess: Record<string, number> = {};
  for (const [key, thread] of after) {
    if (counted.pids.has(thread.pid) || !counted.cores.includes(thread.core)) continue;
    const spent = (thread.cpuNanos - (before.get(key)?.cpuNanos ?? 0)) / 1000;
    // Kernel threads differ by core and instance numbers only (kworker/0:1-events): one entry per kind.
    const kind = thread.process.replace(/\d+/g, 'N');
    const name = counted.labels.get(thread.pid) ?? (startedByBench(thread.pid) ? `${kind} (started by the bench)` : kind);
    if (spent > 0) byProcess[name] = (byProcess[name] ?? 0) + spent;
  }
  return byProcess;
}
