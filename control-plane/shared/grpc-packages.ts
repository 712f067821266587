import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ENVOY_PROTO_INCLUDE_DIRS } from '../xds/protobuf/envoy-protos';
import { projectPath } from './paths';



/** Field names as in the .proto files, enums as names: what logs and tests read best. */
const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [projectPath('proto'), ...ENVOY_PROTO_INCLUDE_DIRS],
};

type ServiceConstructor = grpc.ServiceClientConstructor;

function lookupService(file: string, serviceName: string): ServiceConstructor {
  const loaded = grpc.loadPackageDefinition(protoLoader.loadSync(file, LOADER_OPTIONS));
  const service = serviceName.split('.').reduce<unknown>((node, part) => (node as Record<string, unknown>)[part], loaded);
  if (typeof service !== 'function') throw new Error(`gRPC service ${serviceName} not found in ${file}`);
  return service as ServiceConstructor;
}

export const grpcServices = {
  aggregatedDiscovery: () =>
    lookupService('envoy/service/discovery/v3/ads.proto', 'envoy.service.discovery.v3.AggregatedDiscoveryService'),
  catalogDiscovery: () => lookupService('mcpgw/catalog/v1/catalog.proto', 'mcpgw.catalog.v1.CatalogDiscovery'),
};
