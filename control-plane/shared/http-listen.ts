import * as http from 'node:http';

/** An HTTP server for this request handler (an express app), listening once the promise resolves. */
export function listen(handler: http.RequestListener, host: string, port: number): Promise<http.Server> {
  return new Promise((resolve, reject) => {
    const server = http.createServer(handler);
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}
