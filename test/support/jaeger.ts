import * as fs from 'node:fs';
import * as path from 'node:path';
import { stringify } from 'yaml';
import { ManagedProcess, freePorts, portAccepts } from '../../control-plane/devstack/processes';
import { tools } from './tools';

export interface Jaeger {
  /** OTLP over HTTP, e.g. for an exporter's `…/v1/traces`. */
  otlpHttpUrl: string;
  /** OTLP over gRPC, as HOST:PORT. */
  otlpGrpcAddress: string;
  /** Jaeger's query API (`/api/services`, `/api/traces?service=…`) and UI. */
  queryUrl: string;
  stop(): Promise<void>;
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
  return {
    otlpHttpUrl: `http://${HOST}:${otlpHttp}`,
    otlpGrpcAddress: `${HOST}:${otlpGrpc}`,
    queryUrl,
    stop: () => jaeger.stop(),
  };
}
