import { z } from 'zod';

/** A tool's risk (docs/approval-and-audit.md): from its annotations, or a registry rule's override. */
export const RISKS = ['low', 'medium', 'high'] as const;
export type Risk = (typeof RISKS)[number];

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

/** A file Envoy reads and watches (a mounted secret): absolute, since Envoy's working directory is nobody's business. */
const absoluteFile = z.string().regex(/^\//, 'must be an absolute path to a file on the Envoy host (e.g. a mounted secret)');

/** An OAuth scope token (RFC 6749 §3.3). */
const scope = z.string().regex(/^[\x21\x23-\x5B\x5D-\x7E]+$/, 'must be one OAuth scope (printable ASCII, no spaces, quotes or backslashes)');

/**
 * What the gateway authenticates to a Tool Service with (docs/auth.md, Backends). The caller's own token
 * never reaches a backend, except with `passthrough` for a backend that is the token's audience.
 */
export const credentialsSchema = z.discriminatedUnion(
  'mode',
  [
    z.object({ mode: z.literal('none').describe('No Authorization reaches the Tool Service (the default).') }).strict(),
    z
      .object({
        mode: z.literal('serviceAccount').describe("The gateway's own bearer for this Tool Service, from a file; Envoy injects it and follows its rotation."),
        tokenFile: absoluteFile.describe('The bearer token (the whole file, surrounding whitespace ignored): a mounted secret, replaced atomically to rotate.'),
      })
      .strict(),
    z
      .object({
        mode: z.literal('tokenExchange').describe("The caller's token exchanged at the gateway's IdP (RFC 8693) for one whose audience is this Tool Service."),
        audience: z.string().min(1).describe('The audience asked for (RFC 8693 `audience`): the Tool Service as the IdP knows it, e.g. its client id.'),
        resource: endpointUrl.optional().describe('RFC 8693 `resource`, when the IdP wants the Tool Service as a URI.'),
        scopes: z.array(scope).min(1).optional().describe('Scopes asked for in the exchange (`scope`); none by default.'),
      })
      .strict(),
    z
      .object({
        mode: z.literal('passthrough').describe("The caller's own token, unchanged: only for a Tool Service that is the token's audience (checked). Needs the control plane's --allow-token-passthrough."),
        audience: z.string().min(1).describe("The audience the caller's token must carry for this Tool Service; a token without it is refused."),
      })
      .strict(),
  ],
  { error: (issue) => (issue.code === 'invalid_union' ? 'must be one of none, serviceAccount, tokenExchange, passthrough' : undefined) },
);

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
     * A stateless (2026-07-28) client's call in this Tool Service's pooled backend session goes through a
     * sidecar that resumes the call's stream if the backend ends it before the answer (default false:
     * the call goes straight to the backend). Its price is in docs/registry.md.
     */
    resumeCutPooledCalls: z.boolean().optional(),
    tls: z
      .object({
        /** PEM bundle to verify the backend with, instead of the system CA bundle. */
        caFile: z.string().min(1).optional(),
        /** Server name for SNI and certificate checks, instead of the URL's host. */
        sni: z.string().min(1).optional(),
        /** The gateway's client certificate (mTLS), PEM; with clientKeyFile. Rotated by replacing the files (docs/auth.md). */
        clientCertFile: absoluteFile.optional(),
        clientKeyFile: absoluteFile.optional(),
      })
      .strict()
      .superRefine((tls, ctx) => {
        if ((tls.clientCertFile === undefined) !== (tls.clientKeyFile === undefined)) {
          const missing = tls.clientCertFile === undefined ? 'clientCertFile' : 'clientKeyFile';
          ctx.addIssue({ code: 'custom', path: [missing], message: 'a client certificate needs both clientCertFile and clientKeyFile' });
        }
      })
      .optional(),
  })
  .strict();

const toolPattern = z
  .string()
  .min(1)
  .max(128)
  .regex(/^\S+$/, 'must be a tool name or a pattern with * (no spaces)');

