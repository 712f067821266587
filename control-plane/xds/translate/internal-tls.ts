import * as path from 'node:path';
import { INTERNAL_TLS_FILES, InternalRole, roleSanPatterns } from '../../shared/internal-tls';
import { TypedJson } from '../protobuf/proto-json';
import { GatewaySettings } from './settings';
import { TYPE_URL } from './type-urls';

/**
 * Envoy's side of the inside's mutual TLS towards the sidecars (docs/adr/0017-closed-inside.md): its
 * internal certificate and CA as two SDS secrets served on the ADS stream. They hold file paths on the
 * Envoy host only; Envoy reads the files and reads them again on every move in their directory (the
 * kubelet's swap of a mounted Secret), so a renewal changes no xDS resource and cuts no connection.
 */
export const INTERNAL_CERTIFICATE_SECRET = 'mcpgw_internal_certificate';
export const INTERNAL_CA_SECRET = 'mcpgw_internal_ca';

const adsSecret = (name: string) => ({ name, sds_config: { ads: {}, resource_api_version: 'V3' } });

/** TLS 1.3 only: every peer inside is the gateway's own (Envoy 1.40, Node 22+). */
export const INTERNAL_TLS_PARAMS = { tls_minimum_protocol_version: 'TLSv1_3', tls_maximum_protocol_version: 'TLSv1_3' };

/** The two secrets, when the inside is mutual TLS. */
export function buildInternalSecrets(settings: GatewaySettings): TypedJson[] {
  if (!settings.internalTls) return [];
  const dir = settings.internalTls.envoyDir;
  const file = (name: string) => path.join(dir, name);
  return [
    {
      '@type': TYPE_URL.secret,
      name: INTERNAL_CA_SECRET,
      validation_context: { trusted_ca: { filename: file(INTERNAL_TLS_FILES.ca) }, watched_directory: { path: dir } },
    },
    {
      '@type': TYPE_URL.secret,
      name: INTERNAL_CERTIFICATE_SECRET,
      tls_certificate: {
        certificate_chain: { filename: file(INTERNAL_TLS_FILES.certificate) },
        private_key: { filename: file(INTERNAL_TLS_FILES.key) },
        watched_directory: { path: dir },
      },
    },
  ];
}

/** Envoy's SAN matchers for a peer of `role`: either form of the identity (either matcher suffices). */
export const roleSanMatchers = (role: InternalRole) =>
  Object.entries(roleSanPatterns(role)).map(([sanType, regex]) => ({ san_type: sanType, matcher: { safe_regex: { regex } } }));

/** Envoy's internal certificate, and the internal CA and a SAN of `peerRole` required of the peer's. */
const internalTlsContext = (peerRole: InternalRole) => ({
  tls_params: INTERNAL_TLS_PARAMS,
  tls_certificate_sds_secret_configs: [adsSecret(INTERNAL_CERTIFICATE_SECRET)],
  combined_validation_context: {
    default_validation_context: { match_typed_subject_alt_names: roleSanMatchers(peerRole) },
    validation_context_sds_secret_config: adsSecret(INTERNAL_CA_SECRET),
  },
});

/** The transport socket of a cluster whose every endpoint must hold a certificate of `peerRole`. */
export function internalTransportSocket(peerRole: InternalRole) {
  return {
    name: 'envoy.transport_sockets.tls',
    typed_config: { '@type': TYPE_URL.upstreamTls, common_tls_context: internalTlsContext(peerRole) },
  };
}

/**
 * The transport socket of a listener only holders of a `peerRole` certificate may use: the handshake
 * fails without a client certificate, with one of another CA, or with one naming another role, before
 * any request is read.
 */
export function internalListenerTransportSocket(peerRole: InternalRole) {
  return {
    name: 'envoy.transport_sockets.tls',
    typed_config: { '@type': TYPE_URL.downstreamTls, require_client_certificate: true, common_tls_context: internalTlsContext(peerRole) },
  };
}
