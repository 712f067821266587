/**
 * What a tool or prompt needs of the client that uses it (docs/catalog.md): some servers offer a tool
 * only to clients that declare sampling, elicitation (form or URL) or roots, since the tool asks the
 * client for them. The catalog learns this per tool (tool-fetcher.ts) and the sidecar lists to each
 * client only what its declared capabilities allow.
 *
 * A tool's needs are alternatives: it is usable when the client declares every capability of any one
 * of them. An alternative is one capability, or several joined by ALL_OF. No alternatives: usable by all.
 */

export const CLIENT_NEEDS = ['sampling', 'roots', 'elicitation.form', 'elicitation.url'] as const;
export type ClientNeed = (typeof CLIENT_NEEDS)[number];

export const ALL_OF = '+';

/** The capabilities a client declares to offer exactly these (MCP 2025-11-25 ClientCapabilities). */
export function capabilitiesFor(needs: readonly ClientNeed[]): Record<string, unknown> {
  const elicitation = {
    ...(needs.includes('elicitation.form') && { form: {} }),
    ...(needs.includes('elicitation.url') && { url: {} }),
  };
  return {
    ...(needs.includes('sampling') && { sampling: {} }),
    ...(needs.includes('roots') && { roots: {} }),
    ...(Object.keys(elicitation).length > 0 && { elicitation }),
  };
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * What a client's declared capabilities offer. An `elicitation` object without `form` or `url` is form
 * elicitation (the spec's rule for clients of 2025-06-18, whose capability had no modes).
 */
export function offeredBy(capabilities: unknown): Set<ClientNeed> {
  const offered = new Set<ClientNeed>();
  if (!isObject(capabilities)) return offered;
  if (isObject(capabilities.sampling)) offered.add('sampling');
  if (isObject(capabilities.roots)) offered.add('roots');
  const elicitation = capabilities.elicitation;
  if (isObject(elicitation)) {
    const modes = ['form', 'url'].filter((mode) => isObject(elicitation[mode]));
    if (modes.length === 0 || modes.includes('form')) offered.add('elicitation.form');
    if (modes.includes('url')) offered.add('elicitation.url');
  }
  return offered;
}

/** Whether a client offering `offered` can use something needing `needs`. */
export function allows(offered: ReadonlySet<ClientNeed>, needs: readonly string[]): boolean {
  return needs.length === 0 || needs.some((alternative) => alternative.split(ALL_OF).every((need) => offered.has(need as ClientNeed)));
}
