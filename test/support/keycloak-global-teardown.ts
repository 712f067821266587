import * as fs from 'node:fs';
import { ChildProcess } from 'node:child_process';
import { SUPERVISOR_KEY } from './keycloak-global-setup';

/** Stops the run's Keycloak: closing the supervisor's stdin makes it stop Keycloak and exit. */
export default async function stopRunKeycloak(): Promise<void> {
  const started = (globalThis as Record<symbol, unknown>)[SUPERVISOR_KEY] as { supervisor: ChildProcess; dataDir: string } | undefined;
  if (!started) return;
  const { supervisor, dataDir } = started;
  if (supervisor.exitCode === null && supervisor.signalCode === null) {
    const exited = new Promise((resolve) => supervisor.once('exit', resolve));
    supervisor.stdin?.end();
    const timer = setTimeout(() => supervisor.kill('SIGKILL'), 30000);
    await exited;
    clearTimeout(timer);
  }
  fs.rmSync(dataDir, { recursive: true, force: true });
}
