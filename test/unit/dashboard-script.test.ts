import { spawnSync } from 'node:child_process';
import { projectPath } from '../../control-plane/shared/paths';

/**
 * The dashboard's browser script is plain JavaScript served as it is (no build step); TypeScript
 * checks it, strict, against the types of the data the control plane sends it.
 */
it('type-checks the dashboard script against the server types', () => {
  const tsc = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', projectPath('control-plane/admin/dashboard/tsconfig.json')], { encoding: 'utf8' });
  expect(tsc.stdout + tsc.stderr).toBe('');
  expect(tsc.status).toBe(0);
}, 60_000);
