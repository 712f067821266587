import { once } from 'node:events';
import * as http from 'node:http';
import { createParser } from 'eventsource-parser';
import { z } from 'zod';
import { BACKEND_UNAVAILABLE_CODE } from '../xds/translate/local-replies';
import { CHECK_HEADERS } from '../xds/translate/settings';
import { BackendStreams, resumeRequest } from './backend-streams';
import { Caller, GatewayContext, RequestHead, clientOf, respondError } from './decision';
import { JsonRpcId, isObject } from './json-rpc';
import { POOLED_SESSION_VERSION } from './session-check';

/**
 * The pooled-call lane (docs/adr/0018-stream-relaying.md, "Gaps closed later", 1): a stateless
 * (2026-07-28) client's tools/call that goes in a session-era backend's pooled session comes here from
 * Envoy's pooled-call route, as the call script made it (the tool's own name, the pooled session in
 * Mcp-Session-Id). It goes on through the egress listener, and its answer comes back chunk by chunk as
 * the backend sends it: the call script rewrites and annotates it on its way to the client, as on the
 * call route. When the backend ends the call's stream before the answer (SEP-1699, although the pooled
 * session's revision has none), the stream is resumed there with a GET after the backend's last event
 * id and relayed the same way; one that cannot be resumed just ends, and the call script gives the
 * client the call's -32004. Nothing is held but the events' ids: no answer is buffered.
 */

const laneHeadersSchema = z.object({
  route: z.string().min(1),
  backend: z.string().min(1),
  backendSessionId: z.string().min(1),
});

/** What a relayed stream showed: the backend's last event id, and whether the call's answer passed. */
interface Relayed {
  lastEventId?: string;
  answered: boolean;
}

/** A JSON-RPC response (an answer, not a request or notification of the backend's). */
function isAnswer(data: string): boolean {
  let message: unknown;
  try {
    message = JSON.parse(data);
  } catch {
    return false;
  }
  return isObject(message) && typeof message.method !== 'string' && ('result' in message || 'error' in message);
}

function idOf(body: Buffer): JsonRpcId {
  try {
    const id = (JSON.parse(body.toString('utf8')) as { id?: unknown }).id;
    return typeof id === 'string' || typeof id === 'number' ? id : null;
  } catch {
    return null;
  }
}

export class PooledCallLane {
  /** Resumes under way per pooled backend session: bounded like the streams of one gateway session. */
  private readonly resumesIn = new Map<string, number>();

  constructor(
    private readonly context: GatewayContext,
    private readonly streams: BackendStreams,
  ) {}

