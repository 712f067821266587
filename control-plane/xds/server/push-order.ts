import { TYPE_URL } from '../translate/type-urls';

/**
 * Secrets and clusters first, so that routes never name a cluster Envoy does not know yet, and jwt_authn's
 * configuration (ECDS) before the routes that name its requirements (make before break); Envoy asks
 * for a secret by name once a cluster or listener refers to it.
 */
export const PUSH_ORDER = [TYPE_URL.secret, TYPE_URL.cluster, TYPE_URL.clusterLoadAssignment, TYPE_URL.listener, TYPE_URL.typedExtensionConfig, TYPE_URL.routeConfiguration];
/** Types a client may subscribe to as a whole (wildcard), in state-of-the-world and delta xDS alike. */
export const WILDCARD_TYPES = new Set<string>([TYPE_URL.cluster, TYPE_URL.listener]);
