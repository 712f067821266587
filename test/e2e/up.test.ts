import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { ChildProcess, spawn } from 'node:child_process';
import { freePorts, listenOn, waitFor } from '../../control-plane/devstack/processes';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { projectPath } from '../../control-plane/shared/paths';
import { listedTools, testDir, writeRegistry, listedToolsOnceServed } from '../support/gateway-fixture';
import { commandLineOf, descendantsOf, isAlive } from '../support/process-tree';

/**
 * `mcpgw up` as a person runs it: the real command, real processes, on free ports of 127.0.0.1.
 * Every test checks that nothing it started is left running.
 */

const CLI = projectPath('dist', 'control-plane', 'cli', 'mcpgw.js');

class UpRun {
  readonly child: ChildProcess;
  stdout = '';
  stderr = '';
  /** Every process seen below `up` while it ran. */
  readonly seen = new Set<number>();
  readonly exited: Promise<number | null>;
  private readonly watcher: NodeJS.Timeout;

  constructor(args: string[]) {
    this.child = spawn(process.execPath, [CLI, 'up', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child.stdout!.on('data', (chunk: Buffer) => (this.stdout += chunk.toString()));
    this.child.stderr!.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
    this.watcher = setInterval(() => descendantsOf(this.child.pid!).forEach((pid) => this.seen.add(pid)), 50);
    this.exited = new Promise((resolve) =>
      this.child.once('exit', (code) => {
        clearInterval(this.watcher);
        resolve(code);
      }),
    );
  }

  untilOutput(pattern: RegExp, timeoutMs = 30000): Promise<string> {
    return waitFor(`up to print ${pattern}`, async () => pattern.exec(this.stdout)?.[0], { timeoutMs, intervalMs: 50 });
  }

  /** Processes seen below up that still live, with their command lines. */
  survivors(): string[] {
    return [...this.seen].filter(isAlive).map((pid) => `${pid} ${commandLineOf(pid)}`);
  }

  kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }
}

async function freeSetup(name: string) {
  const [listener, weather, jobs] = await freePorts(3);
  const dir = testDir(name);
  const routes = [{ key: 'demo', toolServices: [{ name: 'weather', url: `http://127.0.0.1:${weather}/mcp` }, { name: 'jobs', url: `http://127.0.0.1:${jobs}/mcp` }] }];
  return {
    dir,
    listener,
    samples: { weather, jobs },
    args: (extraRoutes: unknown[] = []) => [
      '--registry', writeRegistry(dir, { routes: [...routes, ...extraRoutes] }),
      '--listener-port', String(listener),
      '--sample-ports', `${weather},${jobs}`,
      '--log-dir', path.join(dir, 'logs'),
    ],
  };
}

function isJsonObject(line: string): boolean {
  try {
    return typeof JSON.parse(line) === 'object';
  } catch {
    return false;
  }
}

const noneLeft = (run: UpRun) => waitFor('every process up started to end', async () => (run.survivors().length === 0 ? true : undefined), { timeoutMs: 5000 }).catch(() => {
  throw new Error(`still running: ${run.survivors().join('; ')}`);
});

describe('mcpgw up tells the truth', () => {
  const runs: UpRun[] = [];
  const up = (args: string[]) => {
    const run = new UpRun(args);
    runs.push(run);
    return run;
  };
  afterAll(async () => {
    for (const run of runs) run.kill();
    await Promise.all(runs.map((run) => run.exited));
  });

  it('refuses a taken listener port in one line naming the holder and the fix, exits 1, and starts nothing', async () => {
    const setup = await freeSetup('up-port-taken');
    const holder: net.Server = await listenOn(setup.listener, '127.0.0.1');
    try {
      const run = up(setup.args());
      expect(await run.exited).toBe(1);
      expect(run.stderr).toBe(
        `mcpgw up: port ${setup.listener} (the gateway listener) is already in use by pid ${process.pid} (node): stop that process or choose another port with --listener-port\n`,
      );
      expect(run.stdout).not.toContain('is up');
      expect(run.survivors()).toEqual([]);
    } finally {
      await new Promise((resolve) => holder.close(resolve));
    }
  });

  it('fails at once on a port out of range, before anything starts', async () => {
    const run = up(['--listener-port', '99999']);
    expect(await run.exited).toBe(2);
    expect(run.stderr).toBe(
      "mcpgw up: option '--listener-port <port>' argument '99999' is invalid. must be a port number from 1 to 65535 (see 'mcpgw up --help')\n",
    );
    expect(run.seen.size).toBe(0);
  });

  it('fails a start at once when a process cannot listen, naming why, although another process holds the port', async () => {
    const dir = testDir('up-sample-port-taken');
    const [port] = await freePorts(1);
    const holder = await listenOn(port, '127.0.0.1');
    const stack = await GatewayStack.prepare({ registryFile: projectPath('registry', 'default.yaml'), logDir: dir });
    try {
      await expect(stack.startSample('weather', port)).rejects.toThrow(
        `tool-service-weather-${port} exited (code 1) before sample tool service weather to listen on 127.0.0.1:${port}: Error: listen EADDRINUSE: address already in use 127.0.0.1:${port}; its log: ${stack.logFileOf(`tool-service-weather-${port}`)}`,
      );
    } finally {
      await stack.stop();
      await new Promise((resolve) => holder.close(resolve));
    }
  });

  it('says what Envoy rejected (a NACK), exits 1 and stops everything it started', async () => {
    const setup = await freeSetup('up-nack');
    // Valid for the registry, rejected by Envoy: the CA file does not exist on Envoy's machine.
    const run = up(setup.args([{ key: 'secure', toolServices: [{ name: 'vault', url: 'https://127.0.0.1:9/mcp', transport: { tls: { caFile: '/nonexistent/mcpgw-ca.pem' } } }] }]));
    expect(await run.exited).toBe(1);
    expect(run.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/^mcpgw up: Envoy rejected its configuration \(NACK of Secret version \w+: .*\/nonexistent\/mcpgw-ca\.pem.*\); fix what it names in .*registry\.yaml and start again/),
    ]);
    expect(run.stdout).not.toContain('is up');
    expect(run.seen.size).toBeGreaterThanOrEqual(7);
    await noneLeft(run);
  });

