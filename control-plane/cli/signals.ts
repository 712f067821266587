/**
 * Stops on the first SIGINT or SIGTERM and then exits 0; further signals while stopping are ignored
 * (a second Ctrl-C must not cut the orderly stop short). `signalled` tells whether it happened.
 */
export function stopOnSignals(stop: () => Promise<void>): { readonly signalled: boolean } {
  const state = { signalled: false };
  const handler = () => {
    if (state.signalled) return;
    state.signalled = true;
    void stop().then(() => process.exit(0));
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return state;
}
