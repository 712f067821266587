import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import { z } from 'zod';
import { ManagedProcess } from '../../control-plane/devstack/processes';
import { listen } from '../../control-plane/shared/http-listen';

/**
 * The one Keycloak of a test run, kept by a small process of its own (started by the jest global
 * setup, see keycloak-global-setup.ts) so that every test process can stop and start it for outage
 * tests, and so that it never outlives the run: the supervisor's stdin is a pipe from jest, and when it
 * closes — teardown, or jest dying however it dies — Keycloak's whole process group is stopped and its
 * data folder removed.
 *
 * Control API on 127.0.0.1:<controlPort>: POST /stop (answers once Keycloak has exited), POST /start
 * (answers once it is spawned; readiness is the caller's to wait for), GET /status.
 */
export const SupervisorConfig = z.object({
  keycloakHome: z.string(),
  javaHome: z.string(),
  realmFile: z.string(),
  /**
   * Holds Keycloak's H2 database, so a restart keeps the realm, its users and its signing keys (and
   * the run file tests read); removed when the supervisor exits.
   */
  dataDir: z.string(),
  port: z.number().int(),
  managementPort: z.number().int(),
  controlPort: z.number().int(),
  adminUser: z.string(),
  adminPassword: z.string(),
  logFile: z.string(),
});
export type SupervisorConfig = z.infer<typeof SupervisorConfig>;

export const HOST = '127.0.0.1';

export function keycloakBaseUrl(config: Pick<SupervisorConfig, 'port'>): string {
  return `http://${HOST}:${config.port}`;
}

function startKeycloak(config: SupervisorConfig): ManagedProcess {
  // Keycloak imports realms only from its own data/import folder (once: a realm already in the
  // database is kept as it is).
  const importDir = path.join(config.keycloakHome, 'data', 'import');
  fs.mkdirSync(importDir, { recursive: true });
  fs.copyFileSync(config.realmFile, path.join(importDir, path.basename(config.realmFile)));
  return new ManagedProcess({
    name: 'keycloak',
    command: path.join(config.keycloakHome, 'bin', 'kc.sh'),
    args: [
      'start-dev',
      '--import-realm',
      `--http-host=${HOST}`,
      `--http-port=${config.port}`,
      `--http-management-port=${config.managementPort}`,
      // A fixed issuer, whatever Host header a client sends.
      `--hostname=${keycloakBaseUrl(config)}`,
      `--db-url=jdbc:h2:file:${path.join(config.dataDir, 'keycloakdb')};NON_KEYWORDS=VALUE`,
    ],
    env: {
      JAVA_HOME: config.javaHome,
      // Keycloak's default heap is a share of the machine's memory; tests need far less.
      JAVA_OPTS_KC_HEAP: '-Xms64m -Xmx768m',
      KC_BOOTSTRAP_ADMIN_USERNAME: config.adminUser,
      KC_BOOTSTRAP_ADMIN_PASSWORD: config.adminPassword,
    },
    logFile: config.logFile,
  });
}

async function main(): Promise<void> {
  const config = SupervisorConfig.parse(JSON.parse(process.argv[2] ?? ''));
  let keycloak: ManagedProcess | undefined = startKeycloak(config);
  let transition = Promise.resolve();
  /** One start or stop at a time, in the order asked. */
  const serialized = (step: () => Promise<void>) => (transition = transition.then(step, step));

  const stopKeycloak = () =>
    serialized(async () => {
      await keycloak?.stop(15000);
      keycloak = undefined;
    });

  const control = await listen((req: http.IncomingMessage, res: http.ServerResponse) => {
    const answer = (status: number, body?: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(body === undefined ? undefined : JSON.stringify(body));
    };
    if (req.method === 'GET' && req.url === '/status') {
      answer(200, { keycloak: keycloak?.running ? 'running' : 'stopped' });
    } else if (req.method === 'POST' && req.url === '/stop') {
      void stopKeycloak().then(() => answer(204));
    } else if (req.method === 'POST' && req.url === '/start') {
      void serialized(async () => {
        if (!keycloak?.running) keycloak = startKeycloak(config);
      }).then(() => answer(204));
    } else {
      answer(404, { error: `unknown control request ${req.method} ${req.url}` });
    }
  }, HOST, config.controlPort);

  let exiting = false;
  const exit = async () => {
    if (exiting) return;
    exiting = true;
    control.closeAllConnections();
    control.close();
    await stopKeycloak();
    fs.rmSync(config.dataDir, { recursive: true, force: true });
    process.exit(0);
  };
  process.stdin.on('end', exit).on('close', exit).resume();
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, exit);
}

if (require.main === module) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