/** The windows a rate is counted in (Envoy's and the ratelimit service's units). */
export const RATE_UNITS = ['second', 'minute', 'hour', 'day'] as const;
export type RateUnit = (typeof RATE_UNITS)[number];
/** `REQUESTS/UNIT`, e.g. `100/minute`; at most a billion requests per window. */
export const RATE_PATTERN = /^([1-9][0-9]{0,8})\/(second|minute|hour|day)$/;
const RATE_RULE = 'must be REQUESTS/UNIT with a unit of second, minute, hour or day, e.g. "100/minute"';
const rate = z.string().regex(RATE_PATTERN, RATE_RULE);

/**
 * One rate limit (docs/quotas.md): a rate alone is counted by each Envoy on its own; `shared: true`
 * counts it across every Envoy in the ratelimit service, and `whenServiceDown` says what a call the
 * service cannot answer for gets. `unlimited` switches off a limit a default would set.
 */
export const rateLimitSchema = z.union(
  [
    z.literal('unlimited'),
    rate,
    z
      .object({
        rate: rate.describe('REQUESTS/UNIT, e.g. "100/minute".'),
        shared: z.boolean().optional().describe('Count across every Envoy in the ratelimit service (needs the gateway\'s --ratelimit). Default false: each Envoy counts on its own.'),
        whenServiceDown: z
          .enum(['allow', 'refuse'])
          .optional()
          .describe('A shared limit the ratelimit service cannot answer for: let the call through (allow, the default) or refuse it (503).'),
        exact: z
          .boolean()
          .optional()
          .describe(
            'A shared limit asked of the ratelimit service for every call even where the gateway leases shared limits per Envoy worker (--shared-limit-lease-workers): never refused early, at the cost of a check per call. Default false.',
          ),
      })
      .strict()
      .refine((limit) => limit.shared || limit.whenServiceDown === undefined, { message: 'whenServiceDown is for shared limits (shared: true)', path: ['whenServiceDown'] })
      .refine((limit) => limit.shared || limit.exact === undefined, { message: 'exact is for shared limits (shared: true)', path: ['exact'] }),
  ],
  { error: `must be "unlimited", a rate (${RATE_RULE.replace('must be ', '')}) or {rate, shared, whenServiceDown, exact}` },
);

/** Limits on one kind of request: each caller's own, and all callers' together. */
export const rateLimitsSchema = z
  .object({
    perCaller: rateLimitSchema.optional().describe("Each caller's own limit: the token's subject on a route with auth, the client's address otherwise."),
    total: rateLimitSchema.optional().describe('All callers together.'),
  })
  .strict();

/** Calls in flight at once; a call past the limit is refused (429) at once, never queued. */
const inFlight = z.number().int().min(1).max(100_000);

/**
 * Each caller's tools/call in flight at once, counted across every Envoy (docs/quotas.md, concurrency
 * limits): a slot taken by the session check, given back when Envoy logs the call's end.
 */
const perCallerInFlight = inFlight.describe(
  "Each caller's tools/call in flight at once (the token's subject on a route with auth, the client's address otherwise), counted across every Envoy; past it a call is refused at once (429).",
);

/** A route's (or the document's default) concurrency limits; `unlimited` switches off a default. */
const routeConcurrencySchema = z.object({ perCaller: z.union([z.literal('unlimited'), perCallerInFlight]).optional() }).strict();

/** A route's limits, and the document's defaults of every route's (docs/quotas.md). */
export const routeQuotasSchema = z
  .object({
    calls: rateLimitsSchema.optional().describe('tools/call on the route.'),
    discovery: rateLimitsSchema
      .optional()
      .describe('What the gateway answers itself on the route: initialize, tools/list, ping, notifications (their own, looser limits).'),
    concurrency: routeConcurrencySchema.optional().describe('tools/call in flight at once on the route.'),
  })
  .strict();

/** Limits of a tool, or of every tool a pattern matches (each tool counted on its own). */
export const toolQuotaSchema = z
  .object({
    tools: z.array(toolPattern).min(1).describe("Patterns over the Tool Service's own tool names (`*` matches any characters); the first entry that matches a tool applies."),
    calls: rateLimitsSchema.optional().describe('tools/call of each matching tool.'),
    concurrency: z.object({ perCaller: perCallerInFlight }).strict().optional().describe('tools/call of each matching tool in flight at once.'),
  })
  .strict()
  .refine((tool) => tool.calls !== undefined || tool.concurrency !== undefined, { message: 'needs calls or concurrency (or both)' });

