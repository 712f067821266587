import { createHash } from 'node:crypto';

/**
 * The arguments of a tools/call, identified without their values: SHA-256 (hex) of their canonical
 * JSON, the JSON Canonicalization Scheme of RFC 8785 — members sorted by their names' UTF-16 code
 * units, no whitespace, numbers and strings as ECMAScript's JSON.stringify writes them (which is what
 * RFC 8785 prescribes for values JSON.parse made). The audit (this folder) and the approval binding
 * (control-plane/approval/) hash the same way, so an approval and the audit event of the call it let
 * through name the same hash.
 */

export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    const text = JSON.stringify(value);
    if (text === undefined) throw new TypeError(`${typeof value} has no JSON form`);
    return text;
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const members = Object.keys(value)
    .sort()
    .map((name) => `${JSON.stringify(name)}:${canonicalJson((value as Record<string, unknown>)[name])}`);
  return `{${members.join(',')}}`;
}

/** The hash of a call's arguments, parsed. */
export const argumentsSha256 = (value: unknown) => createHash('sha256').update(canonicalJson(value)).digest('hex');

/** The hash of a call's arguments, from their raw JSON text (absent arguments are `{}`); undefined when it is not JSON. */
export function argumentsHash(rawArguments: string | undefined): string | undefined {
  let parsed: unknown;
  try {
    parsed = rawArguments === undefined ? {} : JSON.parse(rawArguments);
  } catch {
    return undefined;
  }
  return argumentsSha256(parsed);
}
