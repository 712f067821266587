import * as fs from 'node:fs';
import * as path from 'node:path';

/**
 * A directory laid out as Kubernetes mounts a Secret (and so as cert-manager's certificates arrive):
 * each file is a symlink `name -> ..data/name`, `..data` a symlink to a timestamped directory, and an
 * update writes a new directory and swaps `..data` with one atomic rename — the move Envoy's
 * watched_directory reacts to.
 */
export class MountedSecret {
  private version = 0;

  constructor(
    readonly dir: string,
    files: Record<string, string>,
  ) {
    fs.mkdirSync(dir, { recursive: true });
    this.update(files);
    for (const name of Object.keys(files)) fs.symlinkSync(path.join('..data', name), path.join(dir, name));
  }

  /** The path of one file of the secret, as a registry names it. */
  file(name: string): string {
    return path.join(this.dir, name);
  }

  /** Replaces every file at once, as the kubelet does when the Secret changes. */
  update(files: Record<string, string>): void {
    const versionDir = `..${Date.now()}_${++this.version}`;
    fs.mkdirSync(path.join(this.dir, versionDir));
    for (const [name, content] of Object.entries(files)) fs.writeFileSync(path.join(this.dir, versionDir, name), content);
    const swap = path.join(this.dir, '..data_tmp');
    fs.symlinkSync(versionDir, swap);
    fs.renameSync(swap, path.join(this.dir, '..data'));
  }
}