/** A Tool Service's limits, over every route that maps it (docs/quotas.md). */
export const toolServiceQuotasSchema = z
  .object({
    calls: rateLimitsSchema.optional().describe('tools/call to the Tool Service from every route.'),
    concurrency: z
      .object({
        total: inFlight.optional().describe('tools/call in flight to the Tool Service at once, from every route; past it a call is refused at once (429). Default: the gateway setting --tool-service-max-requests (1024), past which calls wait for a connection.'),
        perCaller: perCallerInFlight.optional(),
      })
      .strict()
      .optional(),
    tools: z.array(toolQuotaSchema).min(1).optional().describe('Limits of single tools.'),
  })
  .strict();

/** An OAuth 2.0 scope token (RFC 6749 §3.3): printable ASCII without space, `"` or `\`. */
const scopeToken = z
  .string()
  .regex(/^[\x21\x23-\x5B\x5D-\x7E]{1,128}$/, 'must be an OAuth scope: 1-128 printable ASCII characters, no space, quote or backslash');
/** A claim value a rule compares with (a subject, a group, a client id), as the token carries it. */
const claimValue = z.string().min(1).max(256);

/**
 * Who may call the tools a rule matches (docs/auth.md): every list present is a condition the
 * caller's validated token must meet. A caller outside allowSubjects/allowGroups/allowClients is
 * denied (-32003); a caller missing one of requiredScopes gets the 403 scope challenge.
 */
export const toolRuleSchema = z
  .object({
    tools: z.array(toolPattern).min(1).describe('Patterns over the Tool Service\'s own tool names (`*` matches any characters) this rule is for.'),
    requiredScopes: z.array(scopeToken).min(1).optional().describe('Scopes the token must carry, every one of them (claim `scope` or `scp`).'),
    allowSubjects: z.array(claimValue).min(1).optional().describe('Only tokens whose `sub` is one of these.'),
    allowGroups: z.array(claimValue).min(1).optional().describe('Only tokens carrying one of these groups (the route\'s auth.groupsClaim).'),
    allowClients: z.array(claimValue).min(1).optional().describe('Only tokens issued to one of these clients (`client_id`, else `azp`).'),
    approval: z
      .enum(['required', 'none'])
      .optional()
      .describe('`required`: every call waits for a person\'s approval on the approval page (docs/approval-and-audit.md); `none`: never, whatever the policy\'s approvalAtRisk says.'),
    risk: z.enum(RISKS).optional().describe("The tools' risk, instead of the one their annotations give (docs/approval-and-audit.md)."),
    approvers: claimValue.optional().describe('The group whose members approve calls of these tools. Default: the policy\'s approvers, else the caller themself.'),
  })
  .strict()
  .refine((rule) => rule.requiredScopes || rule.allowSubjects || rule.allowGroups || rule.allowClients || rule.approval || rule.risk || rule.approvers, {
    message: 'a rule needs at least one of requiredScopes, allowSubjects, allowGroups, allowClients, approval, risk, approvers',
  });

/** A claim's place in the token: a top-level claim name, or a path of names into nested objects. */
const claimPath = z
  .union([z.string().min(1).max(256), z.array(z.string().min(1).max(256)).min(1).max(4)])
  .transform((value) => (typeof value === 'string' ? [value] : value));

const originUrl = z
  .string()
  .url('must be an absolute http:// or https:// URL')
  .refine((value) => !URL.canParse(value) || /^https?:$/.test(new URL(value).protocol), 'must use http or https')
  .refine((value) => !URL.canParse(value) || (new URL(value).pathname === '/' && !new URL(value).search && !new URL(value).hash), 'must be scheme://host[:port] only, without a path')
  .transform((value) => new URL(value).origin);

/**
 * The gateway as an OAuth 2.1 resource server for a route (docs/auth.md): Envoy validates every
 * request's bearer token (issuer, signature, expiry, audience) before anything else sees it.
 */
