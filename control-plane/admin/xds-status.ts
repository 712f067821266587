import { XdsCallbacks, XdsNodeRef } from '../xds/server/callbacks';
import { Logger } from '../shared/log';
import { ControlPlaneMetrics, shortType } from './metrics';

export interface NodeStatus {
  node: XdsNodeRef;
  connectedAt: string;
  /** Last version ACKed, by type URL. */
  acked: Record<string, string>;
  /** Last version sent, by type URL. */
  sent: Record<string, string>;
  lastNack?: { typeUrl: string; version: string; errorDetail: string; at: string };
}

type AckWaiter = { typeUrl: string; version: string; resolve: () => void };

/**
 * Per-Envoy xDS status for the admin API and metrics, fed by the xDS server's callbacks. It also lets
 * the publisher wait until every connected Envoy has answered a given version (make before break).
 */
export class XdsStatusTracker {
  /** By node id: each Envoy needs a unique one (the devstack and the compose file give one each). */
  private readonly nodes = new Map<string, NodeStatus>();
  private readonly waiters = new Set<AckWaiter>();
  /** By node id: the resource types whose latest answer from that node was a NACK (it serves an older version). */
  private readonly rejecting = new Map<string, Set<string>>();
  /** Every resource type sent so far (short names): each has a rejecting count, 0 while all is well. */
  private readonly typesSent = new Set<string>();

  constructor(
    private readonly metrics: ControlPlaneMetrics,
    private readonly log: Logger,
  ) {}

  list(): NodeStatus[] {
    return [...this.nodes.values()];
  }

  /** Connected nodes whose latest answer for a resource type (short name) was a NACK, by every type sent. */
  nodesRejecting(): Map<string, number> {
    const byType = new Map<string, number>([...this.typesSent].map((type) => [type, 0]));
    for (const types of this.rejecting.values()) for (const type of types) byType.set(type, (byType.get(type) ?? 0) + 1);
    return byType;
  }

  /** Connected nodes whose latest answer to any resource type was a NACK. */
  rejectingNodeCount(): number {
    return [...this.rejecting.values()].filter((types) => types.size > 0).length;
  }

  private answered(node: XdsNodeRef, typeUrl: string, accepted: boolean): void {
    const types = this.rejecting.get(node.id) ?? new Set<string>();
    if (accepted) types.delete(shortType(typeUrl));
    else types.add(shortType(typeUrl));
    this.rejecting.set(node.id, types);
  }

  callbacks(): XdsCallbacks {
    const statusFor = (node: XdsNodeRef) => {
      let status = this.nodes.get(node.id);
      if (!status) {
        status = { node, connectedAt: new Date().toISOString(), acked: {}, sent: {} };
        this.nodes.set(node.id, status);
        this.metrics.xdsConnectedNodes.set(this.nodes.size);
      }
      return status;
    };
    return {
      onPush: (node, typeUrl, version) => {
        statusFor(node).sent[typeUrl] = version;
        this.typesSent.add(shortType(typeUrl));
        this.metrics.xdsPushes.inc({ type: shortType(typeUrl) });
        this.log.debug('xds sent', { node: node.id, type: shortType(typeUrl), version });
      },
      onAck: (node, typeUrl, version, pushToAckMs) => {
        statusFor(node).acked[typeUrl] = version;
        this.answered(node, typeUrl, true);
        this.metrics.xdsAcks.inc({ type: shortType(typeUrl) });
        this.metrics.xdsPushToAckSeconds.observe({ type: shortType(typeUrl) }, pushToAckMs / 1000);
        this.log.debug('xds ACK', { node: node.id, type: shortType(typeUrl), version, pushToAckMs });
        this.settleWaiters();
      },
      onNack: (node, typeUrl, version, errorDetail) => {
        statusFor(node).lastNack = { typeUrl, version, errorDetail, at: new Date().toISOString() };
        this.answered(node, typeUrl, false);
        this.metrics.xdsNacks.inc({ type: shortType(typeUrl) });
        this.log.error('xds NACK: Envoy rejected the config and keeps serving its last accepted version', {
          node: node.id,
          type: shortType(typeUrl),
          rejectedVersion: version,
          error_detail: errorDetail,
        });
        this.settleWaiters();
      },
      onStreamClosed: (_streamId, node) => {
        if (node) {
          this.nodes.delete(node.id);
          this.rejecting.delete(node.id);
        }
        this.metrics.xdsConnectedNodes.set(this.nodes.size);
        this.settleWaiters();
      },
    };
  }

  /** Resolves once every connected node has ACKed or NACKed `version` of `typeUrl`, or after timeoutMs. */
  waitForAnswers(typeUrl: string, version: string, timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      const waiter: AckWaiter = {
        typeUrl,
        version,
        resolve: () => {
          clearTimeout(timer);
          this.waiters.delete(waiter);
          resolve();
        },
      };
      const timer = setTimeout(waiter.resolve, timeoutMs);
      this.waiters.add(waiter);
      this.settleWaiters();
    });
  }

  private settleWaiters(): void {
    for (const waiter of [...this.waiters]) {
      const answered = this.list().every(
        (status) => status.acked[waiter.typeUrl] === waiter.version || status.lastNack?.version === waiter.version,
      );
      if (answered) waiter.resolve();
    }
  }
}
