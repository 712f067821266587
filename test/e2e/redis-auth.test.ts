import * as fs from 'node:fs';
import * as net from 'node:net';
import * as tls from 'node:tls';
import Redis from 'ioredis';
import { GatewayStack } from '../../control-plane/devstack/stack';
import { redisKeyspace } from '../../control-plane/shared/redis-keys';
import { newSessionId } from '../../control-plane/sidecar/sessions/session-store';
import { MCP_POST_HEADERS, listedTools, postJsonRpc, startGateway } from '../support/gateway-fixture';

/** Sends inline commands on one new connection; each reply's first line. */
function rawCommands(port: number, commands: string[]): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    socket.on('data', (chunk) => {
      received += chunk.toString();
      const lines = received.split('\r\n').filter(Boolean);
      if (lines.length >= commands.length) {
        socket.destroy();
        resolve(lines.slice(0, commands.length));
      }
    });
    socket.on('error', reject);
    socket.write(commands.map((command) => `${command}\r\n`).join(''));
  });
}

/** Everything a server sends back to `bytes` on a plain TCP connection, until it closes it (or 3 s pass). */
function plainExchange(port: number, bytes: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(received);
    };
    const timer = setTimeout(done, 3000);
    socket.on('data', (chunk) => (received += chunk.toString('latin1')));
    socket.on('close', done);
    socket.on('error', done);
    socket.write(bytes);
  });
}

/** One inline command over TLS (the server's certificate checked against `ca`): the reply's first line. */
function tlsCommand(port: number, ca: Buffer, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ port, host: '127.0.0.1', ca }, () => socket.write(`${command}\r\n`));
    socket.on('data', (chunk) => {
      socket.destroy();
      resolve(chunk.toString().split('\r\n')[0]);
    });
    socket.on('error', reject);
  });
}

/**
 * The Redis the gateway starts (docs/adr/0017-closed-inside.md): an ACL user with a generated password
 * and nothing for anyone else, and keys under a schema version that no other version reads.
 */
describe("the gateway's Redis", () => {
  let stack: GatewayStack;
  let redis: Redis;

  beforeAll(async () => {
    ({ stack } = await startGateway('redis-auth', (b) => ({ routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }] }] })));
    redis = stack.redisClient();
  });
  afterAll(async () => {
    redis?.disconnect();
    await stack?.stop();
  });

  it('refuses unauthenticated commands, a wrong password, and the gateway user anything outside its keys', async () => {
    // Plain Redis protocol (inline commands) on a fresh connection: what anyone who reaches the port can send.
    expect(await rawCommands(stack.ports.redis, ['PING', 'GET mcpgw:v1:routes', 'FLUSHALL'])).toEqual([
      expect.stringMatching(/^-NOAUTH/),
      expect.stringMatching(/^-NOAUTH/),
      expect.stringMatching(/^-NOAUTH/),
    ]);
    expect(await rawCommands(stack.ports.redis, ['AUTH mcpgw not-the-password', 'AUTH default ""'])).toEqual([
      expect.stringMatching(/^-WRONGPASS/),
      expect.stringMatching(/^-WRONGPASS/),
    ]);
    await expect(redis.set('elsewhere:key', '1')).rejects.toThrow(/NOPERM/);
    await expect(redis.flushall()).rejects.toThrow(/NOPERM/);
    await expect(redis.config('GET', 'requirepass')).rejects.toThrow(/NOPERM/);
    // Positive control: the gateway's own processes work as that user (sessions, last-good catalogs).
    expect(await listedTools(stack.gatewayUrl('demo'))).toHaveLength(2);
    expect(await redis.exists(`${redisKeyspace('mcpgw:')}route:demo`)).toBe(1);
  });

  it("does not read a session written under another schema version's keys as its own", async () => {
    const initialize = await postJsonRpc(stack.gatewayUrl('demo'), {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'schema-test', version: '1' } },
    });
    const sessionId = initialize.headers.get('mcp-session-id')!;
    const stored = await redis.hgetall(`mcpgw:v1:session:${sessionId}`);
    expect(stored.route).toBe('demo');
    const toolsList = (id: string) =>
      postJsonRpc(stack.gatewayUrl('demo'), { jsonrpc: '2.0', id: 2, method: 'tools/list' }, { ...MCP_POST_HEADERS, 'mcp-session-id': id, 'mcp-protocol-version': '2025-11-25' });

    // The same session, as a release with another layout would have written it.
    const copies = { previousLayout: 'mcpgw:session:', nextVersion: 'mcpgw:v2:session:', thisVersion: 'mcpgw:v1:session:' };
    const ids: Record<string, string> = {};
    for (const [name, keyPrefix] of Object.entries(copies)) {
      ids[name] = newSessionId();
      await redis.hset(`${keyPrefix}${ids[name]}`, stored);
      await redis.expire(`${keyPrefix}${ids[name]}`, 60);
    }
    for (const name of ['previousLayout', 'nextVersion']) {
      const answer = await toolsList(ids[name]);
      expect(answer.status).toBe(404);
      expect(answer.json().error.code).toBe(-32001);
    }
    // Positive control: under this version's key the copy is a session like any other.
    const own = await toolsList(ids.thisVersion);
    expect(own.status).toBe(200);
    expect(own.text).toContain('weather__get_forecast');
  });
});

describe("the gateway's Redis over TLS (redisTls)", () => {
  let stack: GatewayStack;
  let redis: Redis;

  beforeAll(async () => {
    ({ stack } = await startGateway('redis-tls', (b) => ({ routes: [{ key: 'demo', toolServices: [{ name: 'weather', url: b.weather }] }] }), { redisTls: true }));
    redis = stack.redisClient();
  });
  afterAll(async () => {
    redis?.disconnect();
    await stack?.stop();
  });

  it('speaks only TLS, still asks for the password, and serves the gateway through rediss:// and --redis-ca', async () => {
    expect(stack.redisUrl).toMatch(/^rediss:\/\/mcpgw@127\.0\.0\.1:/);
    // Plain Redis protocol gets no Redis answer at all: the connection is closed after a failed handshake.
    expect(await plainExchange(stack.ports.redis, 'PING\r\n')).not.toMatch(/PONG|NOAUTH|ERR/);
    const controlPlaneArgs = stack.controlPlaneArgs();
    const ca = fs.readFileSync(controlPlaneArgs[controlPlaneArgs.indexOf('--redis-ca') + 1]);
    expect(await tlsCommand(stack.ports.redis, ca, 'PING')).toMatch(/^-NOAUTH/);
    // A client that does not trust the stack's CA does not get as far as a command.
    await expect(tlsCommand(stack.ports.redis, Buffer.from(tls.rootCertificates.join('\n')), 'PING')).rejects.toThrow(/self[- ]signed|unable to verify|certificate/i);
    // Positive control: the control plane and the sidecar work over it (catalogs, sessions).
    expect(await listedTools(stack.gatewayUrl('demo'))).toHaveLength(2);
    expect(await redis.exists(`${redisKeyspace('mcpgw:')}route:demo`)).toBe(1);
  });
});
