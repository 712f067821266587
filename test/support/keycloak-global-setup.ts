import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { randomBytes } from 'node:crypto';
import { ChildProcess, spawn } from 'node:child_process';
import { freePorts, portAccepts, waitFor } from '../../control-plane/devstack/processes';
import { projectPath } from '../../control-plane/shared/paths';
import { KEYCLOAK_RUN_ENV, KeycloakRun, REALM_FILE } from './keycloak';
import { SupervisorConfig, keycloakBaseUrl } from './keycloak-supervisor';
import { tools } from './tools';

export const SUPERVISOR_KEY = Symbol.for('mcpgw.keycloakSupervisor');

/**
 * Starts Keycloak's supervisor (keycloak-supervisor.ts) with the test realm, and returns once it takes
 * control requests, before Keycloak itself answers. It stops Keycloak and exits when its stdin closes.
 */
export async function launchKeycloakSupervisor(logDir: string): Promise<{ run: KeycloakRun; supervisor: ChildProcess }> {
  const { keycloak } = tools();
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpgw-keycloak-'));
  fs.mkdirSync(logDir, { recursive: true });
  const [port, managementPort, controlPort] = await freePorts(3);
  const config: SupervisorConfig = {
    keycloakHome: keycloak.home,
    javaHome: keycloak.javaHome,
    realmFile: REALM_FILE,
    dataDir,
    port,
    managementPort,
    controlPort,
    adminUser: 'admin',
    adminPassword: randomBytes(12).toString('hex'),
    logFile: path.join(logDir, 'keycloak.log'),
  };
  fs.rmSync(config.logFile, { force: true });
  const supervisor = spawn(process.execPath, [projectPath('dist', 'test', 'support', 'keycloak-supervisor.js'), JSON.stringify(config)], {
    stdio: ['pipe', 'inherit', 'inherit'],
  });
  const supervisorExited = new Promise<never>((_, reject) =>
    supervisor.once('exit', (code) => reject(new Error(`the Keycloak supervisor exited at once (code ${code})`))),
  );
  await Promise.race([waitFor('the Keycloak supervisor', () => portAccepts(controlPort)), supervisorExited]);
  const run: KeycloakRun = {
    baseUrl: keycloakBaseUrl(config),
    adminUser: config.adminUser,
    adminPassword: config.adminPassword,
    controlUrl: `http://127.0.0.1:${controlPort}`,
    logFile: config.logFile,
    dataDir,
  };
  return { run, supervisor };
}

/**
 * Jest global setup of the project whose tests need Keycloak (jest.config.js): jest runs it only when
 * the run includes one of them. It starts the run's one Keycloak in the background and returns at
 * once; tests wait for readiness through `keycloak()` (keycloak.ts).
 */
export default async function startRunKeycloak(): Promise<void> {
  const { run, supervisor } = await launchKeycloakSupervisor(projectPath('.run', 'test'));
  const runFile = path.join(run.dataDir, 'run.json');
  fs.writeFileSync(runFile, JSON.stringify(run, null, 2));
  process.env[KEYCLOAK_RUN_ENV] = runFile;
  (globalThis as Record<symbol, unknown>)[SUPERVISOR_KEY] = supervisor;
}
