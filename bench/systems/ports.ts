import { freePort } from '../../control-plane/devstack/processes';
import { StackPorts } from '../../control-plane/devstack/stack';

const handedOut = new Set<number>();

/**
 * A free loopback port that this run has not handed out before. The kernel may return a port it
 * just gave (and that was closed again, unused until its process starts), so a bench that takes
 * dozens of ports up front must skip repeats itself.
 */
export async function allocatePort(): Promise<number> {
  for (;;) {
    const port = await freePort();
    if (!handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
}

/** Every port of a gateway stack, from the same allocator, so none collides with a backend's. */
export async function allocateStackPorts(): Promise<StackPorts> {
  const names: (keyof StackPorts)[] = ['listener', 'egress', 'envoyAdmin', 'grpc', 'controlPlaneAdmin', 'sidecar', 'redis', 'portal'];
  const ports = {} as StackPorts;
  for (const name of names) ports[name] = await allocatePort();
  return ports;
}
