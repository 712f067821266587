import * as fs from 'node:fs';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { ECHO_TOOL } from './backends/bench-tool-service';
import { allocatePort } from './systems/ports';
import { StackOptions } from '../control-plane/devstack/stack';
import { ProcessGroup } from './systems/process-group';
import { startBackendProcess } from './systems/systems';
import { HOST } from './systems/topology';
import { Variant } from './variant-cost';
import { Issuer } from './systems/issuer';

/**
 * The gateway the identity benches measure (bench/auth-cost.ts: latency and CPU; bench/auth-instructions.ts:
 * Envoy's instructions per call): one gateway, one stateless bench backend, and the variants of a
 * tools/call to it — `open` (no auth), `token` (the same token sent to `open`, validated by nothing),
 * `validated` (a route with auth and no rule) and `authed` (jwt_authn and the tool's rule: a required
 * scope and a group).
 */

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
