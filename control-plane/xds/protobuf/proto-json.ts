import * as protobuf from 'protobufjs';
import { envoyProtoRoot } from './envoy-protos';

/** A google.protobuf.Any as it goes on the wire inside a DiscoveryResponse. */
export interface PackedAny {
  type_url: string;
  value: Buffer;
}

/** A resource written in proto3 JSON form, as Envoy's YAML docs show it, with its "@type". */
export type TypedJson = { '@type': string } & Record<string, unknown>;

const WRAPPER_TYPES = new Set(
  ['Bool', 'UInt32', 'Int32', 'UInt64', 'Int64', 'Double', 'Float', 'String', 'Bytes'].map(
    (kind) => `.google.protobuf.${kind}Value`,
  ),
);

/**
 * Encodes proto3 JSON (snake_case field names, "5s" durations, "@type" Anys, bare wrapper values,
 * JSON Structs) into a packed Any. protobufjs' own fromObject does not speak proto3 JSON and silently
 * drops unknown keys, so this walks the schema first and rejects anything the type does not declare.
 */
export function packAny(json: TypedJson, root: protobuf.Root = envoyProtoRoot()): PackedAny {
  const typeUrl = json['@type'];
  const type = typeOfUrl(root, typeUrl);
  const message = type.fromObject(normalizeMessage(type, json, type.name, root));
  const bytes = type.encode(message).finish();
  // protobufjs' writer in Node already hands out a Buffer: copying it again was a tenth of encoding a route table.
  return { type_url: typeUrl, value: Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes) };
}

/**
 * Lookups that protobufjs repeats at every call, kept per root: thousands of routes each hold several
 * Anys, and each message's fullName is a getter that joins its parents' names anew every time.
 */
const typesByUrl = new WeakMap<protobuf.Root, Map<string, protobuf.Type>>();
const fullNames = new WeakMap<protobuf.ReflectionObject, string>();

function typeOfUrl(root: protobuf.Root, typeUrl: string): protobuf.Type {
  let types = typesByUrl.get(root);
  if (!types) typesByUrl.set(root, (types = new Map()));
  let type = types.get(typeUrl);
  if (!type) types.set(typeUrl, (type = root.lookupType(typeUrl.slice(typeUrl.lastIndexOf('/') + 1))));
  return type;
}

function fullNameOf(object: protobuf.ReflectionObject): string {
  let name = fullNames.get(object);
  if (name === undefined) fullNames.set(object, (name = object.fullName));
  return name;
}

function normalizeMessage(
  type: protobuf.Type,
  json: unknown,
  where: string,
  root: protobuf.Root,
): Record<string, unknown> {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new Error(`${where}: expected an object for ${type.fullName}`);
  }
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(json)) {
    if (key === '@type') continue;
    const field = type.fields[key];
    if (!field) throw new Error(`${where}: ${type.fullName} has no field "${key}"`);
    field.resolve();
    const at = `${where}.${key}`;
    if (field.map) {
      out[key] = Object.fromEntries(
        Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, normalizeValue(field, v, `${at}[${k}]`, root)]),
      );
    } else if (field.repeated) {
      if (!Array.isArray(value)) throw new Error(`${at}: expected a list`);
      out[key] = value.map((item, index) => normalizeValue(field, item, `${at}[${index}]`, root));
    } else {
      out[key] = normalizeValue(field, value, at, root);
    }
  }
  return out;
}

function normalizeValue(field: protobuf.Field, value: unknown, where: string, root: protobuf.Root): unknown {
  const resolved = field.resolvedType;
  if (resolved instanceof protobuf.Enum) {
    if (typeof value === 'string' && !(value in resolved.values)) {
      throw new Error(`${where}: "${value}" is not a value of ${resolved.fullName}`);
    }
    return value;
  }
  if (!(resolved instanceof protobuf.Type)) return value;
  const fullName = fullNameOf(resolved);
  if (fullName === '.google.protobuf.Duration') return parseDuration(value, where);
  if (fullName === '.google.protobuf.Any') return packAny(value as TypedJson, root);
  if (fullName === '.google.protobuf.Struct') return structFromJson(value, where);
  if (fullName === '.google.protobuf.Value') return valueFromJson(value);
  if (WRAPPER_TYPES.has(fullName)) return { value };
  return normalizeMessage(resolved, value, where, root);
}

function parseDuration(value: unknown, where: string): { seconds: number; nanos: number } {
  const match = typeof value === 'string' ? /^(\d+)(?:\.(\d{1,9}))?s$/.exec(value) : null;
  if (!match) throw new Error(`${where}: expected a duration such as "1.5s", got ${JSON.stringify(value)}`);
  return { seconds: Number(match[1]), nanos: Number((match[2] ?? '').padEnd(9, '0')) };
}

/** A JSON object as a google.protobuf.Struct message object (for protobufjs and @grpc/proto-loader). */
export function toStruct(value: Record<string, unknown>): { fields: Record<string, unknown> } {
  return structFromJson(value, 'struct');
}

function structFromJson(value: unknown, where: string): { fields: Record<string, unknown> } {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new Error(`${where}: expected a JSON object for google.protobuf.Struct`);
  }
  return { fields: Object.fromEntries(Object.entries(value).map(([k, v]) => [k, valueFromJson(v)])) };
}

// protobufjs bundles google/protobuf/struct.proto with camelCase field names, whatever keepCase says.
function valueFromJson(value: unknown): Record<string, unknown> {
  if (value === null) return { nullValue: 'NULL_VALUE' };
  if (typeof value === 'number') return { numberValue: value };
  if (typeof value === 'string') return { stringValue: value };
  if (typeof value === 'boolean') return { boolValue: value };
  if (Array.isArray(value)) return { listValue: { values: value.map(valueFromJson) } };
  return { structValue: structFromJson(value, 'struct') };
}
