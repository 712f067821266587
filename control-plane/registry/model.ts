import { z } from 'zod';

/**
 * The registry model every source (static YAML now, the Portal API later) is validated into.
 * The Portal owns addresses only: routes, the Tool Services mapped to each route, and their endpoints.
 */

export const ROUTE_KEY_PATTERN = /^[a-z0-9][a-z0-9_-]{0,62}$/;
/** Backend names become tool-name prefixes, so they stay inside what every MCP client accepts. */
export const BACKEND_NAME_PATTERN = /^[a-z][a-z0-9]*(_[a-z0-9]+)*$/;
const SERVICE_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

const endpointUrl = z
  .string()
  .url('must be an absolute http:// or https:// URL')
  // zod keeps checking after a failed .url(), so this must not assume the URL parsed.
  .refine((value) => !URL.canParse(value) || /^https?:$/.test(new URL(value).protocol), 'must use http or https');

const DAY_MS = 86_400_000;

/** Optional per-Tool-Service transport settings; defaults in docs/registry.md. */
export const transportSchema = z
  .object({
    connectTimeoutMs: z.number().int().min(1).max(60_000).optional(),
    /** Deadline for the whole response (default 10 minutes); 0 means none. */
    requestTimeoutMs: z.number().int().min(0).max(DAY_MS).optional(),
    /** How long a response stream may stay silent. */
    idleTimeoutMs: z.number().int().min(1).max(DAY_MS).optional(),
    /** An HTTP GET health check on this path instead of the default TCP connect check. */
    healthCheckPath: z.string().regex(/^\/[^\s]*$/, 'must be an absolute path such as /healthz').optional(),
    /**
     * A file (on the control plane's machine) holding the bearer token the control plane sends when it
     * lists this Tool Service's tools. Agents' calls carry the agents' own Authorization.
     */
    catalogBearerTokenFile: z.string().min(1).optional(),
    tls: z
      .object({
        /** PEM bundle to verify the backend with, instead of the system CA bundle. */
        caFile: z.string().min(1).optional(),
        /** Server name for SNI and certificate checks, instead of the URL's host. */
        sni: z.string().min(1).optional(),
      })
      .strict()
      .optional(),
  })
  .strict();

const toolPattern = z
  .string()
  .min(1)
  .max(128)
  .regex(/^\S+$/, 'must be a tool name or a pattern with * (no spaces)');

/** Which of a Tool Service's tools a route serves; a tool outside it is neither listed nor callable (outcome denied). */
export const toolPolicySchema = z
  .object({
    allowTools: z
      .array(toolPattern)
      .min(1)
      .optional()
      .describe('Serve only tools whose own name matches one of these patterns (`*` matches any characters). Default: every tool.'),
    denyTools: z.array(toolPattern).min(1).optional().describe('Never serve tools whose own name matches one of these patterns; wins over allowTools.'),
    readOnly: z.boolean().optional().describe('Serve only tools the Tool Service annotates readOnlyHint: true.'),
  })
  .strict();

export const toolServiceSchema = z
  .object({
    id: z
      .string()
      .regex(SERVICE_ID_PATTERN, 'must be 1-63 characters of letters, digits, ".", "_" or "-"')
      .optional()
      .describe('Stable id (default: name). Names the Envoy cluster; one id has one URL and transport everywhere.'),
    name: z
      .string()
      .max(32, 'must be at most 32 characters')
      .regex(BACKEND_NAME_PATTERN, 'must be snake_case (lowercase letters, digits and single underscores)')
      .describe('Tool prefix inside the route: <name>__<tool>. Unique within the route.'),
    url: endpointUrl.describe('The Tool Service\'s MCP endpoint (Streamable HTTP).'),
    transport: transportSchema.optional().describe('Optional transport settings; defaults in docs/registry.md.'),
    fallback: z
      .object({ text: z.string().min(1).max(4000) })
      .strict()
      .optional()
      .describe('Degraded answer for read-only tools when every attempt to reach the Tool Service failed.'),
    policy: toolPolicySchema.optional().describe("Which of this Tool Service's tools the route serves (docs/registry.md)."),
  })
  .strict()
  .superRefine((service, ctx) => {
    if (service.transport?.tls && URL.canParse(service.url) && new URL(service.url).protocol !== 'https:') {
      ctx.addIssue({ code: 'custom', path: ['transport', 'tls'], message: 'tls settings need an https:// url' });
    }
  })
  .transform((service) => ({ ...service, id: service.id ?? service.name }));

export const routeSchema = z
  .object({
    key: z
      .string()
      .regex(ROUTE_KEY_PATTERN, 'must be 1-63 characters of lowercase letters, digits, "_" or "-"')
      .describe('Route key: agents register /mcp/{key}.'),
    toolServices: z.array(toolServiceSchema).min(1, 'a route needs at least one Tool Service'),
  })
  .strict()
  .superRefine((route, ctx) => {
    const seen = new Set<string>();
    route.toolServices.forEach((service, index) => {
      if (seen.has(service.name)) {
        ctx.addIssue({
          code: 'custom',
          path: ['toolServices', index, 'name'],
          message: `duplicate Tool Service name "${service.name}" in this route`,
        });
      }
      seen.add(service.name);
    });
  });

/** The whole document a source serves (docs/portal-contract.md); its JSON schema is generated from this. */
export const registryDocumentSchema = z
  .object({
    revision: z.string().optional().describe('The source\'s revision of this document; the Portal also sends it as the ETag.'),
    routes: z.array(routeSchema).describe('Every route the source declares. A route absent here is removed from the gateway.'),
  })
  .strict();

export type ToolService = z.output<typeof toolServiceSchema>;
export type Transport = z.output<typeof transportSchema>;
export type ToolPolicy = z.output<typeof toolPolicySchema>;
export type Route = z.output<typeof routeSchema>;

export interface Registry {
  routes: Route[];
}
