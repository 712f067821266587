import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { readToken } from '../shared/admin-access';
import { Logger } from '../shared/log';
import { RATELIMIT_DOMAIN } from '../xds/translate/quotas';
import { writeRateLimitServiceConfigIfMissing, writeRateLimitServiceConfigText } from './ratelimit-service-config';

/**
 * Keeps a ratelimit service's configuration file in step with a control plane's, where the service
 * runs on another host than the control planes: in the Helm chart, a container in each Envoy pod
 * beside the service, which Envoy reaches over a Unix socket (docs/deploying.md). The control plane's
 * admin serves the file's text (GET /config/ratelimit); this writes it into the service's runtime
 * directory whole (renamed into place) and only when it changed, so the service reloads only when
 * the registry's shared limits change — the same file and reload as beside `--ratelimit-config`.
 */

export interface RateLimitConfigSyncOptions {
  /** A control plane's admin base URL, e.g. http://control-plane:18001 (a headless Service: any replica). */
  controlPlane: string;
  /** The admin port's bearer token (read at every request, so a rotated Secret is followed). */
  adminTokenFile?: string;
  /** The service's configuration file, under its RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/. */
  output: string;
  intervalMs: number;
  timeoutMs: number;
  log: Logger;
}

/** What a configuration must look like before it replaces the one the service has. */
const configSchema = z.object({ domain: z.literal(RATELIMIT_DOMAIN), descriptors: z.array(z.object({ key: z.string() }).passthrough()) });

/** The control plane's configuration text, checked to be one of the gateway's domain. */
export async function fetchRateLimitConfig(options: Pick<RateLimitConfigSyncOptions, 'controlPlane' | 'adminTokenFile' | 'timeoutMs'>): Promise<string> {
  const url = new URL('/config/ratelimit', options.controlPlane);
  const headers: Record<string, string> = options.adminTokenFile ? { authorization: `Bearer ${readToken(options.adminTokenFile)}` } : {};
  const response = await fetch(url, { headers, signal: AbortSignal.timeout(options.timeoutMs) });
  const text = await response.text();
  if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status} ${text.slice(0, 200)}`);
  let document: unknown;
  try {
    document = parseYaml(text);
  } catch (error) {
    throw new Error(`GET ${url}: not YAML (${(error as Error).message})`);
  }
  const checked = configSchema.safeParse(document);
  if (!checked.success) {
    const issue = checked.error.issues[0];
    throw new Error(`GET ${url}: not a ratelimit configuration of domain ${RATELIMIT_DOMAIN} (${issue.path.join('.') || 'document'}: ${issue.message})`);
  }
  return text;
}

/**
 * Writes a configuration without limits at once if there is none (the service does not start without
 * one), then the control plane's every `intervalMs`. While no control plane answers, the file keeps
 * what it had: the service goes on counting the limits it knows.
 */
export function startRateLimitConfigSync(options: RateLimitConfigSyncOptions): { stop(): Promise<void> } {
  const { log } = options;
  writeRateLimitServiceConfigIfMissing(options.output);
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let failing = false;
  let round: Promise<void> = Promise.resolve();

  const syncOnce = async () => {
    try {
      const text = await fetchRateLimitConfig(options);
      if (writeRateLimitServiceConfigText(options.output, text)) log.info('ratelimit service configuration written', { file: options.output });
      if (failing) log.info('the control plane answers again', { controlPlane: options.controlPlane });
      failing = false;
    } catch (error) {
      // Once per outage, not every interval: the file keeps its last configuration meanwhile.
      if (!failing) log.warn('could not fetch the ratelimit service configuration: the service keeps the one it has', { error: (error as Error).message });
      failing = true;
    }
  };
  const schedule = () => {
    if (stopped) return;
    round = syncOnce().then(() => {
      if (!stopped) timer = setTimeout(schedule, options.intervalMs);
    });
  };
  schedule();
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await round;
    },
  };
}
