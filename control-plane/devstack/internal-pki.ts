import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { INTERNAL_TLS_FILES, InternalIdentity, identityDnsName, identityUri } from '../shared/internal-tls';

/**
 * A private CA for the gateway's inside, made with the machine's openssl (EC P-256 keys: tens of
 * milliseconds per certificate): `mcpgw up`, `mcpgw internal-pki` (docker compose) and the tests issue
 * each process its certificate from it. Production uses its own CA (cert-manager, SPIRE, …) with the
 * same identities (docs/operating.md, "Securing the inside").
 */

const openssl = (args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });

/** An OpenSSL time (ASN.1 GeneralizedTime) `minutes` from now. */
const asn1Time = (minutes: number) => `${new Date(Date.now() + minutes * 60_000).toISOString().replace(/[-:T]/g, '').slice(0, 14)}Z`;

/** How a certificate names its identity: a SPIFFE URI SAN, or a DNS SAN (docs/adr/0017-closed-inside.md). */
export type IdentityForm = 'uri' | 'dns';

export interface IssuedFiles {
  [INTERNAL_TLS_FILES.certificate]: string;
  [INTERNAL_TLS_FILES.key]: string;
  [INTERNAL_TLS_FILES.ca]: string;
}

export class InternalPki {
  private issued = 0;

  private constructor(
    private readonly dir: string,
    readonly trustDomain: string,
  ) {}

  /** A new CA in `dir` (its key stays there), valid for `days`. */
  static create(dir: string, options: { trustDomain?: string; days?: number } = {}): InternalPki {
    const file = (name: string) => path.join(dir, name);
    fs.mkdirSync(path.join(dir, 'issued'), { recursive: true, mode: 0o700 });
    openssl([
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', file('ca.key'), '-out', file('ca.crt'), '-days', String(options.days ?? 30), '-subj', '/CN=mcpgw-internal-ca',
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
    ]);
    fs.writeFileSync(file('index.txt'), '');
    // Serials from a random start: two CAs in one test (ours and a Tool Service's) never issue the same one.
    const serial = randomBytes(8);
    serial[0] = (serial[0] & 0x7f) | 0x10;
    fs.writeFileSync(file('serial'), `${serial.toString('hex')}\n`);
    fs.writeFileSync(
      file('ca.cnf'),
      [
        '[ca]', 'default_ca = internal_ca', '[internal_ca]',
        `database = ${file('index.txt')}`, `new_certs_dir = ${file('issued')}`, `serial = ${file('serial')}`,
        'default_md = sha256', 'policy = any_name', 'unique_subject = no', '[any_name]', 'commonName = supplied', '',
      ].join('\n'),
    );
    return new InternalPki(dir, options.trustDomain ?? 'mcpgw.local');
  }

  get caFile(): string {
    return path.join(this.dir, 'ca.crt');
  }

  /**
   * A certificate for `identity`, usable as server and client certificate, valid for `ttlMinutes` from
   * a minute ago: the identity as a URI SAN (`form` 'uri', the default) or a DNS SAN ('dns', as the
   * Helm chart generates them); with localhost and 127.0.0.1 for tools that check host names.
   */
  issue(identity: InternalIdentity, options: { ttlMinutes: number; form?: IdentityForm }): IssuedFiles {
    const named = options.form === 'dns' ? `DNS:${identityDnsName(identity)}` : `URI:${identityUri(identity, this.trustDomain)}`;
    return this.sign(identity.name, [named, 'DNS:localhost', 'IP:127.0.0.1'], options.ttlMinutes);
  }

  /** A server certificate for something of the stack that is no gateway identity (its Redis): localhost and 127.0.0.1. */
  issueLoopbackServer(commonName: string, options: { ttlMinutes: number }): IssuedFiles {
    return this.sign(commonName, ['DNS:localhost', 'IP:127.0.0.1'], options.ttlMinutes);
  }

  private sign(commonName: string, altNames: string[], ttlMinutes: number): IssuedFiles {
    const file = (name: string) => path.join(this.dir, 'issued', `${++this.issued}-${name}`);
    const [key, csr, cert, extensions] = [file('leaf.key'), file('leaf.csr'), file('leaf.crt'), file('leaf.ext')];
    openssl(['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', key, '-out', csr, '-subj', `/CN=${commonName}`]);
    fs.writeFileSync(extensions, `subjectAltName=${altNames.join(',')}\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature\n`);
    openssl([
      'ca', '-batch', '-notext', '-config', path.join(this.dir, 'ca.cnf'), '-cert', this.caFile, '-keyfile', path.join(this.dir, 'ca.key'),
      '-startdate', asn1Time(-1), '-enddate', asn1Time(ttlMinutes), '-extfile', extensions, '-in', csr, '-out', cert,
    ]);
    const issued = {
      [INTERNAL_TLS_FILES.certificate]: fs.readFileSync(cert, 'utf8'),
      [INTERNAL_TLS_FILES.key]: fs.readFileSync(key, 'utf8'),
      [INTERNAL_TLS_FILES.ca]: fs.readFileSync(this.caFile, 'utf8'),
    };
    fs.rmSync(key);
    return issued;
  }
}

/**
 * Writes (or replaces) a directory laid out as Kubernetes mounts a Secret: each file a symlink
 * `name -> ..data/name`, `..data` a symlink to a directory of this version, swapped with one atomic
 * rename — the move that Envoy's watched_directory and the gateway's own watchers react to. Only the
 * owner may read it (keys).
 */
export function writeSecretDirectory(dir: string, files: Record<string, string>): string {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const version = `..${Date.now()}_${process.hrtime.bigint()}`;
  fs.mkdirSync(path.join(dir, version), { mode: 0o700 });
  for (const [name, content] of Object.entries(files)) fs.writeFileSync(path.join(dir, version, name), content, { mode: 0o600 });
  const previous = fs.existsSync(path.join(dir, '..data')) ? fs.readlinkSync(path.join(dir, '..data')) : undefined;
  const swap = path.join(dir, '..data_tmp');
  fs.rmSync(swap, { force: true });
  fs.symlinkSync(version, swap);
  fs.renameSync(swap, path.join(dir, '..data'));
  for (const name of Object.keys(files)) {
    const link = path.join(dir, name);
    if (!fs.existsSync(link)) fs.symlinkSync(path.join('..data', name), link);
  }
  if (previous) fs.rmSync(path.join(dir, previous), { recursive: true, force: true });
  return dir;
}
