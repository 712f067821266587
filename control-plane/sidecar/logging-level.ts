import { z } from 'zod';
import { Decision, GatewayContext, RequestHead, clientOf, respondError, respondJson } from './decision';
import { JSON_RPC, JsonRpcId, jsonRpcResult } from './json-rpc';
import { RouteCatalogView } from './route-catalog';
import { backendSessionFor } from './session-check';
import { GatewaySession } from './sessions/session-store';

/**
 * logging/setLevel (MCP 2025-11-25; docs/adr/0015-federated-resources-and-prompts.md): the client
 * sets one level for the whole gateway, so every backend of the route that logs gets it in the
 * client's session with that backend (opened now where there is none yet), and backend sessions
 * opened later get it when they open. The backends' notifications/message reach the client with the
 * backend named (backend-streams.ts).
 */

const LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'] as const;
const paramsSchema = z.looseObject({ level: z.enum(LEVELS) });

/** The `_meta` key naming the backends that did not take the level. */
export const LOGGING_META_KEY = 'mcpgw/logging';

export async function setLevelForSession(
  params: unknown,
  id: JsonRpcId,
  session: GatewaySession,
  head: RequestHead,
  view: RouteCatalogView,
  context: GatewayContext,
): Promise<Decision> {
  const parsed = paramsSchema.safeParse(params);
  if (!parsed.success) return respondError(200, id, JSON_RPC.INVALID_PARAMS, `logging/setLevel params.level must be one of ${LEVELS.join(', ')}`, 'invalid_params');
  const { level } = parsed.data;
  await context.sessions.setLogLevel(session.id, level);
  const withLevel = { ...session, logLevel: level };
  const loggers = [...view.backends.values()].filter((backend) => backend.capabilities.logging !== undefined && backend.state !== 'missing');
  const failed: { backend: string; error: string }[] = [];
  await Promise.all(
    loggers.map(async (backend) => {
      try {
        // A backend session opened here gets the level as it opens (openBackendSession): only an existing one is told now.
        const existed = session.backends[backend.name] !== undefined;
        const backendSessionId = await backendSessionFor(withLevel, backend, head, context);
        if (backendSessionId === undefined || !existed) return;
        const answer = await context.backendSessions.relay(
          backend,
          { backendSessionId, protocolVersion: session.protocolVersion, caller: clientOf(head) },
          JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'logging/setLevel', params: { level } }),
        );
        if (answer.status >= 400) throw new Error(`it answered HTTP ${answer.status}`);
      } catch (error) {
        failed.push({ backend: backend.name, error: (error as Error).message });
      }
    }),
  );
  if (failed.length > 0) context.log.warn('some backends did not take the client’s log level', { route: view.key, failed });
  return respondJson(200, jsonRpcResult(id, failed.length > 0 ? { _meta: { [LOGGING_META_KEY]: { notSetAt: failed } } } : {}), 'logging_set_level');
}
