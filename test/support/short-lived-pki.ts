import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';

/** A certificate and its key, PEM, with the serial number peers see. */
export interface IssuedCertificate {
  cert: string;
  key: string;
  serial: string;
}

const openssl = (args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });

/** An OpenSSL time (ASN.1 GeneralizedTime), `minutes` from now. */
function asn1Time(minutes: number): string {
  return `${new Date(Date.now() + minutes * 60_000).toISOString().replace(/[-:T]/g, '').slice(0, 14)}Z`;
}

/**
 * A throwaway CA made with the machine's openssl that issues certificates valid for minutes, as
 * cert-manager issues short-lived ones: servers' (with a DNS name and 127.0.0.1) and clients'.
 */
export class ShortLivedCa {
  private issued = 0;

  private constructor(
    private readonly dir: string,
    readonly caPem: string,
  ) {}

  static create(dir: string, name = 'mcpgw-test-ca'): ShortLivedCa {
    fs.mkdirSync(path.join(dir, 'issued'), { recursive: true });
    const file = (entry: string) => path.join(dir, entry);
    openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', file('ca.key'), '-out', file('ca.pem'), '-days', '1', '-subj', `/CN=${name}`]);
    fs.writeFileSync(file('index.txt'), '');
    fs.writeFileSync(file('serial'), '1000\n');
    fs.writeFileSync(
      file('ca.cnf'),
      [
        '[ca]',
        'default_ca = test_ca',
        '[test_ca]',
        `database = ${file('index.txt')}`,
        `new_certs_dir = ${file('issued')}`,
        `serial = ${file('serial')}`,
        'default_md = sha256',
        'policy = any_name',
        'unique_subject = no',
        '[any_name]',
        'commonName = supplied',
        '',
      ].join('\n'),
    );
    return new ShortLivedCa(dir, fs.readFileSync(file('ca.pem'), 'utf8'));
  }

  /** A certificate valid for `ttlMinutes` from a minute ago: a server's for `dnsName` (and 127.0.0.1), or a client's. */
  issue(commonName: string, options: { usage: 'server' | 'client'; dnsName?: string; ttlMinutes: number }): IssuedCertificate {
    const file = (entry: string) => path.join(this.dir, `${++this.issued}-${entry}`);
    const [key, csr, cert, extensions] = [file('leaf.key'), file('leaf.csr'), file('leaf.pem'), file('leaf.ext')];
    openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', csr, '-subj', `/CN=${commonName}`]);
    fs.writeFileSync(
      extensions,
      options.usage === 'server'
        ? `subjectAltName=DNS:${options.dnsName ?? commonName},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n`
        : 'extendedKeyUsage=clientAuth\n',
    );
    openssl([
      'ca', '-batch', '-notext', '-config', path.join(this.dir, 'ca.cnf'),
      '-cert', path.join(this.dir, 'ca.pem'), '-keyfile', path.join(this.dir, 'ca.key'),
      '-startdate', asn1Time(-1), '-enddate', asn1Time(options.ttlMinutes),
      '-extfile', extensions, '-in', csr, '-out', cert,
    ]);
    const pem = fs.readFileSync(cert, 'utf8');
    return { cert: pem, key: fs.readFileSync(key, 'utf8'), serial: new X509Certificate(pem).serialNumber };
  }
}
