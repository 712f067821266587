import * as fs from 'node:fs';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { z } from 'zod';
import { ManagedProcess, freePorts, portAccepts, waitFor } from '../../control-plane/devstack/processes';
import { tools } from './tools';

export interface Jaeger {
  /** OTLP over HTTP, e.g. for an exporter's `…/v1/traces`. */
  otlpHttpUrl: string;
  /** OTLP over gRPC, as HOST:PORT. */
  otlpGrpcAddress: string;
  /** Jaeger's query API (`/api/services`, `/api/traces?service=…`) and UI. */
  queryUrl: string;
  /** Its process id (the bench pins it to a core). */
  pid: number | undefined;
  /** The spans of one trace Jaeger holds (none: an empty list). */
  trace(traceId: string): Promise<StoredSpan[]>;
  /** The traces that hold a span of `service` (and `operation`), newest first, each as its spans. */
  traces(service: string, operation?: string): Promise<StoredSpan[][]>;
  /** Waits (up to 30 s: exporters batch for seconds) until `found` picks something out of one trace. */
  untilTrace<T>(traceId: string, found: (spans: StoredSpan[]) => T | undefined): Promise<T>;
  stop(): Promise<void>;
}

/** A span as Jaeger's query API returns it, its tags flattened (an OTLP status shows as `otel.status_code` and `error`). */
export interface StoredSpan {
  traceId: string;
  spanId: string;
  /** The span it is a child of, if any. */
  parentSpanId?: string;
  operationName: string;
  service: string;
  tags: Record<string, unknown>;
}

const tracesSchema = z.object({
  data: z
    .array(
      z.object({
        traceID: z.string(),
        spans: z.array(
          z.object({
            spanID: z.string(),
            operationName: z.string(),
            processID: z.string(),
            references: z.array(z.object({ refType: z.string(), spanID: z.string() })).nullish(),
            tags: z.array(z.object({ key: z.string(), value: z.unknown() })).nullish(),
          }),
        ),
        processes: z.record(z.string(), z.object({ serviceName: z.string() })),
      }),
    )
    .nullable(),
});

function storedSpans(body: unknown): StoredSpan[][] {
  return (tracesSchema.parse(body).data ?? []).map((trace) =>
    trace.spans.map((span) => ({
      traceId: trace.traceID,
      spanId: span.spanID,
      parentSpanId: span.references?.find((reference) => reference.refType === 'CHILD_OF')?.spanID,
      operationName: span.operationName,
      service: trace.processes[span.processID]?.serviceName ?? '',
      tags: Object.fromEntries((span.tags ?? []).map((tag) => [tag.key, tag.value])),
    })),
  );
}

const HOST = '127.0.0.1';

/**
 * Jaeger v1.76.0 all-in-one (the OpenTelemetry-collector based `cmd/jaeger`) with in-memory storage,
 * OTLP receivers and the query API, each on a free loopback port; nothing else it would open by
 * default (Jaeger/Zipkin receivers, sampling, metrics, health check, its own tracing) is started.
 */
export async function startJaeger(dir: string): Promise<Jaeger> {
  const [otlpHttp, otlpGrpc, queryHttp, queryGrpc] = await freePorts(4);
  const config = {
    service: {
      extensions: ['jaeger_storage', 'jaeger_query'],
      pipelines: { traces: { receivers: ['otlp'], exporters: ['jaeger_storage_exporter'] } },
      telemetry: { metrics: { level: 'none' }, logs: { level: 'info' } },
    },
    extensions: {
      jaeger_storage: { backends: { memory_store: { memory: { max_traces: 10000 } } } },
      jaeger_query: {
        storage: { traces: 'memory_store' },
        // On by default: it would export Jaeger's own spans to 127.0.0.1:4317, and wait for it at exit.
        enable_tracing: false,
        http: { endpoint: `${HOST}:${queryHttp}` },
        grpc: { endpoint: `${HOST}:${queryGrpc}` },
      },
    },
    receivers: {
      otlp: { protocols: { grpc: { endpoint: `${HOST}:${otlpGrpc}` }, http: { endpoint: `${HOST}:${otlpHttp}` } } },
    },
    exporters: { jaeger_storage_exporter: { trace_storage: 'memory_store' } },
  };
  fs.mkdirSync(dir, { recursive: true });
  const configFile = path.join(dir, 'jaeger.yaml');
  fs.writeFileSync(configFile, stringify(config));
  const jaeger = new ManagedProcess({
    name: 'jaeger',
    command: tools().jaeger,
    args: ['--config', configFile],
    logFile: path.join(dir, 'jaeger.log'),
  });
  const queryUrl = `http://${HOST}:${queryHttp}`;
  try {
    await jaeger.untilReady('Jaeger serves OTLP and its query API', async () => {
      const ready = (await portAccepts(otlpHttp)) && (await portAccepts(otlpGrpc)) && (await fetch(`${queryUrl}/api/services`)).ok;
      return ready || undefined;
    });
  } catch (error) {
    await jaeger.stop();
    throw error;
  }
  const query = async (pathAndQuery: string) => {
    const response = await fetch(`${queryUrl}${pathAndQuery}`);
    return response.status === 404 ? [] : storedSpans(await response.json());
  };
  const trace = async (traceId: string) => (await query(`/api/traces/${traceId}`))[0] ?? [];
  return {
    otlpHttpUrl: `http://${HOST}:${otlpHttp}`,
    otlpGrpcAddress: `${HOST}:${otlpGrpc}`,
    queryUrl,
    pid: jaeger.child.pid,
    trace,
    traces: (service, operation) =>
      query(`/api/traces?${new URLSearchParams({ service, limit: '1000', lookback: '1h', ...(operation && { operation }) })}`),
    untilTrace: (traceId, found) => waitFor(`trace ${traceId} in Jaeger`, async () => found(await trace(traceId)), { timeoutMs: 30_000, intervalMs: 500 }),
    stop: () => jaeger.stop(),
  };
}