  it('restarts a killed sidecar, serves again, writes only JSON lines, and leaves nothing behind when killed itself', async () => {
    const setup = await freeSetup('up-supervised');
    const run = up(setup.args());
    await run.untilOutput(/MCP federation gateway is up/);
    const url = `http://127.0.0.1:${setup.listener}/mcp/demo`;
    expect(run.stdout).toContain(`route demo: ${url} (5 tools)`);
    expect(run.stdout).toMatch(/^secured inside: +mutual TLS \(dev CA in .*\) on ADS, the catalog stream, Envoy → sidecar and sidecar → Envoy's egress listener; Redis ACL user mcpgw \(password in .*\); every admin port and the inside on 127\.0\.0\.1 only/m);
    // The embedded default takes no token, and says so (docs/auth.md).
    expect(run.stdout).toContain(`authentication: off on every route: anyone who reaches 127.0.0.1:${setup.listener} can call every tool`);
    expect(await listedTools(url)).toHaveLength(5);

    const sidecar = descendantsOf(run.child.pid!).find((pid) => / sidecar /.test(commandLineOf(pid)));
    expect(sidecar).toBeDefined();
    process.kill(sidecar!, 'SIGKILL');
    expect(await run.untilOutput(/sidecar exited \(signal SIGKILL\) and was restarted; serving again after [\d.]+ s \(restart 1\)/)).toBeTruthy();
    expect(await waitFor('tools/list through the gateway again', () => listedToolsOnceServed(url))).toHaveLength(5);

    const logDir = path.join(setup.dir, 'logs');
    const logFiles = fs.readdirSync(logDir).filter((file) => file.endsWith('.log'));
    expect(logFiles.sort()).toEqual([
      'control-plane.log', 'envoy-access.log', 'envoy.log', 'portal.log', 'redis.log', 'sidecar.log',
      `tool-service-jobs-${setup.samples.jobs}.log`, `tool-service-weather-${setup.samples.weather}.log`,
    ].sort());
    const notJson = logFiles.flatMap((file) =>
      fs.readFileSync(path.join(logDir, file), 'utf8').split('\n').filter((line) => line !== '' && !isJsonObject(line)).map((line) => `${file}: ${line}`),
    );
    expect(notJson).toEqual([]);

    const started = descendantsOf(run.child.pid!);
    expect(started.length).toBe(7);
    run.kill();
    await run.exited;
    await noneLeft(run);
    // The ports are free again: a new up could start at once.
    await expect(listenOn(setup.listener, '127.0.0.1').then((server) => new Promise((resolve) => server.close(resolve)))).resolves.toBeUndefined();
  });

  it('stops everything in order on SIGTERM and exits 0 (its Redis over TLS with --redis-tls)', async () => {
    const setup = await freeSetup('up-sigterm');
    const run = up([...setup.args(), '--redis-tls']);
    await run.untilOutput(/MCP federation gateway is up/);
    expect(run.stdout).toMatch(/^redis: +rediss:\/\/mcpgw@127\.0\.0\.1:\d+$/m);
    expect(run.stdout).toMatch(/^secured inside: .*Redis ACL user mcpgw over TLS/m);
    expect(await listedTools(`http://127.0.0.1:${setup.listener}/mcp/demo`)).toHaveLength(5);
    expect(descendantsOf(run.child.pid!).length).toBe(7);
    run.child.kill('SIGTERM');
    expect(await run.exited).toBe(0);
    expect(run.stdout).toContain('stopping ...');
    await noneLeft(run);
    const exits = fs.readFileSync(path.join(setup.dir, 'logs', 'sidecar.log'), 'utf8').split('\n').filter((line) => line.includes('process exited'));
    expect(exits.map((line) => JSON.parse(line).exit)).toEqual(['code 0']);
  });
});
