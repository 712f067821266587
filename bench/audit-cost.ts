import * as fs from 'node:fs';
import { cpuSecondsOf } from './scenarios/cpu-time';
import * as path from 'node:path';
import { freePorts } from '../control-plane/devstack/processes';
import { GatewayStack } from '../control-plane/devstack/stack';
import { projectPath } from '../control-plane/shared/paths';

/**
 * What the audit costs per tools/call (ADR-0012): the call script hands each call's raw arguments to
 * the call log, and the control plane hashes them. Two real stacks (Envoy 1.40, control plane,
 * sidecar, Redis, the sample jobs Tool Service), one with --audit-log and one without, take the same
 * closed-loop load of stateless tools/call `jobs__echo` (no session: the call never leaves Envoy but
 * for the backend) with small and large arguments, in interleaved rounds; the CPU time of Envoy and of
 * the control plane over each round (from /proc) is divided by the calls answered.
 *
 *   node dist/bench/audit-cost.js [--rounds 3] [--calls 4000] [--concurrency 8]
 * Writes bench/results/audit-cost.md.
 */

const argument = (name: string, fallback: number) => {
  const index = process.argv.indexOf(`--${name}`);
  return index > 0 ? Number(process.argv[index + 1]) : fallback;
};
const ROUNDS = argument('rounds', 3);
const CALLS = argument('calls', 4000);
const CONCURRENCY = argument('concurrency', 8);
const SIZES = [{ label: '100 B', bytes: 100 }, { label: '64 KiB', bytes: 64 * 1024 }];

const cpuMicros = (pid: number) => cpuSecondsOf(pid) * 1_000_000;

async function load(url: string, bytes: number): Promise<number> {
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: 'x'.repeat(bytes) } } });
  let next = 0;
  let answered = 0;
  const worker = async () => {
    while (next < CALLS) {
      next += 1;
      const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body });
      await response.arrayBuffer();
      if (response.ok) answered += 1;
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return answered;
}

async function startStack(name: string, audit: boolean): Promise<GatewayStack> {
  const dir = projectPath('.run', 'bench', name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  const [jobs] = await freePorts(1);
  const registry = path.join(dir, 'registry.json');
  fs.writeFileSync(registry, JSON.stringify({ routes: [{ key: 'bench', toolServices: [{ name: 'jobs', url: `http://127.0.0.1:${jobs}/mcp` }] }] }));
  const stack = await GatewayStack.start({ registryFile: registry, logDir: dir, samples: [{ service: 'jobs', port: jobs }], audit, registrySource: 'file' });
  const url = stack.gatewayUrl('bench');
  for (let tries = 0; tries < 100; tries += 1) {
    const probe = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'jobs__echo', arguments: { text: 'x' } } }) });
    if ((await probe.text()).includes('"result"')) return stack;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`${name}: jobs__echo never answered`);
}

async function main(): Promise<void> {
  const stacks = { off: await startStack('audit-off', false), on: await startStack('audit-on', true) };
  const rows: string[] = [];
  try {
    for (const size of SIZES) {
      const totals = { off: { envoy: 0, controlPlane: 0, calls: 0, seconds: 0 }, on: { envoy: 0, controlPlane: 0, calls: 0, seconds: 0 } };
      for (let round = 0; round < ROUNDS; round += 1) {
        for (const mode of ['off', 'on'] as const) {
          const stack = stacks[mode];
          const envoyPid = stack.processes.get('envoy')!.child.pid!;
          const controlPlanePid = stack.processes.get('control-plane')!.child.pid!;
          const before = { envoy: cpuMicros(envoyPid), controlPlane: cpuMicros(controlPlanePid), at: performance.now() };
          const answered = await load(stack.gatewayUrl('bench'), size.bytes);
          // The call log is flushed every second: its CPU at the control plane comes after the load.
          await new Promise((resolve) => setTimeout(resolve, 2500));
          totals[mode].envoy += cpuMicros(envoyPid) - before.envoy;
          totals[mode].controlPlane += cpuMicros(controlPlanePid) - before.controlPlane;
          totals[mode].calls += answered;
          totals[mode].seconds += (performance.now() - before.at) / 1000 - 2.5;
        }
      }
      const per = (mode: 'off' | 'on', part: 'envoy' | 'controlPlane') => totals[mode][part] / totals[mode].calls;
      rows.push(
        `| ${size.label} | ${per('off', 'envoy').toFixed(0)} | ${per('on', 'envoy').toFixed(0)} | ${per('off', 'controlPlane').toFixed(0)} | ${per('on', 'controlPlane').toFixed(0)} | ${(totals.off.calls / totals.off.seconds).toFixed(0)} | ${(totals.on.calls / totals.on.seconds).toFixed(0)} |`,
      );
      process.stdout.write(`${rows.at(-1)}\n`);
    }
  } finally {
    await stacks.off.stop();
    await stacks.on.stop();
  }
  const report = `# Audit cost per tools/call

\`node dist/bench/audit-cost.js --rounds ${ROUNDS} --calls ${CALLS} --concurrency ${CONCURRENCY}\` on ${new Date().toISOString().slice(0, 10)}:
two real stacks side by side, stateless \`jobs__echo\` calls (the argument \`text\` of the given size),
${ROUNDS} interleaved rounds of ${CALLS} calls each; CPU time from /proc per answered call (10 ms clock
ticks: read the numbers as ±5 %). Everything shares the machine's 2 cores with the load generator.

| arguments | Envoy µs/call, audit off | audit on | control plane µs/call, audit off | audit on | calls/s off | calls/s on |
| --- | --- | --- | --- | --- | --- | --- |
${rows.join('\n')}
`;
  fs.writeFileSync(projectPath('bench', 'results', 'audit-cost.md'), report);
  process.stdout.write(report);
}

main().catch((error: unknown) => {
  process.stderr.write(`${(error as Error).stack}\n`);
  process.exit(1);
});
