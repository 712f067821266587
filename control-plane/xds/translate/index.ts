import { GatewayIR } from '../../ir/gateway-ir';
import { TypedJson } from '../protobuf/proto-json';
import { buildClusters } from './clusters';
import { buildListener } from './listener';
import { buildRouteConfiguration } from './route-configuration';
import { GatewaySettings } from './settings';
import { TYPE_URL } from './type-urls';

/** The Envoy resources for one IR, by xDS type URL, in proto3 JSON form (what golden files hold). */
export type XdsResources = Record<string, TypedJson[]>;

export function translate(ir: GatewayIR, settings: GatewaySettings): XdsResources {
  return {
    [TYPE_URL.cluster]: buildClusters(ir, settings),
    [TYPE_URL.listener]: [buildListener(settings)],
    [TYPE_URL.routeConfiguration]: [buildRouteConfiguration(ir, settings)],
  };
}