export const routeAuthSchema = z
  .object({
    issuer: endpointUrl.describe('The authorization server\'s issuer identifier, exactly as tokens carry it in `iss`.'),
    jwksUri: endpointUrl
      .optional()
      .describe('Where the control plane reads the issuer\'s signing keys. Default: `jwks_uri` of the issuer\'s OpenID Connect discovery document (or RFC 8414 metadata).'),
    audiences: z
      .array(z.string().min(1).max(512))
      .min(1)
      .optional()
      .describe('Accepted `aud` values (any one). Default: the route\'s resource URL, <publicUrl>/mcp/<key>.'),
    // Envoy reads 0 as "not set", i.e. its own default of 60 s: the least leeway that can be had is 1 s.
    clockSkewSeconds: z.number().int().min(1).max(300).optional().describe('Leeway for `exp` and `nbf`, 1-300 seconds. Default 60.'),
    scopes: z
      .array(scopeToken)
      .min(1)
      .optional()
      .describe('Scopes a client should ask for to use the route: in the 401 challenge (`scope=`) and the metadata document. Default: none in the challenge; the rules\' requiredScopes in the document.'),
    groupsClaim: claimPath.optional().describe('The claim holding the caller\'s groups: a name, or a list of names into nested objects (`[realm_access, roles]`). Default `groups`.'),
    authorizationServers: z.array(endpointUrl).min(1).optional().describe('`authorization_servers` of the metadata document. Default: [issuer].'),
    publicUrl: originUrl.optional().describe('The gateway\'s public origin (scheme://host[:port]) clients use. Default: the gateway\'s --public-url.'),
  })
  .strict();

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
    approvalAtRisk: z
      .enum(RISKS)
      .optional()
      .describe('Calls of tools at this risk or above wait for a person\'s approval (docs/approval-and-audit.md), unless their rule says approval: none.'),
    approvers: claimValue.optional().describe('The group whose members approve this Tool Service\'s calls. Default: the caller themself (which needs the route\'s auth).'),
    rules: z
      .array(toolRuleSchema)
      .min(1)
      .optional()
      .describe('Who may call which served tools (docs/auth.md): for each tool the first rule whose pattern matches applies; a tool no rule matches is open to every valid token. Needs the route\'s auth.'),
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
    quotas: toolServiceQuotasSchema.optional().describe('Rate and concurrency limits of the Tool Service and its tools, the same in every route that maps it (docs/quotas.md).'),
    credentials: credentialsSchema.optional().describe('What the gateway authenticates to the Tool Service with (docs/auth.md); default none.'),
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
    quotas: routeQuotasSchema.optional().describe("The route's rate and concurrency limits (docs/quotas.md); each one not set here is the document's default."),
    auth: z
      .union([z.literal(false), routeAuthSchema])
      .optional()
      .describe('The route\'s OAuth 2.1 resource-server settings (docs/auth.md); `false` keeps it open. Default: the document\'s `auth`, else open.'),
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
    quotas: routeQuotasSchema.optional().describe('Gateway-wide defaults of every route\'s limits (docs/quotas.md).'),
    auth: routeAuthSchema.optional().describe('The auth of every route that does not set its own (docs/auth.md).'),
    routes: z.array(routeSchema).describe('Every route the source declares. A route absent here is removed from the gateway.'),
  })
  .strict();

export type ToolService = z.output<typeof toolServiceSchema>;
export type Transport = z.output<typeof transportSchema>;
export type ToolPolicy = z.output<typeof toolPolicySchema>;
export type Credentials = z.output<typeof credentialsSchema>;
export type ToolRule = z.output<typeof toolRuleSchema>;
export type RouteAuth = z.output<typeof routeAuthSchema>;
export type Route = z.output<typeof routeSchema>;
export type RateLimitSetting = z.output<typeof rateLimitSchema>;
export type RateLimits = z.output<typeof rateLimitsSchema>;
export type RouteQuotas = z.output<typeof routeQuotasSchema>;
export type ToolServiceQuotas = z.output<typeof toolServiceQuotasSchema>;

export interface Registry {
  routes: Route[];
}
