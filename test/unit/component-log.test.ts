import * as fs from 'node:fs';
import * as path from 'node:path';
import { ManagedProcess, freePorts } from '../../control-plane/devstack/processes';
import { projectPath } from '../../control-plane/shared/paths';
import { testDir } from '../support/gateway-fixture';

/** A real sidecar process (no control plane to talk to) writing its log file, read back line by line. */
async function sidecarLog(dir: string, level: string): Promise<Record<string, unknown>[]> {
  const [extProc, nobody] = await freePorts(2);
  const file = path.join(dir, `sidecar-${level}.log`);
  const sidecar = new ManagedProcess({
    name: 'sidecar',
    command: process.execPath,
    args: [projectPath('dist', 'control-plane', 'cli', 'mcpgw.js'), 'sidecar', '--ext-proc', `127.0.0.1:${extProc}`, '--control-plane', `127.0.0.1:${nobody}`, '--log-level', level],
    logFile: file,
  });
  try {
    await sidecar.untilReady('the sidecar to say the catalog stream ended', async () => (fs.readFileSync(file, 'utf8').includes('catalog stream ended') ? true : undefined));
  } finally {
    await sidecar.stop();
  }
  // Every line must be one JSON object: a line that is not fails the test here.
  return fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>);
}

describe('component logs', () => {
  const dir = testDir('component-log');

  it('are JSON lines with level, time, component and message', async () => {
    const entries = await sidecarLog(dir, 'info');
    for (const entry of entries) {
      expect(entry).toEqual(expect.objectContaining({ level: expect.any(String), component: 'sidecar', message: expect.any(String) }));
      expect(new Date(entry.time as string).toISOString()).toBe(entry.time);
    }
    expect(entries.map((entry) => `${entry.level} ${entry.message}`)).toEqual(
      expect.arrayContaining([
        'warn no --redis: sessions live in this process only (lost on restart, not shared with other replicas)',
        'info sidecar listening',
        'warn catalog stream ended; keeping the last catalog and retrying',
        'info process exited',
      ]),
    );
  });

  it('leave out what is below --log-level', async () => {
    const entries = await sidecarLog(dir, 'warn');
    const ownLines = entries.filter((entry) => entry.message !== 'process exited');
    expect(ownLines.length).toBeGreaterThan(0);
    expect(ownLines.filter((entry) => entry.level !== 'warn' && entry.level !== 'error')).toEqual([]);
  });
});
