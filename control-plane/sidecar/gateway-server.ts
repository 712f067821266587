import * as http from 'node:http';
import { z } from 'zod';
import { APPROVAL_CHECK_PATH, APPROVAL_CONTINUATION_PATH, ApprovalCheck, approvalCheckRequestSchema, approvalCheckResponse, approvalContinuationSchema, noApprovalPages } from '../approval/approval-check';
import { POOLED_CALL_PATH, SESSION_CHECK_PATH } from '../xds/translate/settings';
import { Decision, GatewayContext, PartedBody, RequestHead, ResponseBody, respondError } from './decision';
import { JSON_RPC } from './json-rpc';
import { BackendStreams } from './backend-streams';
import { ListChangedStreams } from './list-changed-streams';
import { PooledCallLane } from './pooled-call';
import { ListenStreams } from './subscriptions-listen';
import { decideOnBody, decideOnHead, routeKeyOf } from './mcp-gateway';
import { StatelessCallSessions, answerBackendCredential, checkCall, forgetLostSession, lostSessionSchema } from './session-check';
import { SidecarObserver } from './sidecar-metrics';
import { SIDECAR_SPANS, tracedCheck } from './sidecar-tracing';
import { SpanKind, Tracing } from '../shared/tracing';

/**
 * The sidecar's one HTTP port behind Envoy (docs/adr/0008-data-path-lanes.md):
 * - `/mcp/...`: the gateway lane — every MCP request the gateway answers itself (initialize,
 *   tools/list, ping, notifications, clients' answers, DELETE, GET streams);
 * - `/check/mcp/...`: the call lane's session check (Envoy's ext_authz over HTTP);
 * - `/internal/backend-session-lost`: the call script's report of a backend that lost a session;
 * - `/internal/server-request`: the call script's record of a request a backend sends its client.
 * - `/internal/approval-check`: the call script's question whether a call has its approval,
 *   `/internal/approval-continuation`: its report that the backend asked the client of an approved
 *   call for input (2026-07-28), and `/approvals/...`: the approval pages (control-plane/approval/, through Envoy);
 * - `/internal/pooled-call`: a stateless client's call in a pooled backend session, which the sidecar
 *   forwards and resumes if its backend ends the stream early (pooled-call.ts).
 */

/** Where the call script reports a lost backend session (control-plane/xds/lua/call-lane.lua). */
export const LOST_SESSION_PATH = '/internal/backend-session-lost';
/** Where the call script asks for a backend's per-caller credentials. */
export const BACKEND_CREDENTIAL_PATH = '/internal/backend-credential';
/** Where the call script records a request a backend sends its client, before the client sees it. */
export const SERVER_REQUEST_PATH = '/internal/server-request';

const serverRequestSchema = z.object({ gatewaySessionId: z.string().min(1), backend: z.string().min(1), requestId: z.string().min(1) });
/** The call script's report is a few ids. */
const MAX_REPORT_BYTES = 4096;

class BodyTooLarge extends Error {}

function readBody(req: http.IncomingMessage, maxBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        reject(new BodyTooLarge(`request body over ${maxBytes} bytes`));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/** A report or question of the call script, as JSON (a few ids, unless told more); undefined when it is not JSON at all, or too large. */
async function readReport(req: http.IncomingMessage, maxBytes = MAX_REPORT_BYTES): Promise<unknown> {
  try {
    return JSON.parse((await readBody(req, maxBytes)).toString('utf8'));
  } catch {
    return undefined;
  }
}

function headOf(req: http.IncomingMessage, path: string): RequestHead {
  const headers = new Map<string, string>();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(', ') : value);
  }
  return { method: req.method ?? '', path, headers };
}

function send(res: http.ServerResponse, status: number, headers: Record<string, string>, body: ResponseBody): void {
  if (!(body instanceof PartedBody)) {
    res.writeHead(status, headers);
    res.end(body);
    return;
  }
  res.writeHead(status, { ...headers, 'content-length': String(body.length) });
  // Corked until end(): the head and the parts leave together in one writev, none of them copied.
  res.cork();
  for (const part of body.parts) res.write(part);
  res.end();
}