  async forward(head: RequestHead, body: Buffer, res: http.ServerResponse): Promise<void> {
    const refuse = (message: string, reason: string) => {
      const refusal = respondError(200, idOf(body), BACKEND_UNAVAILABLE_CODE, message, reason);
      res.writeHead(refusal.status, refusal.headers);
      res.end(refusal.body);
    };
    const named = laneHeadersSchema.safeParse({
      route: head.headers.get(CHECK_HEADERS.route),
      backend: head.headers.get(CHECK_HEADERS.backend),
      backendSessionId: head.headers.get('mcp-session-id'),
    });
    if (!named.success) return refuse('the pooled-call lane takes only calls the call script sent in a pooled backend session', 'pooled_call_unnamed');
    const { route, backend: name, backendSessionId } = named.data;
    const backend = this.context.lookup(route)?.backends.get(name);
    if (!backend) return refuse(`backend "${name}" is not on route "${route}" (any longer): call again`, 'pooled_call_unknown_backend');
    if (!this.streams.occupy()) return refuse('this gateway replica holds its most backend streams: call again later', 'pooled_call_full');
    const left = new AbortController();
    res.on('close', () => left.abort());
    // The caller's own token (moved aside by the call script): the sidecar makes the backend's credentials from it, as for all its requests.
    const callerAuthorization = head.headers.get(CHECK_HEADERS.callerAuthorization);
    const caller: Caller = { headers: clientOf(head).headers, ...(callerAuthorization !== undefined && { authorization: callerAuthorization }) };
    const protocolVersion = head.headers.get('mcp-protocol-version') ?? POOLED_SESSION_VERSION;
    try {
      const response = await this.context.backendSessions.request(backend, caller, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: head.headers.get('accept') ?? 'application/json, text/event-stream',
          'mcp-session-id': backendSessionId,
          'mcp-protocol-version': protocolVersion,
        },
        body: body.toString('utf8'),
        signal: left.signal,
      });
      const contentType = response.headers.get('content-type');
      // Without the backend's content-length: fetch hands over the body decoded.
      res.writeHead(response.status, contentType ? { 'content-type': contentType } : {});
      res.flushHeaders();
      if (!response.body) return;
      let relayed = await this.relay(response.body, res, left.signal);
      if (!(contentType ?? '').includes('text/event-stream')) return;
      while (!relayed.answered && relayed.lastEventId !== undefined && !left.signal.aborted) {
        this.context.log.info("resuming a pooled call's stream its backend ended before the answer", { route, backend: name });
        const resumed = await this.resume(backend.name, backendSessionId, () =>
          this.streams.stream(backend, caller, resumeRequest(backendSessionId, protocolVersion, relayed.lastEventId!), left.signal, async (resumption, signal) => {
            if (!resumption.ok || !(resumption.headers.get('content-type') ?? '').includes('text/event-stream') || !resumption.body) {
              await resumption.body?.cancel();
              throw new Error(`HTTP ${resumption.status}`);
            }
            return this.relay(resumption.body, res, signal);
          }),
        ).catch((error: Error) => {
          if (!left.signal.aborted) this.context.log.warn("a backend could not resume a pooled call's stream: the client gets the call's error", { route, backend: name, error: error.message });
          return undefined;
        });
        // Nothing new: the backend has no more to give.
        if (!resumed || resumed.lastEventId === undefined) break;
        relayed = resumed;
      }
    } catch (error) {
      if (!res.headersSent) return refuse(`backend ${name} could not be reached: ${(error as Error).message}`, 'pooled_call_unreachable');
    } finally {
      this.streams.vacate();
      res.end();
    }
  }

  /** One resume in a pooled session, within the per-session bound of backend streams. */
  private async resume(backend: string, backendSessionId: string, resume: () => Promise<Relayed>): Promise<Relayed> {
    const under = this.resumesIn.get(backendSessionId) ?? 0;
    if (under >= this.streams.limits.perSession) throw new Error(`the pooled session with ${backend} has ${under} resumes under way, its most`);
    this.resumesIn.set(backendSessionId, under + 1);
    try {
      return await resume();
    } finally {
      const now = (this.resumesIn.get(backendSessionId) ?? 1) - 1;
      if (now === 0) this.resumesIn.delete(backendSessionId);
      else this.resumesIn.set(backendSessionId, now);
    }
  }

  /** A backend's answer passed on chunk by chunk as it comes; its events are only looked at (ids, the answer). */
  private async relay(body: ReadableStream<Uint8Array>, res: http.ServerResponse, signal: AbortSignal): Promise<Relayed> {
    const seen: Relayed = { answered: false };
    const parser = createParser({
      onEvent: (event) => {
        if (event.id) seen.lastEventId = event.id;
        if (!seen.answered && isAnswer(event.data)) seen.answered = true;
      },
    });
    const decoder = new TextDecoder();
    try {
      for await (const chunk of body) {
        parser.feed(decoder.decode(chunk, { stream: true }));
        // The client's pace: a client that left aborts `signal` (and this wait with it).
        if (!res.write(chunk)) await once(res, 'drain', { signal });
        // The call is answered: the stream ends here, whether or not the backend would keep it open (a
        // resumed stream whose answer was replayed may stay open at the backend).
        if (seen.answered) break;
      }
    } catch (error) {
      // The backend ended it (or the client left): what follows decides.
      if (!signal.aborted) this.context.log.debug("a pooled call's stream ended", { error: (error as Error).message });
    }
    return seen;
  }
}
