import * as http from 'node:http';

/** An HTTP server for this request handler (an express app), listening once the promise resolves. */
export function listen(handler: http.RequestListener, host: string, port: number): Promise<http.Server> {
  return new Promise((resolve, reject) => {
    const server = http.createServer(handler);
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}

/** The same, on a HOST:PORT address as the CLI takes it. */
export function listenAt(handler: http.RequestListener, address: string): Promise<http.Server> {
  const at = address.lastIndexOf(':');
  return listen(handler, address.slice(0, at), Number(address.slice(at + 1)));
}

/** Stops a server now: open connections (keep-alive, long-lived streams) are closed, not waited for. */
export function closeServer(server: http.Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}
