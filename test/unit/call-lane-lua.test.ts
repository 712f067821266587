import { spawnSync } from 'node:child_process';
import { projectPath } from '../../control-plane/shared/paths';

/**
 * The call script's scanning and rewriting, table-tested on LuaJIT itself (the Lua of Envoy; Debian's
 * luajit, installed by scripts/setup.sh): test/unit/lua/call-lane.spec.lua prints one line per case.
 */
describe('the call lane script on LuaJIT', () => {
  const run = spawnSync('luajit', [projectPath('test', 'unit', 'lua', 'call-lane.spec.lua'), projectPath('control-plane', 'xds', 'lua', 'call-lane.lua')], {
    encoding: 'utf8',
  });

  it('runs', () => {
    expect(run.error).toBeUndefined();
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
  });

  const lines = run.stdout.split('\n').filter(Boolean);
  it('has cases', () => expect(lines.length).toBeGreaterThan(40));
  it.each(lines.map((line) => [line.replace(/^(not )?ok /, '').split(':')[0], line]))('%s', (_name, line) => {
    expect(line).toMatch(/^ok /);
  });
});
