import * as fs from 'node:fs';
import * as os from 'node:os';
import { execFileSync } from 'node:child_process';
import { envoyBinary } from '../../control-plane/devstack/envoy';
import { projectPath } from '../../control-plane/shared/paths';

/** The machine and the versions a run used, so that its numbers can be read in context. */
export interface Environment {
  machine: { nproc: number; cpuModel: string; memoryGiB: number; kernel: string; loadAverageAtStart: number[] };
  versions: {
    node: string;
    envoy: string;
    /** Installed versions of the project's direct npm dependencies. */
    packages: Record<string, string>;
    project: { commit: string; uncommittedChanges: boolean };
  };
}

function cpuModel(): string {
  const fromProc = fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.+)$/m)?.[1];
  return (fromProc ?? os.cpus()[0]?.model ?? 'unknown').trim();
}

/** "1.40.0 (9e5580933739/Clean/RELEASE/BoringSSL)" from `envoy --version`'s "version: <commit>/<version>/<status>/<build>/<ssl>". */
function envoyVersion(): string {
  const output = execFileSync(envoyBinary(), ['--version'], { encoding: 'utf8' });
  const [commit, version, ...build] = (/version:\s*(\S+)/.exec(output)?.[1] ?? 'unknown').split('/');
  return build.length ? `${version} (${commit.slice(0, 12)}/${build.join('/')})` : commit;
}

function installedPackages(): Record<string, string> {
  const manifest = JSON.parse(fs.readFileSync(projectPath('package.json'), 'utf8')) as Record<string, Record<string, string> | undefined>;
  const names = [...Object.keys(manifest.dependencies ?? {}), ...Object.keys(manifest.devDependencies ?? {})].sort();
  return Object.fromEntries(
    names.map((name) => {
      const file = projectPath('node_modules', ...name.split('/'), 'package.json');
      return [name, fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')) as { version: string }).version : 'not installed'];
    }),
  );
}

function git(args: string[]): string {
  // --no-optional-locks: reading the status must not refresh the index another process may be using.
  return execFileSync('git', ['--no-optional-locks', ...args], { cwd: projectPath(), encoding: 'utf8' }).trim();
}

export function describeEnvironment(): Environment {
  return {
    machine: {
      nproc: os.availableParallelism(),
      cpuModel: cpuModel(),
      memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
      kernel: `${os.type()} ${os.release()}`,
      loadAverageAtStart: os.loadavg().map((value) => Math.round(value * 100) / 100),
    },
    versions: {
      node: process.version,
      envoy: envoyVersion(),
      packages: installedPackages(),
      project: { commit: git(['rev-parse', 'HEAD']), uncommittedChanges: git(['status', '--porcelain']).length > 0 },
    },
  };
}
