import { JsonWebKey, createPublicKey, verify } from 'node:crypto';
import { z } from 'zod';

/** A JWT's claims, read without checking anything (for asserting on tokens a test already trusts). */
export function decodeJwt(token: string): Record<string, unknown> {
  const payload = token.split('.')[1];
  if (payload === undefined) throw new Error('not a JWT: no payload part');
  return z.record(z.string(), z.unknown()).parse(JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')));
}

const JwtHeader = z.object({ alg: z.literal('RS256'), kid: z.string() });
const Jwks = z.object({ keys: z.array(z.looseObject({ kid: z.string().optional(), use: z.string().optional() })) });

/**
 * Checks an RS256 JWT's signature against the issuer's JWKS (fetched now) and returns its claims.
 * Only the signature: expiry, issuer and audience are the caller's to assert.
 */
export async function verifyJwtSignature(token: string, jwksUri: string): Promise<Record<string, unknown>> {
  const [headerPart, payloadPart, signaturePart] = token.split('.');
  if (signaturePart === undefined) throw new Error('not a JWT: fewer than three parts');
  const header = JwtHeader.parse(JSON.parse(Buffer.from(headerPart, 'base64url').toString('utf8')));
  const response = await fetch(jwksUri);
  if (!response.ok) throw new Error(`JWKS ${jwksUri} answered ${response.status}`);
  const jwk = Jwks.parse(await response.json()).keys.find((key) => key.kid === header.kid && key.use !== 'enc');
  if (!jwk) throw new Error(`JWKS ${jwksUri} has no signing key ${header.kid}`);
  const key = createPublicKey({ key: jwk as JsonWebKey, format: 'jwk' });
  const signed = Buffer.from(`${headerPart}.${payloadPart}`);
  if (!verify('sha256', signed, key, Buffer.from(signaturePart, 'base64url'))) throw new Error('JWT signature does not verify');
  return decodeJwt(token);
}
