import { isIPv4, isIPv6 } from 'node:net';

/**
 * Whether an address to bind is loopback-only (127.0.0.0/8, ::1, localhost): reachable from this host
 * alone. Anything else (0.0.0.0, a pod IP, a host name) is reachable from the network, where the
 * gateway's inside must authenticate its callers (docs/adr/0017-closed-inside.md).
 */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  if (bare === 'localhost') return true;
  if (isIPv4(bare)) return bare.startsWith('127.');
  return isIPv6(bare) && (bare === '::1' || /^(0{1,4}:){7}0{0,3}1$/.test(bare));
}
