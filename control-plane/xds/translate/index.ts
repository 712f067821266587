import { GatewayIR } from '../../ir/gateway-ir';
import { TypedJson } from '../protobuf/proto-json';
import { SigningKeys, jwtAuthnConfig } from './auth';
import { CallLaneCatalog } from './call-lane';
import { buildClusters } from './clusters';
import { buildEgressListener, buildListener } from './listener';
import { buildEgressRouteConfiguration, buildRouteConfiguration } from './route-configuration';
import { localQuotaConfigs } from './quotas';
import { buildSecrets } from './secrets';
import { GatewaySettings } from './settings';
import { collectorCluster } from './tracing';
import { TYPE_URL } from './type-urls';

/** The Envoy resources for one IR, by xDS type URL, in proto3 JSON form (what golden files hold). */
export type XdsResources = Record<string, TypedJson[]>;

/**
 * The registry (IR) makes listener, routes, clusters and jwt_authn's configuration (ECDS); the catalog
 * adds the call lane's per-backend rules to the routes; the signing keys the control plane fetched
 * decide which routes with auth Envoy can validate (docs/auth.md).
 */
export function translate(ir: GatewayIR, catalog: CallLaneCatalog, settings: GatewaySettings, keys: SigningKeys): XdsResources {
  return {
    [TYPE_URL.cluster]: [...buildClusters(ir, settings), ...(settings.tracing ? [collectorCluster(settings.tracing)] : [])],
    [TYPE_URL.listener]: [buildListener(settings), buildEgressListener(settings)],
    // jwt_authn and the per-instance limits' buckets (ECDS): a change of either never touches the listener.
    [TYPE_URL.typedExtensionConfig]: [jwtAuthnConfig(ir, keys), ...localQuotaConfigs(ir, settings.quotas)],
    [TYPE_URL.routeConfiguration]: [buildRouteConfiguration(ir, catalog, settings, keys), buildEgressRouteConfiguration(ir)],
    [TYPE_URL.secret]: buildSecrets(ir, settings),
  };
}
