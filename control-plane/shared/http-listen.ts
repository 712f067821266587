import * as http from 'node:http';
import * as https from 'node:https';

/**
 * An HTTP server for this request handler (an express app), listening once the promise resolves;
 * HTTPS with `tls` (https.createServer's options).
 */
export function listen(handler: http.RequestListener, host: string, port: number, tls?: https.ServerOptions): Promise<http.Server> {
  return new Promise((resolve, reject) => {
    const server = tls ? https.createServer(tls, handler) : http.createServer(handler);
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}

/** The same, on a HOST:PORT address as the CLI takes it. */
export function listenAt(handler: http.RequestListener, address: string, tls?: https.ServerOptions): Promise<http.Server> {
  const { host, port } = splitAddress(address);
  return listen(handler, host, port, tls);
}

/** HOST:PORT as the CLI takes it, split. */
export function splitAddress(address: string): { host: string; port: number } {
  const at = address.lastIndexOf(':');
  return { host: address.slice(0, at), port: Number(address.slice(at + 1)) };
}

/** Stops a server now: open connections (keep-alive, long-lived streams) are closed, not waited for. */
export function closeServer(server: http.Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}
