import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { INTERNAL_TLS_FILES, InternalIdentity } from '../shared/internal-tls';
import { IdentityForm, InternalPki, writeSecretDirectory } from './internal-pki';

/** The ACL user the gateway's processes log in to the Redis the stack starts with. */
export const DEV_REDIS_USER = 'mcpgw';

/**
 * What closes the inside of a stack on one host (`mcpgw up`, the tests), all in its run folder: a dev
 * CA issuing every process its internal certificate (a directory in Kubernetes' Secret layout each,
 * renewable in place), and a generated password for Redis's ACL user (in a file, never on a command
 * line). Only the owner may read the folder.
 */
export class DevInside {
  private readonly issued = new Set<string>();

  private constructor(
    readonly dir: string,
    private readonly pki: InternalPki,
    private readonly ttlMinutes: number,
    readonly redisPasswordFile: string,
  ) {}

  static create(dir: string, ttlMinutes: number): DevInside {
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    const pki = InternalPki.create(path.join(dir, 'ca'), { days: Math.max(1, Math.ceil(ttlMinutes / 1440)) });
    const redisPasswordFile = path.join(dir, 'redis-password');
    fs.writeFileSync(redisPasswordFile, `${randomBytes(24).toString('base64url')}\n`, { mode: 0o600 });
    return new DevInside(dir, pki, ttlMinutes, redisPasswordFile);
  }

  /** The directory (tls.crt, tls.key, ca.crt) of `identity`, issued the first time it is asked for. */
  certificateDir(identity: InternalIdentity): string {
    const dir = this.dirOf(identity);
    if (!this.issued.has(dir)) this.renew(identity);
    return dir;
  }

  /** Issues `identity` a new certificate into its directory at once (a renewal, as cert-manager does it). */
  renew(identity: InternalIdentity, ttlMinutes = this.ttlMinutes, form: IdentityForm = 'uri'): string {
    const dir = this.dirOf(identity);
    writeSecretDirectory(dir, { ...this.pki.issue(identity, { ttlMinutes, form }) });
    this.issued.add(dir);
    return dir;
  }

  private dirOf(identity: InternalIdentity): string {
    return path.join(this.dir, `${identity.role}-${identity.name}`);
  }

  /** A bearer token for the admin ports (owner-only file), generated the first time it is asked for. */
  adminTokenFile(): string {
    const file = path.join(this.dir, 'admin-token');
    if (!fs.existsSync(file)) fs.writeFileSync(file, `${randomBytes(24).toString('base64url')}\n`, { mode: 0o600 });
    return file;
  }

  /**
   * The Redis server certificate (for 127.0.0.1 and localhost, of the stack's CA), issued once: the
   * files for redis-server's tls-cert-file, tls-key-file and the CA a client checks it against.
   */
  redisTlsFiles(): { certFile: string; keyFile: string; caFile: string } {
    const dir = path.join(this.dir, 'redis-tls');
    if (!fs.existsSync(dir)) writeSecretDirectory(dir, { ...this.pki.issueLoopbackServer('redis', { ttlMinutes: this.ttlMinutes }) });
    const file = (name: string) => path.join(dir, name);
    return { certFile: file(INTERNAL_TLS_FILES.certificate), keyFile: file(INTERNAL_TLS_FILES.key), caFile: file(INTERNAL_TLS_FILES.ca) };
  }

  /**
   * A Redis configuration file (owner-only, so the password never appears on a command line) with the
   * gateway's ACL user: only keys and channels under `prefix`, no administrative commands; the default
   * user off, so that an unauthenticated command gets NOAUTH.
   */
  redisConfigFile(prefix: string): string {
    const password = fs.readFileSync(this.redisPasswordFile, 'utf8').trim();
    const file = path.join(this.dir, 'redis.conf');
    fs.writeFileSync(file, ['user default off', `user ${DEV_REDIS_USER} on >${password} ~${prefix}* &${prefix}* +@all -@dangerous +info`, ''].join('\n'), { mode: 0o600 });
    return file;
  }
}
