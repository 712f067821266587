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

export const toolServiceSchema = z
  .object({
    id: z.string().regex(SERVICE_ID_PATTERN, 'must be 1-63 characters of letters, digits, ".", "_" or "-"').optional(),
    name: z
      .string()
      .max(32, 'must be at most 32 characters')
      .regex(BACKEND_NAME_PATTERN, 'must be snake_case (lowercase letters, digits and single underscores)'),
    url: endpointUrl,
  })
  .strict()
  .transform((service) => ({ ...service, id: service.id ?? service.name }));

export const routeSchema = z
  .object({
    key: z.string().regex(ROUTE_KEY_PATTERN, 'must be 1-63 characters of lowercase letters, digits, "_" or "-"'),
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

export type ToolService = z.output<typeof toolServiceSchema>;
export type Route = z.output<typeof routeSchema>;

export interface Registry {
  routes: Route[];
}