export interface GatewayServerOptions {
  maxRequestBodyBytes: number;
  /** The approval check and pages, when configured (docs/approval-and-audit.md). */
  approvals?: { check: ApprovalCheck; pages: http.RequestListener };
}

/** The check's request carries the call's arguments and a few fields around them. */
const APPROVAL_CHECK_OVERHEAD_BYTES = 64 * 1024;
const APPROVALS_PREFIX = '/approvals/';

export class GatewayServer {
  private readonly statelessSessions: StatelessCallSessions;
  private readonly pooledCalls: PooledCallLane;

  constructor(
    private readonly context: GatewayContext,
    private readonly streams: ListChangedStreams,
    private readonly backendStreams: BackendStreams,
    private readonly listens: ListenStreams,
    private readonly options: GatewayServerOptions,
    private readonly observer: SidecarObserver,
    private readonly tracing: Tracing = Tracing.off,
  ) {
    this.statelessSessions = new StatelessCallSessions(context);
    this.pooledCalls = new PooledCallLane(context, backendStreams);
  }

  readonly handle = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const path = req.url ?? '/';
    const work = path.startsWith(`${SESSION_CHECK_PATH}/`)
      ? this.check(req, res, path.slice(SESSION_CHECK_PATH.length))
      : path === LOST_SESSION_PATH
        ? this.lostSession(req, res)
        : path === BACKEND_CREDENTIAL_PATH
          ? this.backendCredential(req, res)
          : path === SERVER_REQUEST_PATH
            ? this.serverRequest(req, res)
            : path === POOLED_CALL_PATH
              ? this.pooledCall(req, res)
              : path === APPROVAL_CHECK_PATH
              ? this.approvalCheck(req, res)
              : path === APPROVAL_CONTINUATION_PATH
                ? this.approvalContinuation(req, res)
                : path.startsWith(APPROVALS_PREFIX)
                ? this.approvalPages(req, res)
                : this.gatewayLane(req, res, path);
    work.catch((error: Error) => {
      this.context.log.error('sidecar request failed', { error: error.stack, path });
      if (res.headersSent) {
        res.destroy();
        return;
      }
      // Nothing was decided: the client learns why, in JSON-RPC form (no backend is reached).
      const failure = respondError(503, null, JSON_RPC.INTERNAL_ERROR, `gateway error: ${error.message}`, 'gateway_error');
      send(res, failure.status, failure.headers, failure.body);
    });
  };

  private async check(req: http.IncomingMessage, res: http.ServerResponse, path: string): Promise<void> {
    req.resume();
    const head = headOf(req, path);
    const answer = await tracedCheck(this.tracing, head, () => checkCall(head, this.context, this.statelessSessions));
    send(res, answer.status, answer.headers, answer.body);
  }

  private async backendCredential(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    req.resume();
    const answer = await answerBackendCredential(headOf(req, BACKEND_CREDENTIAL_PATH), this.context);
    send(res, answer.status, answer.headers, answer.body);
  }

  private async serverRequest(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const parsed = serverRequestSchema.safeParse(await readReport(req));
    if (!parsed.success) {
      send(res, 400, { 'content-type': 'text/plain' }, 'expected {gatewaySessionId, backend, requestId}');
      return;
    }
    await this.context.sessions.expectAnswer(parsed.data.gatewaySessionId, parsed.data.backend, parsed.data.requestId);
    send(res, 204, {}, '');
  }

  private async pooledCall(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    // Envoy's mcp filter bounded the body already; this bound is the sidecar's own.
    const body = await readBody(req, this.options.maxRequestBodyBytes);
    await this.pooledCalls.forward(headOf(req, POOLED_CALL_PATH), body, res);
  }

  private async lostSession(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const parsed = lostSessionSchema.safeParse(await readReport(req));
    if (!parsed.success) {
      send(res, 400, { 'content-type': 'text/plain' }, 'expected {route, backend, backendSessionId, gatewaySessionId}');
      return;
    }
    const { route, backend } = parsed.data;
    await this.tracing.inSpan(
      SIDECAR_SPANS.lostBackendSession,
      { kind: SpanKind.SERVER, parentHeaders: headOf(req, LOST_SESSION_PATH).headers, attributes: { 'mcp.gateway.route': route, 'mcp.gateway.backend': backend } },
      () => forgetLostSession(parsed.data, this.context, this.statelessSessions),
    );
    this.context.log.info('a backend lost the session of a call; the next call opens a new one', { route: parsed.data.route, backend: parsed.data.backend });
    send(res, 204, {}, '');
  }

  private async approvalCheck(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const parsed = approvalCheckRequestSchema.safeParse(await readReport(req, this.options.maxRequestBodyBytes + APPROVAL_CHECK_OVERHEAD_BYTES));
    if (!parsed.success) {
      // The call script fails the call closed on anything but an answer naming its outcome.
      send(res, 400, { 'content-type': 'text/plain' }, `approval check: ${parsed.error.issues[0]?.message ?? 'not JSON'}`);
      return;
    }
    const answer = this.options.approvals ? await this.options.approvals.check.check(parsed.data) : noApprovalPages(parsed.data);
    const { status, headers, body } = approvalCheckResponse(answer);
    send(res, status, headers, body);
  }

  private async approvalContinuation(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    // The backend's requestState may be as large as a request.
    const parsed = approvalContinuationSchema.safeParse(await readReport(req, this.options.maxRequestBodyBytes + APPROVAL_CHECK_OVERHEAD_BYTES));
    if (!parsed.success || !this.options.approvals) {
      // The answer goes to the client as it is; its retry then asks for an approval again.
      send(res, 400, { 'content-type': 'text/plain' }, parsed.success ? 'approvals are not configured on this gateway' : 'expected {approvalId, requestState, inputRequestKeys}');
      return;
    }
    const recorded = await this.options.approvals.check.recordContinuation(parsed.data);
    send(res, recorded ? 204 : 404, {}, '');
  }

  private async approvalPages(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    if (!this.options.approvals) {
      req.resume();
      send(res, 404, { 'content-type': 'text/plain' }, 'approvals are not configured on this gateway');
      return;
    }
    this.options.approvals.pages(req, res);
  }

  private async gatewayLane(req: http.IncomingMessage, res: http.ServerResponse, path: string): Promise<void> {
    const head = headOf(req, path);
    let decision = await decideOnHead(head, this.context);
    if (decision.kind === 'read-body') {
      let body: Buffer;
      try {
        body = await readBody(req, this.options.maxRequestBodyBytes);
      } catch (error) {
        if (!(error instanceof BodyTooLarge)) throw error;
        decision = respondError(413, null, JSON_RPC.INVALID_REQUEST, `request body too large for the gateway (${error.message})`, 'body_too_large');
        body = Buffer.alloc(0);
      }
      if (decision.kind === 'read-body') decision = await decideOnBody(head, body, this.context);
    } else {
      req.resume();
    }
    this.observe(decision, head);
    await this.carryOut(decision, res);
  }

  private async carryOut(decision: Decision, res: http.ServerResponse): Promise<void> {
    switch (decision.kind) {
      case 'respond':
        return send(res, decision.status, decision.headers, decision.body);
      case 'stream':
        return this.streams.hold(decision.session, decision.head, res);
      case 'resume':
        return this.backendStreams.resume(decision.session, decision.backend, decision.resumption, decision.head, res);
      case 'listen':
        return this.listens.hold(decision.view, decision.id, decision.honored, decision.head, res);
      case 'relay': {
        const answer = await this.context.backendSessions.relay(decision.backend, decision.onBehalf, decision.body);
        return send(res, answer.status, answer.body.length ? { 'content-type': answer.contentType } : {}, answer.body);
      }
      case 'read-body':
        throw new Error('a request body was asked for twice');
    }
  }

  /** Route keys label metrics only when the route exists: clients choose the paths. */
  private observe(decision: Decision, head: RequestHead): void {
    const key = routeKeyOf(head.path).key;
    const route = key !== undefined && this.context.lookup(key) ? key : '(none)';
    this.observer.decided(route, decision.kind === 'respond' ? decision.reason : decision.kind);
  }

  close(): void {
    this.streams.close();
    this.listens.close();
  }
}
