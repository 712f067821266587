import * as fs from 'node:fs';
import * as path from 'node:path';
import * as tls from 'node:tls';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { Agent, Dispatcher } from 'undici';
import { Logger } from './log';

/**
 * The gateway's inside over mutual TLS (docs/adr/0017-closed-inside.md): every process holds one
 * certificate of the internal CA, in a directory laid out as cert-manager and Kubernetes mount a TLS
 * Secret (`tls.crt`, `tls.key`, `ca.crt`). The certificate names its holder in a subject alternative
 * name: its role (what it may do inside) and its name (for an Envoy, the node id it may use), as a URI
 * `spiffe://<trust domain>/mcpgw/<role>/<name>` (what cert-manager and SPIRE issue) or as a DNS name
 * `<name>.<role>.mcpgw.internal` (what Helm's genSignedCert can make). Peers check the role of every
 * connection, and the control plane checks an Envoy's node id against the name.
 */

export const INTERNAL_ROLES = ['envoy', 'sidecar', 'control-plane'] as const;
export type InternalRole = (typeof INTERNAL_ROLES)[number];

export interface InternalIdentity {
  role: InternalRole;
  name: string;
}

/** The files of an internal TLS directory (cert-manager's layout). */
export const INTERNAL_TLS_FILES = { certificate: 'tls.crt', key: 'tls.key', ca: 'ca.crt' } as const;

const IDENTITY_URI = /^URI:spiffe:\/\/[^/\s]+\/mcpgw\/(envoy|sidecar|control-plane)\/([A-Za-z0-9._-]+)$/;
const IDENTITY_DNS = /^DNS:([a-z0-9]([a-z0-9-]*[a-z0-9])?)\.(envoy|sidecar|control-plane)\.mcpgw\.internal$/;

/** The URI SAN that names `identity` in the trust domain `trustDomain`. */
export const identityUri = (identity: InternalIdentity, trustDomain: string) => `spiffe://${trustDomain}/mcpgw/${identity.role}/${identity.name}`;

/** The DNS SAN that names `identity` (its name one DNS label). */
export const identityDnsName = (identity: InternalIdentity) => `${identity.name}.${identity.role}.mcpgw.internal`;

/** Regular expressions (RE2 and JavaScript alike) matching the SANs that name any holder of `role`, by SAN type. */
export const roleSanPatterns = (role: InternalRole) => ({
  URI: `^spiffe://[^/]+/mcpgw/${role}/[A-Za-z0-9._-]+$`,
  DNS: `^[a-z0-9]([a-z0-9-]*[a-z0-9])?\\.${role}\\.mcpgw\\.internal$`,
});

/**
 * The gateway identities a certificate names, from its subject alternative names as Node prints them
 * (`URI:spiffe://…, DNS:…`); other names are ignored.
 */
export function identitiesOf(subjectAltName: string | undefined): InternalIdentity[] {
  if (!subjectAltName) return [];
  return subjectAltName.split(/,\s*/).flatMap((entry) => {
    const uri = IDENTITY_URI.exec(entry);
    if (uri) return [{ role: uri[1] as InternalRole, name: uri[2] }];
    const dns = IDENTITY_DNS.exec(entry);
    return dns ? [{ role: dns[3] as InternalRole, name: dns[1] }] : [];
  });
}

/**
 * Whether a certificate naming `identity` may act as `role` under the name `claimed` (an Envoy's node
 * id, a sidecar's id). A certificate vouches for its own name and for `<name>/<anything>`: one
 * certificate shared by several Envoys (one Secret for a Deployment) vouches for node ids
 * `envoy/<pod>`, all alike; a certificate per pod (cert-manager's csi-driver) for exactly one.
 */
export function vouchesFor(identity: InternalIdentity, role: InternalRole, claimed: string): boolean {
  return identity.role === role && (claimed === identity.name || claimed.startsWith(`${identity.name}/`));
}

/** What a peer's certificate proves: the identities it names (none without a certificate). */
export function peerIdentities(certificate: tls.PeerCertificate | undefined): InternalIdentity[] {
  return certificate && Object.keys(certificate).length > 0 ? identitiesOf(certificate.subjectaltname) : [];
}

interface LoadedFiles {
  certificate: Buffer;
  key: Buffer;
  ca: Buffer;
  identity: InternalIdentity;
  notAfter: string;
}

