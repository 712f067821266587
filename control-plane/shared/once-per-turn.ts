/**
 * Wraps `run` so that every call made in one turn of the event loop shares one run, started once that
 * turn's synchronous work is done (a microtask): callers that each change some state and ask for the
 * result get one run that sees all their changes. A call after the run has started asks for a new run.
 */
export function oncePerTurn<T>(run: () => Promise<T>): () => Promise<T> {
  let pending: Promise<T> | undefined;
  return () => {
    pending ??= Promise.resolve().then(() => {
      pending = undefined;
      return run();
    });
    return pending;
  };
}
