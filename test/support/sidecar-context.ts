import { BackendCredentialsProvider } from '../../control-plane/credentials/backend-credentials';
import { TOKEN_CACHE_DEFAULTS, TokenCache } from '../../control-plane/credentials/token-cache';
import { GatewayContext } from '../../control-plane/sidecar/decision';
import { RouteCatalogView } from '../../control-plane/sidecar/route-catalog';
import { MemorySessionStore } from '../../control-plane/sidecar/sessions/session-store';
import { quietLogger } from './quiet-logger';


/**
 * The sidecar's decision context for unit tests: these route views, in-memory sessions, and a fake for
 * opening and ending the backends' own sessions that records what it was asked.
 */
export function sidecarContext(views: Map<string, RouteCatalogView>, openBackendSession: (url: string) => Promise<string> = async () => 'backend-session-1') {
  const opened: string[] = [];
  const closed: string[] = [];
  const posted: { url: string; backendSessionId: string; message: unknown }[] = [];
  const context: GatewayContext = {
    lookup: (key) => views.get(key),
    sessions: new MemorySessionStore(60),
    backendSessions: {
      open: async ({ url }) => {
        opened.push(url);
        return openBackendSession(url);
      },
      close: async ({ url }, { backendSessionId }) => {
        closed.push(`${url} ${backendSessionId}`);
      },
      relay: async ({ url }, { backendSessionId }, message) => {
        posted.push({ url, backendSessionId, message: JSON.parse(message) });
        return { status: 202, contentType: 'application/json', body: Buffer.alloc(0) };
      },
      request: async () => {
        throw new Error('no backend streams in unit tests');
      },
    },
    // No IdP: per-caller credentials fail as unavailable (tests of them bring their own).
    credentials: new BackendCredentialsProvider(undefined, new TokenCache(TOKEN_CACHE_DEFAULTS, { lookup: () => undefined, issued: () => undefined })),
    log: quietLogger,
  };
  return { context, opened, closed, posted };
}
