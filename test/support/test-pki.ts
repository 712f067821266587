import * as fs from 'node:fs';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';

export interface TestPki {
  caFile: string;
  certFile: string;
  keyFile: string;
}

/** A throwaway CA and a server certificate for `dnsName`, made with the machine's openssl. */
export function makeTestPki(dir: string, dnsName: string): TestPki {
  const file = (name: string) => path.join(dir, name);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', file('ca.key'), '-out', file('ca.pem'), '-days', '1', '-subj', '/CN=mcpgw-test-ca');
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', file('server.key'), '-out', file('server.csr'), '-subj', `/CN=${dnsName}`);
  fs.writeFileSync(file('san.cnf'), `subjectAltName=DNS:${dnsName}\n`);
  openssl('x509', '-req', '-in', file('server.csr'), '-CA', file('ca.pem'), '-CAkey', file('ca.key'), '-CAcreateserial', '-out', file('server.pem'), '-days', '1', '-extfile', file('san.cnf'));
  return { caFile: file('ca.pem'), certFile: file('server.pem'), keyFile: file('server.key') };
}