/** Reads and checks one version of the directory: a pair that matches, a CA, an identity of `role`. Throws saying what is wrong. */
function readDirectory(dir: string, role: InternalRole): LoadedFiles {
  const read = (file: string) => fs.readFileSync(path.join(dir, file));
  const certificate = read(INTERNAL_TLS_FILES.certificate);
  const key = read(INTERNAL_TLS_FILES.key);
  const ca = read(INTERNAL_TLS_FILES.ca);
  const x509 = new X509Certificate(certificate);
  if (!x509.checkPrivateKey(createPrivateKey(key))) throw new Error(`${INTERNAL_TLS_FILES.key} is not the key of ${INTERNAL_TLS_FILES.certificate}`);
  // Throws on a CA file that is not PEM.
  tls.createSecureContext({ cert: certificate, key, ca });
  const identity = identitiesOf(x509.subjectAltName).find((named) => named.role === role);
  if (!identity) throw new Error(`${INTERNAL_TLS_FILES.certificate} does not name a gateway ${role} (a SAN URI:spiffe://<trust domain>/mcpgw/${role}/<name> or DNS:<name>.${role}.mcpgw.internal)`);
  return { certificate, key, ca, identity, notAfter: x509.validTo };
}

/** readDirectory, its error naming the directory: for a process that cannot start without it. */
function loadDirectory(dir: string, role: InternalRole): LoadedFiles {
  try {
    return readDirectory(dir, role);
  } catch (error) {
    throw new Error(`internal TLS directory ${dir}: ${(error as Error).message}`);
  }
}

/** The identity of `role` the certificate in `dir` names, once (the files checked as a process would load them). */
export const certificateIdentity = (dir: string, role: InternalRole): InternalIdentity => loadDirectory(dir, role).identity;

/** How often the directory is read again besides file-system events (some volumes send none). */
const POLL_MS = 10_000;
/** Several files change at once: read them once things settled. */
const SETTLE_MS = 100;

/**
 * This process's internal certificate, CA and identity, read from a directory and read again whenever
 * it changes (a move in it: the kubelet's atomic swap of a mounted Secret; or every 10 s). A version
 * that does not load (a half-written file, a key that does not match) is logged and the last good one
 * kept. New connections use the latest version; connections and streams already open keep theirs.
 * It is a grpc-js certificate provider (gRPC servers and channels) and updates Node TLS servers.
 */
export class InternalTls implements grpc.experimental.CertificateProvider {
  private current: LoadedFiles;
  private readonly caListeners = new Set<grpc.experimental.CaCertificateUpdateListener>();
  private readonly identityListeners = new Set<grpc.experimental.IdentityCertificateUpdateListener>();
  private readonly secureServers = new Set<tls.Server>();
  /** HTTP clients holding the current certificate, by the role their servers must have (clientDispatcher). */
  private readonly clients = new Map<InternalRole, Agent>();
  private readonly watcher: fs.FSWatcher;
  private readonly poll: NodeJS.Timeout;
  private settle?: NodeJS.Timeout;
  private lastProblem?: string;

  /** `role`: what this process is; its certificate must name it. */
  constructor(
    readonly dir: string,
    private readonly role: InternalRole,
    private readonly log: Logger,
  ) {
    this.current = loadDirectory(dir, role);
    this.watcher = fs.watch(dir, () => {
      clearTimeout(this.settle);
      this.settle = setTimeout(() => this.reload(), SETTLE_MS);
    });
    this.watcher.on('error', () => undefined);
    this.poll = setInterval(() => this.reload(), POLL_MS).unref();
  }

  get identity(): InternalIdentity {
    return this.current.identity;
  }

  /** Reads the directory now; a new version reaches every server and channel for its next connections. */
  reload(): void {
    let next: LoadedFiles;
    try {
      next = readDirectory(this.dir, this.role);
    } catch (error) {
      const problem = (error as Error).message;
      if (problem !== this.lastProblem) this.log.warn('internal TLS files do not load; keeping the certificate in use', { dir: this.dir, problem });
      this.lastProblem = problem;
      return;
    }
    this.lastProblem = undefined;
    const changed = !next.certificate.equals(this.current.certificate) || !next.key.equals(this.current.key) || !next.ca.equals(this.current.ca);
    if (!changed) return;
    this.current = next;
    this.log.info('internal TLS certificate reloaded', { identity: `${next.identity.role}/${next.identity.name}`, notAfter: next.notAfter });
    for (const listener of this.caListeners) listener({ caCertificate: next.ca });
    for (const listener of this.identityListeners) listener({ certificate: next.certificate, privateKey: next.key });
    for (const server of this.secureServers) server.setSecureContext(this.secureContextOptions());
    // The next requests connect anew with the new certificate; requests in flight (streams) finish on their connections.
    for (const client of this.clients.values()) void client.close();
    this.clients.clear();
  }

  addCaCertificateListener(listener: grpc.experimental.CaCertificateUpdateListener): void {
    this.caListeners.add(listener);
    const { ca } = this.current;
    process.nextTick(() => this.caListeners.has(listener) && listener({ caCertificate: ca }));
  }

