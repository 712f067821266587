import * as client from 'prom-client';

export interface GaugeSample<L extends string> {
  labels: Partial<Record<L, string>>;
  value: number;
}

/**
 * A gauge read from the state it describes when Prometheus scrapes, never a copy kept in step by
 * events: it cannot miss an event or keep a label set that is gone.
 */
export function stateGauge<L extends string = never>(
  registry: client.Registry,
  config: { name: string; help: string; labelNames?: readonly L[] },
  read: () => GaugeSample<L>[] | Promise<GaugeSample<L>[]>,
): client.Gauge<L> {
  return new client.Gauge<L>({
    name: config.name,
    help: config.help,
    labelNames: config.labelNames ?? [],
    registers: [registry],
    async collect() {
      const samples = await read();
      this.reset();
      for (const { labels, value } of samples) this.set(labels as client.LabelValues<L>, value);
    },
  });
}

/** `mcpgw_redis_up`: whether this process's Redis answers a PING now (within the client's command timeout). */
export function redisUpGauge(registry: client.Registry, answers: () => Promise<boolean>, role: string): void {
  stateGauge(registry, { name: 'mcpgw_redis_up', help: `1 when Redis (${role}) answered a PING at this scrape, 0 when it did not` }, async () => [
    { labels: {}, value: (await answers()) ? 1 : 0 },
  ]);
}
