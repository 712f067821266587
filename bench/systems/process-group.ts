import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { GatewayStack, StackOptions } from '../../control-plane/devstack/stack';
import { ManagedProcess } from '../../control-plane/devstack/processes';
import { allocateStackPorts } from './ports';

/**
 * CPU placement: with two cores or more, the load generator (this process) runs on the last core and
 * every system under test on the others, so neither steals the other's cycles. With one core there
 * is nothing to separate.
 *
 * Priority: the machine may be shared (builds, other test runs). The bench and everything it starts
 * (children inherit it) run at a raised priority, so that such work waits for the bench rather than
 * stalling the load generator or a system under test for a scheduler slice of several ms.
 */
export interface CpuPlan {
  pinned: boolean;
  loadGenerator: string;
  systemsUnderTest: string;
  /** Unix nice value of the bench and its children (0 when raising it was not allowed). */
  niceness: number;
}

const RAISED_NICENESS = -10;

export function claimCpus(): CpuPlan {
  let niceness = 0;
  try {
    os.setPriority(RAISED_NICENESS);
    niceness = RAISED_NICENESS;
  } catch {
    // Not permitted (not root): the bench runs at normal priority and says so in the results.
  }
  const cores = os.availableParallelism();
  if (cores < 2) return { pinned: false, loadGenerator: 'any', systemsUnderTest: 'any', niceness };
  return { pinned: true, loadGenerator: String(cores - 1), systemsUnderTest: cores === 2 ? '0' : `0-${cores - 2}`, niceness };
}

/** Every thread of `pid` (-a): Envoy's workers and libuv's pool exist already; later ones inherit. */
function pin(pid: number, cpus: string): void {
  execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
}

/**
 * Everything the bench starts, so that all of it is stopped at the end, also on failure or Ctrl-C,
 * in reverse start order.
 */
export class ProcessGroup {
  private readonly members: { name: string; stop(): Promise<void> }[] = [];

  constructor(
    readonly logDir: string,
    readonly cpus: CpuPlan,
  ) {
    fs.mkdirSync(logDir, { recursive: true });
    if (cpus.pinned) pin(process.pid, cpus.loadGenerator);
  }

  spawn(name: string, command: string, args: string[]): ManagedProcess {
    const child = this.start(name, command, args);
    if (child.child.pid !== undefined) this.pinSystem(child.child.pid);
    return child;
  }

  /**
   * A process whose measure does not depend on the core it runs on (instructions counted under
   * callgrind), free to run on any core: it would inherit the load generator's otherwise.
   */
  spawnUnpinned(name: string, command: string, args: string[]): ManagedProcess {
    const child = this.start(name, command, args);
    if (this.cpus.pinned && child.child.pid !== undefined) pin(child.child.pid, `0-${os.cpus().length - 1}`);
    return child;
  }

  private start(name: string, command: string, args: string[]): ManagedProcess {
    const child = new ManagedProcess({ name, command, args, logFile: path.join(this.logDir, `${name}.log`) });
    this.members.push({ name, stop: () => child.stop() });
    return child;
  }

  /**
   * Starts a whole gateway stack and pins each of its processes to the systems' cores; `start` is
   * another revision's GatewayStack.start where a bench compares revisions (bench/revision-cost.ts).
   */
  async startGateway(
    name: string,
    options: Omit<StackOptions, 'ports'>,
    start: (options: StackOptions) => Promise<GatewayStack> = (stackOptions) => GatewayStack.start(stackOptions),
  ): Promise<GatewayStack> {
    const stack = await start({ ...options, ports: await allocateStackPorts() });
    this.members.push({ name, stop: () => stack.stop() });
    for (const member of stack.processes.values()) if (member.child.pid !== undefined) this.pinSystem(member.child.pid);
    return stack;
  }

  /**
   * Something started elsewhere that this group stops with the rest, pinned with the load generator:
   * a part of the deployment around the systems (a trace collector), not of the systems measured.
   */
  adoptBeside(name: string, pid: number | undefined, stop: () => Promise<void>): void {
    this.members.push({ name, stop });
    if (this.cpus.pinned && pid !== undefined) pin(pid, this.cpus.loadGenerator);
  }

  private pinSystem(pid: number): void {
    if (this.cpus.pinned) pin(pid, this.cpus.systemsUnderTest);
  }

  async stopAll(): Promise<void> {
    while (this.members.length > 0) {
      const member = this.members.pop()!;
      await member.stop().catch((error: Error) => process.stderr.write(`[bench] stopping ${member.name} failed: ${error.message}\n`));
    }
  }
}
