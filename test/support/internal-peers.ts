import * as fs from 'node:fs';
import * as path from 'node:path';
import * as tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { BootstrapValues, ENVOY_JSON_LOG_FORMAT, envoyBinary, writeBootstrapFile } from '../../control-plane/devstack/envoy';
import { ManagedProcess, waitFor } from '../../control-plane/devstack/processes';
import { grpcServices } from '../../control-plane/shared/grpc-packages';
import { INTERNAL_TLS_FILES } from '../../control-plane/shared/internal-tls';

/**
 * Peers of the gateway's inside for the closed-inside tests: gRPC and TLS clients holding a given
 * internal certificate (or none), and Envoys with a bootstrap the test writes itself.
 */

/** A certificate directory's files, or none: what a peer presents. */
export type PeerFiles = { dir: string } | 'no certificate';

const readFiles = (files: { dir: string }) => {
  const read = (name: string) => fs.readFileSync(path.join(files.dir, name));
  return { cert: read(INTERNAL_TLS_FILES.certificate), key: read(INTERNAL_TLS_FILES.key), ca: read(INTERNAL_TLS_FILES.ca) };
};

/** Channel credentials trusting `caFile` and presenting `files`' certificate (none: a stranger). */
function credentials(files: PeerFiles, caFile: string): grpc.ChannelCredentials {
  const ca = fs.readFileSync(caFile);
  const accept = { checkServerIdentity: () => undefined };
  if (files === 'no certificate') return grpc.credentials.createSsl(ca, null, null, accept);
  const { cert, key } = readFiles(files);
  return grpc.credentials.createSsl(ca, key, cert, accept);
}

/** What one gRPC stream got first: a message, or the status it ended with. */
export type FirstAnswer = { message: any } | { code: grpc.status; details: string };

function firstAnswer(call: grpc.ClientDuplexStream<unknown, unknown> | grpc.ClientReadableStream<unknown>): Promise<FirstAnswer> {
  return new Promise((resolve) => {
    call.on('data', (message) => {
      resolve({ message });
      call.cancel();
    });
    call.on('error', (error: grpc.ServiceError) => resolve({ code: error.code, details: error.details }));
  });
}

/** One ADS request for `names` of `typeUrl` as node `nodeId`, with `files`' certificate: its first answer. */
export async function adsRequest(address: string, files: PeerFiles, caFile: string, nodeId: string, typeUrl: string, names: string[]): Promise<FirstAnswer> {
  const Service = grpcServices.aggregatedDiscovery();
  const client = new Service(address, credentials(files, caFile), { 'grpc.ssl_target_name_override': 'control-plane' }) as grpc.Client & Record<string, Function>;
  try {
    const call = client.StreamAggregatedResources() as grpc.ClientDuplexStream<unknown, unknown>;
    const answer = firstAnswer(call);
    call.write({ node: { id: nodeId, cluster: 'mcp-gateway' }, type_url: typeUrl, resource_names: names });
    return await answer;
  } finally {
    client.close();
  }
}

/** The catalog stream as sidecar `sidecarId`, with `files`' certificate: its first answer. */
export async function catalogRequest(address: string, files: PeerFiles, caFile: string, sidecarId: string): Promise<FirstAnswer> {
  const Service = grpcServices.catalogDiscovery();
  const client = new Service(address, credentials(files, caFile), { 'grpc.ssl_target_name_override': 'control-plane' }) as grpc.Client & Record<string, Function>;
  try {
    return await firstAnswer(client.WatchCatalog({ sidecar_id: sidecarId }) as grpc.ClientReadableStream<unknown>);
  } finally {
    client.close();
  }
}

/** A TLS connection to an internal port: the server's certificate serial, or the error that ended it. */
export function tlsConnect(port: number, files: PeerFiles, caFile: string, alpn?: string): Promise<{ serial: string; socket: tls.TLSSocket } | { error: string }> {
  const identity = files === 'no certificate' ? {} : (({ cert, key }) => ({ cert, key }))(readFiles(files));
  return new Promise((resolve) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca: fs.readFileSync(caFile), ...identity, servername: 'internal', checkServerIdentity: () => undefined, ...(alpn && { ALPNProtocols: [alpn] }) });
    socket.once('secureConnect', () => resolve({ serial: socket.getPeerCertificate().serialNumber, socket }));
    socket.once('error', (error) => resolve({ error: error.message }));
  });
}

/**
 * One HTTP/1.1 request over a TLS connection to an internal port, sent once the handshake is done:
 * the status line, or why there is none (the server closed the connection, a TLS alert).
 */
export async function internalHttpRequest(port: number, files: PeerFiles, caFile: string, requestPath: string, headers: Record<string, string> = {}): Promise<string> {
  const connected = await tlsConnect(port, files, caFile);
  if ('error' in connected) return `TLS error: ${connected.error}`;
  const { socket } = connected;
  return new Promise((resolve) => {
    let received = '';
    socket.on('data', (chunk) => {
      received += chunk.toString();
      if (received.includes('\r\n')) {
        resolve(received.slice(0, received.indexOf('\r\n')));
        socket.destroy();
      }
    });
    socket.on('error', (error) => resolve(`error: ${error.message}`));
    socket.on('close', () => resolve(received ? received.split('\r\n')[0] : 'closed without an answer'));
    const extra = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('');
    socket.write(`GET ${requestPath} HTTP/1.1\r\nhost: sidecar\r\nconnection: close\r\n${extra}\r\n`);
  });
}

/** An Envoy with a bootstrap written by the test (a stranger, an impostor): stop it with stop(). */
export async function startEnvoyWith(values: BootstrapValues, dir: string, name: string): Promise<ManagedProcess> {
  const bootstrap = writeBootstrapFile(values, path.join(dir, `bootstrap-${name}.yaml`));
  const envoy = new ManagedProcess({
    name,
    command: envoyBinary(),
    args: ['-c', bootstrap, '--use-dynamic-base-id', '--log-level', 'warn', '--log-format', ENVOY_JSON_LOG_FORMAT],
    logFile: path.join(dir, `${name}.log`),
    textLines: 'not-json',
  });
  await envoy.untilReady(`${name}'s admin`, async () => ((await fetch(`http://127.0.0.1:${values.adminPort}/server_info`)).ok ? true : undefined));
  return envoy;
}

/** One of an Envoy's own stats (counter or gauge), from its admin. */
export async function envoyStatAt(adminPort: number, name: string): Promise<number> {
  const stats = (await (await fetch(`http://127.0.0.1:${adminPort}/stats?format=json&filter=${encodeURIComponent(`^${name}$`)}`)).json()) as { stats: { name: string; value: number }[] };
  return stats.stats.find((stat) => stat.name === name)?.value ?? 0;
}

/** The serial numbers of the certificates an Envoy has loaded (its admin /certs), as Node prints them. */
export async function envoyCertificateSerials(adminPort: number): Promise<string[]> {
  const certs = (await (await fetch(`http://127.0.0.1:${adminPort}/certs`)).json()) as { certificates: { cert_chain: { serial_number: string }[] }[] };
  return certs.certificates.flatMap((entry) => entry.cert_chain.map((cert) => cert.serial_number.toUpperCase()));
}

export { waitFor };
