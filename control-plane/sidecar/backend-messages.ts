import { exposeResourceUri } from '../catalog/resource-naming';
import { JsonObject, isObject } from './json-rpc';
import { BackendView, ListKind } from './route-catalog';

/**
 * What becomes of a message a backend sends outside any request of the client's (on its standalone
 * stream, or on a subscriptions/listen stream; docs/adr/0015-federated-resources-and-prompts.md):
 * - a log message reaches the client with its backend named as its logger (`<backend>`, or
 *   `<backend>/<its own logger>`), a resource update under the URI the client knows it by;
 * - a list change is not passed on as it is: the gateway's lists are the catalog's, so the control
 *   plane lists that backend again, and clients hear of the change when what they are served changes;
 * - a request (sampling, elicitation, roots) reaches the client under the id `mcpgw:<backend>:<id>`,
 *   by which the client's answer is routed back, as in a call's stream;
 * - a response (to nothing the gateway asked on that stream) is dropped.
 */
export type RelayedMessage = { kind: 'deliver'; message: JsonObject } | { kind: 'list-changed'; list: ListKind } | { kind: 'drop' };

const LIST_CHANGED: Record<string, ListKind> = {
  'notifications/tools/list_changed': 'tools',
  'notifications/prompts/list_changed': 'prompts',
  'notifications/resources/list_changed': 'resources',
};

/** The id the gateway gives a backend's request to its client (the call script gives requests in a call's stream the same). */
export const scopedRequestId = (backend: string, id: string | number) => `mcpgw:${backend}:${JSON.stringify(id)}`;

export function relayBackendMessage(message: unknown, backend: BackendView): RelayedMessage {
  if (!isObject(message) || typeof message.method !== 'string') return { kind: 'drop' };
  const { method } = message;
  if (message.id !== undefined) {
    return typeof message.id === 'string' || typeof message.id === 'number' ? { kind: 'deliver', message: { ...message, id: scopedRequestId(backend.name, message.id) } } : { kind: 'drop' };
  }
  const list = LIST_CHANGED[method];
  if (list) return { kind: 'list-changed', list };
  const params = isObject(message.params) ? message.params : {};
  if (method === 'notifications/message') {
    const logger = typeof params.logger === 'string' ? `${backend.name}/${params.logger}` : backend.name;
    return { kind: 'deliver', message: { ...message, params: { ...params, logger } } };
  }
  if (method === 'notifications/resources/updated') {
    const uri = typeof params.uri === 'string' ? exposeResourceUri(backend.name, params.uri) : undefined;
    return uri === undefined ? { kind: 'drop' } : { kind: 'deliver', message: { ...message, params: { ...params, uri } } };
  }
  return { kind: 'deliver', message };
}

/** A content block's resource URI (an embedded resource's, or a resource link's) under its exposed name. */
function exposeBlockUri(block: unknown, backend: string): unknown {
  if (!isObject(block)) return block;
  const named = (uri: unknown) => (typeof uri === 'string' ? (exposeResourceUri(backend, uri) ?? uri) : uri);
  if (block.type === 'resource_link') return { ...block, uri: named(block.uri) };
  if (block.type === 'resource' && isObject(block.resource)) return { ...block, resource: { ...block.resource, uri: named(block.resource.uri) } };
  return block;
}

/**
 * A result a backend sent, with the resource URIs it holds named for the gateway, as the call script
 * names them in answers it carries: a call's content, a read's contents, a prompt's messages. For
 * streams the sidecar relays itself (a resumed stream, docs/adr/0018-stream-relaying.md).
 */
export function exposeResultUris(result: JsonObject, backend: string): JsonObject {
  const exposed = { ...result };
  if (Array.isArray(result.content)) exposed.content = result.content.map((block) => exposeBlockUri(block, backend));
  if (Array.isArray(result.contents)) {
    exposed.contents = result.contents.map((item) => (isObject(item) && typeof item.uri === 'string' ? { ...item, uri: exposeResourceUri(backend, item.uri) ?? item.uri } : item));
  }
  if (Array.isArray(result.messages)) {
    exposed.messages = result.messages.map((message) => (isObject(message) ? { ...message, content: exposeBlockUri(message.content, backend) } : message));
  }
  return exposed;
}

/** One message as an SSE event for a client: no event id, since the gateway keeps no events to replay. */
export const sseEvent = (message: unknown) => `event: message\ndata: ${JSON.stringify(message)}\n\n`;
