import * as path from 'node:path';
import { ManagedProcess, portAccepts, waitFor } from '../../control-plane/devstack/processes';

const EVERYTHING_MAIN = path.join(path.dirname(require.resolve('@modelcontextprotocol/server-everything/package.json')), 'dist', 'index.js');

/**
 * @modelcontextprotocol/server-everything in streamableHttp mode: a real stateful MCP server (one
 * session per initialize, per-session state). Its log names every session it opens and ends.
 */
export async function startEverythingServer(port: number, logFile: string): Promise<ManagedProcess> {
  const server = new ManagedProcess({
    name: `everything-${port}`,
    command: process.execPath,
    args: [EVERYTHING_MAIN, 'streamableHttp'],
    env: { PORT: String(port) },
    logFile,
  });
  await waitFor(`server-everything on port ${port}`, () => portAccepts(port));
  return server;
}
