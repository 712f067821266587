import * as grpc from '@grpc/grpc-js';
import { InternalRole, peerIdentities, vouchesFor } from '../shared/internal-tls';
import { Logger } from '../shared/log';

/**
 * Who may call each method of the control plane's gRPC port when it serves mutual TLS, and the name
 * each request claims (an Envoy's node id, a sidecar's id), which the caller's certificate must vouch
 * for (docs/adr/0017-closed-inside.md).
 */
export interface CallerRule {
  role: InternalRole;
  /** The name a request claims; undefined when this message claims none. */
  claimedName(message: unknown): string | undefined;
  /** The first message must claim a name (ADS: a request without a node would be served as nobody's). */
  firstMessageClaims: boolean;
}

const nodeIdOf = (message: unknown) => (message as { node?: { id?: string } | null }).node?.id || undefined;

/** The control plane's gRPC methods and who may call them. */
export const CONTROL_PLANE_CALLERS: Record<string, CallerRule> = {
  '/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources': { role: 'envoy', claimedName: nodeIdOf, firstMessageClaims: true },
  '/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources': { role: 'envoy', claimedName: nodeIdOf, firstMessageClaims: true },
  '/mcpgw.catalog.v1.CatalogDiscovery/WatchCatalog': {
    role: 'sidecar',
    claimedName: (message) => (message as { sidecar_id?: string }).sidecar_id || undefined,
    firstMessageClaims: true,
  },
};

/**
 * A server interceptor that ends a call with PERMISSION_DENIED before its handler sees anything the
 * caller may not send: a method not in `rules`, a certificate without the method's role, a message
 * claiming a name the certificate does not vouch for (every message that claims one is checked).
 */
export function callerCheck(rules: Record<string, CallerRule>, log: Logger): grpc.ServerInterceptor {
  return (method, call) => {
    const rule = rules[method.path];
    let refused = false;
    let first = true;
    const refuse = (details: string) => {
      if (refused) return;
      refused = true;
      log.warn('refused an internal caller', { method: method.path, peer: call.getPeer(), reason: details });
      call.sendStatus({ code: grpc.status.PERMISSION_DENIED, details });
    };
    const identities = () => peerIdentities(call.getAuthContext().sslPeerCertificate);
    return new grpc.ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMetadata: (metadata, nextMetadata) => {
            const held = identities();
            if (!rule) refuse(`${method.path} is not served to internal callers`);
            else if (!held.some((identity) => identity.role === rule.role)) {
              refuse(`${method.path} needs a gateway ${rule.role} certificate; this one names ${held.map((i) => `${i.role}/${i.name}`).join(', ') || 'no gateway identity'}`);
            } else nextMetadata(metadata);
          },
          onReceiveMessage: (message, nextMessage) => {
            if (refused) return;
            const claimed = rule.claimedName(message);
            const isFirst = first;
            first = false;
            if (claimed === undefined) {
              if (isFirst && rule.firstMessageClaims) refuse(`the first request of ${method.path} must name its ${rule.role === 'envoy' ? 'node id' : 'sidecar id'}`);
              else nextMessage(message);
              return;
            }
            if (!identities().some((identity) => vouchesFor(identity, rule.role, claimed))) {
              refuse(`the certificate does not vouch for ${rule.role} "${claimed}" (it names ${identities().map((i) => `${i.role}/${i.name}`).join(', ')})`);
              return;
            }
            if (isFirst) {
              // Which certificate each long-lived stream was opened with: what a renewal is checked against.
              const certificate = call.getAuthContext().sslPeerCertificate;
              log.info('internal stream opened', { method: method.path, [rule.role === 'envoy' ? 'node' : 'sidecar']: claimed, serial: certificate?.serialNumber, notAfter: certificate?.valid_to });
            }
            nextMessage(message);
          },
        }),
    });
  };
}
