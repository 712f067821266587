import * as grpc from '@grpc/grpc-js';
import { toStruct } from '../xds/protobuf/proto-json';
import { BACKEND_CLUSTER_HEADER, METADATA_NAMESPACE } from '../xds/translate/settings';
import { Decision, GatewayContext, RequestHead, RequestMetadata, decideOnBody, decideOnHead } from './mcp-gateway';

interface HeaderValue {
  key: string;
  value?: string;
  raw_value?: Buffer;
}

interface ProcessingRequest {
  request_headers?: { headers?: { headers: HeaderValue[] }; end_of_stream: boolean } | null;
  request_body?: { body: Buffer; end_of_stream: boolean } | null;
}

type ProcessingResponse = Record<string, unknown>;

function headerOption(key: string, value: string) {
  return { header: { key, raw_value: Buffer.from(value) }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' };
}

function readHead(headers: HeaderValue[]): RequestHead {
  const map = new Map<string, string>();
  for (const header of headers) {
    map.set(header.key.toLowerCase(), header.raw_value?.length ? header.raw_value.toString('utf8') : (header.value ?? ''));
  }
  return { method: map.get(':method') ?? '', path: map.get(':path') ?? '', headers: map };
}

/**
 * Headers only the gateway may set: its own steering header and Envoy's per-request controls
 * (timeouts, retries). A client's copies are dropped before anything else happens.
 */
const isGatewayOwnedHeader = (name: string) => name.startsWith('x-mcpgw-') || name.startsWith('x-envoy-');

function dynamicMetadata(metadata: RequestMetadata | undefined) {
  return metadata ? { dynamic_metadata: toStruct({ [METADATA_NAMESPACE]: metadata }) } : {};
}

/** Spells a Decision in ext_proc terms for the phase it was taken in. */
function toProcessingResponse(decision: Decision, phase: 'request_headers' | 'request_body', head: RequestHead): ProcessingResponse {
  switch (decision.kind) {
    case 'respond':
      return {
        immediate_response: {
          status: { code: decision.status },
          headers: { set_headers: Object.entries(decision.headers).map(([key, value]) => headerOption(key, value)) },
          body: Buffer.from(decision.body),
          details: `mcpgw_${decision.reason}`,
        },
        ...dynamicMetadata(decision.metadata),
      };
    case 'read-body':
      return { [phase]: { response: { header_mutation: { remove_headers: [...head.headers.keys()].filter(isGatewayOwnedHeader) } } } };
    case 'forward': {
      const body = Buffer.from(decision.body);
      const headers = { ...decision.headers, [BACKEND_CLUSTER_HEADER]: decision.cluster, 'content-length': String(body.length) };
      return {
        [phase]: {
          response: {
            status: 'CONTINUE',
            header_mutation: {
              set_headers: Object.entries(headers).map(([key, value]) => headerOption(key, value)),
              remove_headers: decision.removeHeaders,
            },
            body_mutation: { body },
            clear_route_cache: true,
          },
        },
        ...dynamicMetadata(decision.metadata),
      };
    }
  }
}

/**
 * envoy.service.ext_proc.v3.ExternalProcessor: one bidirectional stream per HTTP request. Envoy sends
 * the headers, then (BUFFERED) the whole body; each gets exactly one response.
 */
export function extProcServiceHandlers(context: GatewayContext): grpc.UntypedServiceImplementation {
  return {
    Process(call: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>) {
      let head: RequestHead | undefined;
      // Envoy sends the body only after it has the answer to the headers, so the two never overlap.
      call.on('data', async (request: ProcessingRequest) => {
        try {
          if (request.request_headers) {
            head = readHead(request.request_headers.headers?.headers ?? []);
            let decision = await decideOnHead(head, context);
            if (decision.kind === 'read-body' && request.request_headers.end_of_stream) {
              decision = await decideOnBody(head, Buffer.alloc(0), context);
            }
            call.write(toProcessingResponse(decision, 'request_headers', head));
          } else if (request.request_body && head) {
            call.write(toProcessingResponse(await decideOnBody(head, request.request_body.body, context), 'request_body', head));
          }
        } catch (error) {
          // Envoy turns this into its JSON-RPC "gateway error" reply (fail closed).
          context.log.error('ext_proc request failed', { error: (error as Error).stack, path: head?.path });
          call.emit('error', { code: grpc.status.INTERNAL, details: (error as Error).message });
        }
      });
      call.on('end', () => call.end());
      call.on('error', () => undefined);
    },
  };
}
