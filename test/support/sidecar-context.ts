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
  const notified: { url: string; backendSessionId: string; notification: unknown }[] = [];
  const context: GatewayContext = {
    lookup: (key) => views.get(key),
    streams: false,
    sessions: new MemorySessionStore(60),
    backendSessions: {
      open: async ({ url }) => {
        opened.push(url);
        return openBackendSession(url);
      },
      close: async ({ url }, { backendSessionId }) => {
        closed.push(`${url} ${backendSessionId}`);
      },
      notify: async ({ url }, { backendSessionId }, notification) => {
        notified.push({ url, backendSessionId, notification });
      },
      resend: async () => {
        throw new Error('unit tests do not resend calls');
      },
    },
    log: quietLogger,
  };
  return { context, opened, closed, notified };
}
