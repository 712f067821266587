import * as http from 'node:http';
import { generateKeyPairSync, randomUUID, sign } from 'node:crypto';
import { AddressInfo } from 'node:net';
import { closeServer } from '../../control-plane/shared/http-listen';
import { HOST } from './topology';
import { ProcessGroup, claimCpus } from './process-group';

/**
 * The identity provider the benches' gateways trust (bench/auth-setup.ts's variants, and C in the full
 * bench, which validates every agent's token and applies a per-tool rule as users run it).
 */

/** The audience every bench token carries beside the route's own resource URL (a gateway-wide audience, as an IdP's audience mapper gives). */
export const GATEWAY_AUDIENCE = 'mcp-gateway';

/** An OpenID Connect issuer in this process: discovery and JWKS for the control plane, RS256 tokens for the load. */
export async function startIssuer() {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = { ...publicKey.export({ format: 'jwk' }), kid: 'bench-1', alg: 'RS256', use: 'sig' };
  let issuer = '';
  const server = http.createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    if (req.url === '/.well-known/openid-configuration') res.end(JSON.stringify({ issuer, jwks_uri: `${issuer}/jwks` }));
    else if (req.url === '/jwks') res.end(JSON.stringify({ keys: [jwk] }));
    else res.writeHead(404).end('{}');
  });
  await new Promise<void>((resolve) => server.listen(0, HOST, resolve));
  issuer = `http://${HOST}:${(server.address() as AddressInfo).port}`;
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  /** A token shaped like Keycloak's (about 1 KB): the claims jwt_authn parses and the rules read. */
  const token = (audience: string) => {
    const now = Math.floor(Date.now() / 1000);
    const header = b64({ alg: 'RS256', typ: 'JWT', kid: jwk.kid });
    const payload = b64({
      exp: now + 3600, iat: now, jti: randomUUID(), iss: issuer, aud: [audience, GATEWAY_AUDIENCE], sub: randomUUID(), typ: 'Bearer',
      azp: 'agent-cli', sid: randomUUID(), scope: 'openid profile email tools:read tools:call', email_verified: true,
      groups: ['bench', 'engineering'], preferred_username: 'bench-agent', name: 'Bench Agent', email: 'bench-agent@example.com',
      realm_access: { roles: ['tools-read', 'tools-call', 'offline_access', 'uma_authorization'] },
    });
    return `${header}.${payload}.${sign('sha256', Buffer.from(`${header}.${payload}`), privateKey).toString('base64url')}`;
  };
  return { issuer, token, stop: () => closeServer(server) };
}

export type Issuer = Awaited<ReturnType<typeof startIssuer>>;

/**
 * A process group in `logDir` (on the CPU plan) and a local issuer, for a bench whose gateway trusts it:
 * `stopAll` stops both, and so does SIGINT or SIGTERM (then the bench exits 130).
 */
export async function startGroupWithIssuer(logDir: string): Promise<{ group: ProcessGroup; issuer: Issuer; stopAll: () => Promise<void> }> {
  const group = new ProcessGroup(logDir, claimCpus());
  const issuer = await startIssuer();
  const stopAll = async () => {
    await group.stopAll();
    await issuer.stop();
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void stopAll().then(() => process.exit(130)));
  return { group, issuer, stopAll };
}
