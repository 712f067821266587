import { createHash } from 'node:crypto';
import * as path from 'node:path';
import { GatewayIR, UpstreamTls } from '../../ir/gateway-ir';
import { TypedJson } from '../protobuf/proto-json';
import { GatewaySettings } from './settings';
import { TYPE_URL } from './type-urls';

/**
 * Secrets (SDS over ADS) whose contents are files on the Envoy host: the control plane sends only the
 * paths, Envoy reads the files and reads them again whenever their directory sees a move — the atomic
 * swap with which Kubernetes (and cert-manager) replace a mounted secret. No secret value ever passes
 * through the control plane, and a rotation changes no xDS resource at all: listeners and clusters keep
 * their bytes, connections and streams in flight are untouched (docs/adr/0013-backend-credentials.md).
 */

/** The agent-facing listener's certificate (GatewaySettings.listenerTls). */
export const LISTENER_CERTIFICATE_SECRET = 'mcpgw_listener_certificate';

const pathsHash = (...paths: string[]) => createHash('sha256').update(paths.join('\0')).digest('hex').slice(0, 8);

/** Named after the files they read, so that every cluster using the same files shares one secret. */
export const tokenSecretName = (tokenFile: string) => `mcpgw_token_${pathsHash(tokenFile)}`;
export const clientCertificateSecretName = (certFile: string, keyFile: string) => `mcpgw_client_cert_${pathsHash(certFile, keyFile)}`;
export const trustedCaSecretName = (caFile: string) => `mcpgw_ca_${pathsHash(caFile)}`;

/** A reference to a secret the control plane serves on the same ADS stream. */
export const sdsSecret = (name: string) => ({ name, sds_config: { ads: {}, resource_api_version: 'V3' } });

/** Moves in the file's directory make Envoy read it again. */
const watched = (file: string) => ({ watched_directory: { path: path.dirname(file) } });

function certificateSecret(name: string, certFile: string, keyFile: string): TypedJson {
  return {
    '@type': TYPE_URL.secret,
    name,
    tls_certificate: { certificate_chain: { filename: certFile }, private_key: { filename: keyFile }, ...watched(certFile) },
  };
}

function trustedCaSecret(caFile: string): TypedJson {
  return { '@type': TYPE_URL.secret, name: trustedCaSecretName(caFile), validation_context: { trusted_ca: { filename: caFile }, ...watched(caFile) } };
}

function tokenSecret(tokenFile: string): TypedJson {
  return { '@type': TYPE_URL.secret, name: tokenSecretName(tokenFile), generic_secret: { secret: { filename: tokenFile, ...watched(tokenFile) } } };
}

function upstreamTlsSecrets(tls: UpstreamTls): TypedJson[] {
  return [
    trustedCaSecret(tls.caFile),
    ...(tls.clientCert ? [certificateSecret(clientCertificateSecretName(tls.clientCert.certFile, tls.clientCert.keyFile), tls.clientCert.certFile, tls.clientCert.keyFile)] : []),
  ];
}

/** Every secret the listener and the Tool Service clusters refer to, once each. */
export function buildSecrets(ir: GatewayIR, settings: GatewaySettings): TypedJson[] {
  const secrets = new Map<string, TypedJson>();
  const add = (secret: TypedJson) => secrets.set(secret.name as string, secret);
  if (settings.listenerTls) add(certificateSecret(LISTENER_CERTIFICATE_SECRET, settings.listenerTls.certFile, settings.listenerTls.keyFile));
  for (const cluster of ir.clusters) {
    if (cluster.endpoint.tls) upstreamTlsSecrets(cluster.endpoint.tls).forEach(add);
    if (cluster.credentials.mode === 'serviceAccount') add(tokenSecret(cluster.credentials.tokenFile));
  }
  return [...secrets.values()].sort((a, b) => String(a.name).localeCompare(String(b.name)));
}
