import { ChildProcess } from 'node:child_process';
import { SUPERVISOR_KEY } from './keycloak-global-setup';

/** Stops the run's Keycloak: closing the supervisor's stdin makes it stop Keycloak, clean up and exit. */
export default async function stopRunKeycloak(): Promise<void> {
  const supervisor = (globalThis as Record<symbol, unknown>)[SUPERVISOR_KEY] as ChildProcess | undefined;
  if (!supervisor || supervisor.exitCode !== null || supervisor.signalCode !== null) return;
  const exited = new Promise((resolve) => supervisor.once('exit', resolve));
  supervisor.stdin?.end();
  const timer = setTimeout(() => supervisor.kill('SIGKILL'), 30000);
  await exited;
  clearTimeout(timer);
}