  removeCaCertificateListener(listener: grpc.experimental.CaCertificateUpdateListener): void {
    this.caListeners.delete(listener);
  }

  addIdentityCertificateListener(listener: grpc.experimental.IdentityCertificateUpdateListener): void {
    this.identityListeners.add(listener);
    const { certificate, key } = this.current;
    process.nextTick(() => this.identityListeners.has(listener) && listener({ certificate, privateKey: key }));
  }

  removeIdentityCertificateListener(listener: grpc.experimental.IdentityCertificateUpdateListener): void {
    this.identityListeners.delete(listener);
  }

  /** For a gRPC server: a client certificate of the internal CA is required (what it may do is checked per call). */
  serverCredentials(): grpc.ServerCredentials {
    return grpc.experimental.createCertificateProviderServerCredentials(this, this, true);
  }

  /**
   * For a gRPC channel to a server that must hold `role`'s certificate, whatever address it is reached
   * at: the credentials, and the channel option that names the role as TLS server name (SNI; an IP
   * address may not be one).
   */
  channel(role: InternalRole): { credentials: grpc.ChannelCredentials; options: grpc.ChannelOptions } {
    return { credentials: this.channelCredentials(role), options: { 'grpc.ssl_target_name_override': role } };
  }

  private channelCredentials(role: InternalRole): grpc.ChannelCredentials {
    return grpc.experimental.createCertificateProviderChannelCredentials(this, this, {
      checkServerIdentity: (_host, certificate) =>
        peerIdentities(certificate).some((identity) => identity.role === role)
          ? undefined
          : new Error(`the server's certificate does not name a gateway ${role}`),
    });
  }

  /**
   * An HTTP client (for fetch's `dispatcher`) for a server that must hold `role`'s certificate, whatever
   * address it is reached at, presenting this process's certificate. After a renewal the next call
   * returns a new one, so new connections present the new certificate.
   */
  clientDispatcher(role: InternalRole): Dispatcher {
    let client = this.clients.get(role);
    if (!client) {
      client = new Agent({
        connect: {
          ...this.secureContextOptions(),
          minVersion: 'TLSv1.3',
          // The role as TLS server name (SNI; an IP address may not be one); the role checked instead of a host name.
          servername: role,
          checkServerIdentity: (_host: string, certificate: tls.PeerCertificate) =>
            peerIdentities(certificate).some((identity) => identity.role === role) ? undefined : new Error(`the server's certificate does not name a gateway ${role}`),
        },
      });
      this.clients.set(role, client);
    }
    return client;
  }

  private secureContextOptions(): tls.SecureContextOptions {
    return { cert: this.current.certificate, key: this.current.key, ca: this.current.ca };
  }

  /**
   * Options of a Node TLS server inside: a client certificate of the internal CA is required in the
   * handshake. TLS 1.3 only: every peer inside is the gateway's own.
   */
  serverOptions(): tls.TlsOptions {
    return { ...this.secureContextOptions(), requestCert: true, rejectUnauthorized: true, minVersion: 'TLSv1.3' };
  }

  /**
   * Keeps a Node TLS server made with serverOptions() current (its next connections get the latest
   * certificate and CA) and closes a connection whose certificate names another role than `role`
   * before its first request is read.
   */
  follow(server: tls.Server, role: InternalRole): void {
    this.secureServers.add(server);
    server.once('close', () => this.secureServers.delete(server));
    server.prependListener('secureConnection', (socket: tls.TLSSocket) => {
      const certificate = socket.getPeerCertificate();
      const problem = roleProblem(certificate, role);
      if (problem) {
        this.log.warn('refused an internal caller', { peer: socket.remoteAddress, reason: problem });
        socket.destroy();
        return;
      }
      this.log.debug('internal connection accepted', { peer: socket.remoteAddress, serial: certificate.serialNumber, notAfter: certificate.valid_to });
    });
  }

  close(): void {
    clearTimeout(this.settle);
    clearInterval(this.poll);
    this.watcher.close();
    this.secureServers.clear();
    for (const client of this.clients.values()) void client.destroy();
    this.clients.clear();
  }
}

/** The one-line reason a connection's peer may not act as `role` here, or undefined when it may. */
export function roleProblem(certificate: tls.PeerCertificate | undefined, role: InternalRole): string | undefined {
  const identities = peerIdentities(certificate);
  if (identities.length === 0) return 'no client certificate naming a gateway identity';
  return identities.some((identity) => identity.role === role)
    ? undefined
    : `a ${identities.map((identity) => identity.role).join('/')} certificate may not call this port (only a gateway ${role})`;
}
