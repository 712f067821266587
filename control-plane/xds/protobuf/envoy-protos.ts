import * as path from 'node:path';
import * as fs from 'node:fs';
import * as protobuf from 'protobufjs';

/**
 * Envoy's v3 API protos as shipped by @grpc/grpc-js-xds (deps/). They describe Envoy ~1.31; newer
 * fields or extensions can travel as xds.type.v3.TypedStruct, which Envoy accepts in any typed_config.
 */
const XDS_DEPS = path.join(path.dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
export const ENVOY_PROTO_INCLUDE_DIRS = ['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((dir) =>
  path.join(XDS_DEPS, dir),
);
/** protobufjs ships google/protobuf/descriptor.proto, which Envoy's annotations import. */
const PROTOBUFJS_DIR = path.dirname(require.resolve('protobufjs/package.json'));

/** Every message type the translator may put into an Any, by proto file. */
const RESOURCE_PROTO_FILES = [
  'envoy/config/listener/v3/listener.proto',
  'envoy/config/route/v3/route.proto',
  'envoy/config/cluster/v3/cluster.proto',
  'envoy/config/endpoint/v3/endpoint.proto',
  'envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto',
  'envoy/extensions/filters/http/ext_authz/v3/ext_authz.proto',
  'envoy/extensions/filters/http/router/v3/router.proto',
  'envoy/extensions/filters/http/jwt_authn/v3/config.proto',
  'envoy/extensions/filters/http/cors/v3/cors.proto',
  'envoy/extensions/filters/http/rbac/v3/rbac.proto',
  'envoy/extensions/access_loggers/filters/cel/v3/cel.proto',
  'envoy/config/core/v3/extension.proto',
  'envoy/extensions/upstreams/http/v3/http_protocol_options.proto',
  'envoy/extensions/filters/http/credential_injector/v3/credential_injector.proto',
  'envoy/extensions/filters/http/upstream_codec/v3/upstream_codec.proto',
  'envoy/extensions/transport_sockets/tls/v3/tls.proto',
  'envoy/extensions/access_loggers/stream/v3/stream.proto',
  'envoy/extensions/access_loggers/fluentd/v3/fluentd.proto',
  'envoy/config/trace/v3/opentelemetry.proto',
  'envoy/extensions/filters/http/header_mutation/v3/header_mutation.proto',
  'envoy/extensions/common/matching/v3/extension_matcher.proto',
  'envoy/type/matcher/v3/http_inputs.proto',
  'envoy/extensions/filters/common/matcher/action/v3/skip_action.proto',
  'envoy/extensions/filters/http/lua/v3/lua.proto',
  'envoy/extensions/retry/host/previous_hosts/v3/previous_hosts.proto',
  'xds/type/v3/typed_struct.proto',
];

/** Where an import of Envoy's protos is found. */
function resolveInIncludeDirs(_origin: string, target: string): string {
  for (const dir of [...ENVOY_PROTO_INCLUDE_DIRS, PROTOBUFJS_DIR]) {
    const candidate = path.join(dir, target);
    if (fs.existsSync(candidate)) return candidate;
  }
  // protobufjs carries google/protobuf/*.proto itself and resolves the bare name.
  return target;
}

/**
 * Fields of Envoy 1.40 the shipped protos lack, declared here with Envoy's own numbers so that they
 * encode as typed config: CustomTag.value, a span attribute from a substitution format string (a
 * member of its `type` oneof), which the tracing settings use to bound client-chosen values; and
 * LuaPerRoute.filter_context, the call script's per-route context. The latter is on each of thousands
 * of routes: as a TypedStruct, Envoy converts every one through JSON when it loads the route table.
 */
function addNewerFields(root: protobuf.Root): void {
  const customTag = root.lookupType('envoy.type.tracing.v3.CustomTag');
  const value = new protobuf.Field('value', 6, 'string');
  customTag.add(value);
  customTag.oneofs.type.add(value);
  root.lookupType('envoy.extensions.filters.http.lua.v3.LuaPerRoute').add(new protobuf.Field('filter_context', 4, 'google.protobuf.Struct'));
}

let cachedRoot: protobuf.Root | undefined;

/** The protobufjs root with every Envoy type the translator uses, field names kept as in the .proto. */
export function envoyProtoRoot(): protobuf.Root {
  if (!cachedRoot) {
    const root = new protobuf.Root();
    root.resolvePath = resolveInIncludeDirs;
    root.loadSync(RESOURCE_PROTO_FILES, { keepCase: true });
    addNewerFields(root);
    root.resolveAll();
    cachedRoot = root;
  }
  return cachedRoot;
}
