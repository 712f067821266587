import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import { coreMicros, coresOfList, threadTimes, uncountedThreadMicros } from '../../bench/scenarios/cpu-time';
import { SYSTEMS_CORE_ROWS, systemsCoreMicrosPerCall } from '../../bench/scenarios/tracing';

/** What scenario 5 reads to say where both cores went (bench/scenarios/tracing.ts, cpu-time.ts). */
describe('the cores of a CPU plan', () => {
  it('reads taskset lists: one core, a range, and both mixed', () => {
    expect(coresOfList('0')).toEqual([0]);
    expect(coresOfList('0-2')).toEqual([0, 1, 2]);
    expect(coresOfList('0,3-4')).toEqual([0, 3, 4]);
  });

  it("reads the cores' busy and idle time from /proc/stat: together they grow with the wall time", async () => {
    const cores = coresOfList(`0-${os.availableParallelism() - 1}`);
    const total = (times: { busy: number; idle: number }) => times.busy + times.idle;
    const before = coreMicros(cores);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const after = coreMicros(cores);
    // Each core's clock ticks run with the wall time (less what the hypervisor stole): at least half of it.
    expect(total(after) - total(before)).toBeGreaterThan(cores.length * 100_000);
    expect(after.softirq).toBeLessThanOrEqual(after.busy);
  });
});

describe("the systems' core per call", () => {
  it('sums the processes on the systems\' core and softirq, never the load generator or the collector beside it', () => {
    const run = {
      cpuMicrosPerCall: { envoy: 320, sidecar: 10, 'control-plane': 60, redis: 1, portal: 0, backend: 205, softirq: 14, jaeger: 15, 'load generator': 44 },
    };
    expect(systemsCoreMicrosPerCall(run)).toBe(610);
    expect(SYSTEMS_CORE_ROWS).not.toContain('jaeger');
  });

  it('counts a process the gateway did not start (no Redis, no Portal) as nothing, not as NaN', () => {
    expect(systemsCoreMicrosPerCall({ cpuMicrosPerCall: { envoy: 273, sidecar: 5, 'control-plane': 60 } })).toBe(338);
  });
});

describe("threads on the systems' core that no counted process explains", () => {
  const spin = (cpu: number) => spawn('taskset', ['-c', String(cpu), process.execPath, '-e', 'for (;;);'], { stdio: 'ignore' });
  const stopped = (child: ChildProcess) => new Promise((resolve) => child.once('exit', resolve).kill());

  it('names a busy process on the core by its label (or as started by the bench), and leaves out counted processes and other cores', async () => {
    const onCore = spin(0);
    const elsewhere = spin(1);
    try {
      await new Promise((resolve) => setTimeout(resolve, 300));
      const before = threadTimes();
      await new Promise((resolve) => setTimeout(resolve, 300));
      const after = threadTimes();
      const labels = new Map([
        [onCore.pid!, 'spinner on core 0'],
        [elsewhere.pid!, 'spinner on core 1'],
      ]);
      const uncounted = uncountedThreadMicros(before, after, { pids: new Set([process.pid]), cores: [0], labels, bench: process.pid });
      const unlabelled = uncountedThreadMicros(before, after, { pids: new Set([process.pid]), cores: [0], labels: new Map(), bench: process.pid });
      const counted = uncountedThreadMicros(before, after, { pids: new Set([process.pid, onCore.pid!]), cores: [0], labels, bench: process.pid });
      // Busy for the 300 ms between the snapshots, less what other work on the machine took of its core.
      expect(uncounted['spinner on core 0']).toBeGreaterThan(10_000);
      expect(uncounted['spinner on core 1']).toBeUndefined();
      expect(counted['spinner on core 0']).toBeUndefined();
      // Unlabelled, a process this one started says so (taskset execs node, whose main thread names itself).
      // Looked up by the spinner's own name: a test file that ran before in this worker may have left
      // another child of this process on the core.
      const spinnerKind = fs.readFileSync(`/proc/${onCore.pid}/comm`, 'utf8').trim().replace(/\d+/g, 'N');
      expect(unlabelled[`${spinnerKind} (started by the bench)`]).toBeGreaterThan(10_000);
    } finally {
      await Promise.all([stopped(onCore), stopped(elsewhere)]);
    }
  });
});
