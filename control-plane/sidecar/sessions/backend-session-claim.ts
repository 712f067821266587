import type { GatewayContext } from '../decision';
import type { BackendView } from '../route-catalog';
import type { OnBehalf } from './backend-sessions';
import { GatewaySession, SessionGoneError } from './session-store';

/** What became of a backend session the sidecar opened for a gateway session. */
export type BackendClaim =
  /** The backend session the call goes in: the one just opened, or the one another replica recorded first. */
  | { kind: 'claimed'; backendSessionId: string }
  /** The gateway session ended (DELETE or expiry) meanwhile: answer the call as for an unknown session. */
  | { kind: 'session-gone' };

/**
 * Records a backend session just opened for `gateway`, and ends it again at the backend when it does
 * not count, so that no backend session outlives the gateway session it was opened for:
 * - the gateway session ended while it was being opened (SessionGoneError): nothing is recorded;
 * - another replica recorded its own first: the call goes in that one, this one is surplus.
 * The DELETE to the backend runs in the background: the call does not wait for it.
 */
export async function claimOpenedBackendSession(
  context: Pick<GatewayContext, 'sessions' | 'backendSessions' | 'log'>,
  backend: BackendView,
  gateway: GatewaySession,
  opened: OnBehalf,
): Promise<BackendClaim> {
  const closeOpened = (why: string) => {
    if (opened.backendSessionId === '') return; // a stateless backend: there is no session to end
    context.backendSessions.close(backend, opened).catch((error: Error) =>
      context.log.warn('could not end a backend session nobody uses; the backend expires it', {
        route: gateway.route,
        backend: backend.name,
        why,
        error: error.message,
      }),
    );
  };
  try {
    const backendSessionId = await context.sessions.claimBackend(gateway.id, backend.name, opened.backendSessionId);
    if (backendSessionId !== opened.backendSessionId) closeOpened('another replica recorded a backend session first');
    return { kind: 'claimed', backendSessionId };
  } catch (error) {
    if (!(error instanceof SessionGoneError)) throw error;
    closeOpened('the gateway session ended while it was being opened');
    return { kind: 'session-gone' };
  }
}
