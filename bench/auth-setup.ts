import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import { generateKeyPairSync, randomUUID, sign } from 'node:crypto';
import { AddressInfo } from 'node:net';
import { stringify } from 'yaml';
import { closeServer } from '../control-plane/shared/http-listen';
import { ECHO_TOOL } from './backends/bench-tool-service';
import { allocatePort } from './systems/ports';
import { StackOptions } from '../control-plane/devstack/stack';
import { ProcessGroup } from './systems/process-group';
import { startBackendProcess } from './systems/systems';
import { HOST } from './systems/topology';
import { Variant } from './variant-cost';

/**
 * The gateway the identity benches measure (bench/auth-cost.ts: latency and CPU; bench/auth-instructions.ts:
 * Envoy's instructions per call): one gateway, one stateless bench backend, and the variants of a
 * tools/call to it — `open` (no auth), `token` (the same token sent to `open`, validated by nothing),
 * `validated` (a route with auth and no rule) and `authed` (jwt_authn and the tool's rule: a required
 * scope and a group).
 */

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
      exp: now + 3600, iat: now, jti: randomUUID(), iss: issuer, aud: [audience, 'mcp-gateway'], sub: randomUUID(), typ: 'Bearer',
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
 * Starts the backend and the gateway in `group` (logs and registry in `logDir`, `envoyStartTimeoutMs`
 * for a slow Envoy): each variant's URL and headers, and the gateway's process ids.
 */
export async function startAuthVariants(group: ProcessGroup, issuer: Issuer, logDir: string, { envoyStartTimeoutMs }: Pick<StackOptions, 'envoyStartTimeoutMs'> = {}) {
  const backendPort = await allocatePort();
  await startBackendProcess(group, 'backend', [{ port: backendPort, fillerTools: 0, listDelayMs: 0, prompts: 0, resources: 0 }]);
  const backend = { name: 'bench', url: `http://${HOST}:${backendPort}/mcp` };
  const registryFile = path.join(logDir, 'registry.yaml');
  fs.writeFileSync(
    registryFile,
    stringify({
      routes: [
        { key: 'open', toolServices: [backend] },
        {
          key: 'authed',
          auth: { issuer: issuer.issuer },
          toolServices: [{ ...backend, policy: { rules: [{ tools: [ECHO_TOOL], requiredScopes: ['tools:call'], allowGroups: ['bench'] }] } }],
        },
        { key: 'validated', auth: { issuer: issuer.issuer }, toolServices: [backend] },
      ],
    }),
  );
  const stack = await group.startGateway('gateway', { registryFile, logDir, envoyStartTimeoutMs });
  // Each route's token names that route's resource URL as its audience (the default audience).
  const bearer = (route: string) => ({ authorization: `Bearer ${issuer.token(stack.gatewayUrl(route))}` });
  const variants: Variant[] = [
    { name: 'open', url: stack.gatewayUrl('open') },
    { name: 'token', url: stack.gatewayUrl('open'), headers: bearer('open') },
    { name: 'validated', url: stack.gatewayUrl('validated'), headers: bearer('validated') },
    { name: 'authed', url: stack.gatewayUrl('authed'), headers: bearer('authed') },
  ];
  const pids = { envoy: stack.processes.get('envoy')!.child.pid!, sidecar: stack.processes.get('sidecar')!.child.pid! };
  return { variants, pids, stack };
}
