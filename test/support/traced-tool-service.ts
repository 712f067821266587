import { randomUUID } from 'node:crypto';
import express from 'express';
import { Context, ROOT_CONTEXT, Span, SpanKind, TextMapGetter, Tracer } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { ExportResult, ExportResultCode } from '@opentelemetry/core';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { ReadableSpan, SimpleSpanProcessor, SpanExporter, TracerProvider } from '@opentelemetry/sdk-trace';
import { McpServer as V2McpServer, createMcpHandler } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { z } from 'zod';
import { freePort } from '../../control-plane/devstack/processes';
import { LOOPBACK, LoopbackMcpService } from './loopback-mcp-service';

/**
 * OTLP/HTTP (protobuf, as the SDK serializes it) over fetch. The SDK's own exporter loads node:http
 * with a dynamic import, which jest's module sandbox refuses; the components under test use it as is.
 */
class FetchOtlpExporter implements SpanExporter {
  constructor(private readonly tracesUrl: string) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    fetch(this.tracesUrl, { method: 'POST', headers: { 'content-type': 'application/x-protobuf' }, body: ProtobufTraceSerializer.serializeRequest(spans) })
      .then((response) => done({ code: response.ok ? ExportResultCode.SUCCESS : ExportResultCode.FAILED }))
      .catch((error: Error) => done({ code: ExportResultCode.FAILED, error }));
  }

  async shutdown(): Promise<void> {}
}

/**
 * The test's own side of a trace: an OpenTelemetry tracer of one service (the agent, a Tool Service)
 * exporting every span at once over OTLP/HTTP, as a real SDK user would, to the test's Jaeger.
 */
export class TestTracer {
  private readonly provider: TracerProvider;
  readonly tracer: Tracer;
  private readonly propagator = new W3CTraceContextPropagator();

  constructor(otlpHttpUrl: string, serviceName: string) {
    this.provider = new TracerProvider({
      resource: resourceFromAttributes({ 'service.name': serviceName }),
      spanProcessors: [new SimpleSpanProcessor({ exporter: new FetchOtlpExporter(`${otlpHttpUrl}/v1/traces`) })],
    });
    this.tracer = this.provider.getTracer('mcpgw-test');
  }

  /** The W3C trace context in a set of headers (or a `_meta` object). */
  contextOf(carrier: Record<string, unknown>): Context {
    const getter: TextMapGetter<Record<string, unknown>> = {
      keys: (headers) => Object.keys(headers),
      get: (headers, key) => (typeof headers[key] === 'string' ? (headers[key] as string) : undefined),
    };
    return this.propagator.extract(ROOT_CONTEXT, carrier, getter);
  }

  async shutdown(): Promise<void> {
    await this.provider.shutdown();
  }
}

/** traceparent of a span, as W3C Trace Context writes it. */
export function traceparentOf(span: Span): string {
  const { traceId, spanId, traceFlags } = span.spanContext();
  return `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}`;
}

/** One request a traced Tool Service got: the trace context it came with, and the span the service made for it. */
export interface ReceivedRequest {
  method: string;
  traceparent?: string;
  tracestate?: string;
  /** params._meta.traceparent, where the 2026-07-28 revision also carries the trace context. */
  metaTraceparent?: string;
  /** The service's own span for this request. */
  spanId: string;
}

/**
 * Where a Tool Service takes its parent span from: the traceparent header (the session-based
 * revision), or params._meta.traceparent (what a stateless, 2026-07-28 server reads).
 */
type ParentFrom = 'header' | 'meta';

/**
 * Records every JSON-RPC request's trace context and makes a server span `<service> <method>` for it,
 * a child of that context, ended when the answer is sent.
 */
function recordingMiddleware(service: TracedToolService, tracer: TestTracer, parentFrom: ParentFrom): express.RequestHandler {
  return (req, res, next) => {
    const message = req.body as { method?: string; params?: { _meta?: Record<string, unknown> } } | undefined;
    const method = message?.method ?? req.method;
    const meta = message?.params?._meta ?? {};
    const parent = tracer.contextOf(parentFrom === 'meta' ? meta : (req.headers as Record<string, unknown>));
    const span = tracer.tracer.startSpan(`${service.name} ${method}`, { kind: SpanKind.SERVER }, parent);
    res.on('finish', () => span.end());
    service.received.push({
      method,
      traceparent: req.headers.traceparent as string | undefined,
      tracestate: req.headers.tracestate as string | undefined,
      metaTraceparent: typeof meta.traceparent === 'string' ? meta.traceparent : undefined,
      spanId: span.spanContext().spanId,
    });
    next();
  };
}

const echoInput = { text: z.string() };

/**
 * A real MCP SDK Tool Service that records the trace context of every request and exports its own
 * span for each: `sessions` is an SDK v1 server of the session-based revision that hands out sessions
 * (the sidecar opens one for a client's calls); `modern` is an SDK v2 server of the stateless revision
 * (2026-07-28), which takes its parent from params._meta. Its tool `echo` answers its text.
 */
export class TracedToolService extends LoopbackMcpService {
  readonly received: ReceivedRequest[] = [];

  private constructor(
    port: number,
    readonly name: string,
  ) {
    super(port);
  }

  /** The requests of one JSON-RPC method it got. */
  requests(method: string): ReceivedRequest[] {
    return this.received.filter((request) => request.method === method);
  }

  static async start(kind: 'sessions' | 'modern', name: string, tracer: TestTracer, port?: number): Promise<TracedToolService> {
    const service = new TracedToolService(port ?? (await freePort()), name);
    const app = createMcpExpressApp({ host: LOOPBACK });
    app.use('/mcp', recordingMiddleware(service, tracer, kind === 'modern' ? 'meta' : 'header'));
    if (kind === 'modern') {
      const handler = toNodeHandler(
        createMcpHandler(
          () => {
            const server = new V2McpServer({ name, version: '1.0.0' });
            server.registerTool('echo', { description: 'Answers its text.', inputSchema: z.object(echoInput) }, async ({ text }) => ({ content: [{ type: 'text' as const, text }] }));
            return server;
          },
          { legacy: 'reject' },
        ),
      );
      app.all('/mcp', (req, res) => void handler(req, res, req.body));
    } else {
      const transports = new Map<string, StreamableHTTPServerTransport>();
      app.all('/mcp', async (req, res) => {
        const sessionId = req.headers['mcp-session-id'] as string | undefined;
        let transport = sessionId ? transports.get(sessionId) : undefined;
        if (!transport) {
          if (sessionId) {
            res.status(404).json({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } });
            return;
          }
          const opened = new StreamableHTTPServerTransport({ sessionIdGenerator: randomUUID, onsessioninitialized: (id) => void transports.set(id, opened) });
          const server = new McpServer({ name, version: '1.0.0' });
          server.registerTool('echo', { description: 'Answers its text.', inputSchema: echoInput }, async ({ text }) => ({ content: [{ type: 'text', text }] }));
          await server.connect(opened);
          transport = opened;
        }
        await transport.handleRequest(req, res, req.body);
      });
    }
    await service.listen(app);
    return service;
  }
}
