import {
  Attributes,
  DiagLogLevel,
  INVALID_SPAN_CONTEXT,
  ROOT_CONTEXT,
  Span,
  SpanKind,
  SpanStatusCode,
  TextMapGetter,
  TextMapSetter,
  Tracer,
  context,
  diag,
  trace,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, TracerProvider } from '@opentelemetry/sdk-trace';
import { Logger } from './log';

/**
 * Spans of the sidecar and the control plane (docs/observability.md#traces), with the OpenTelemetry
 * JS SDK, for what they do on a request's behalf: the session check, backend sessions, catalog
 * fetches. Envoy's own spans come from its native tracer (control-plane/xds/translate/tracing.ts).
 * Off (no OTLP endpoint), nothing is set up: no context manager, no header parsing, no span objects.
 */

export interface TracingSettings {
  /** OTLP/HTTP base URL of the collector, e.g. http://collector:4318: spans go to `<url>/v1/traces`. */
  otlpEndpoint: string;
  /** Share of the traces this component starts that are kept (0…1); a caller's sampled flag is followed. */
  samplingRatio: number;
  /** `service.name` of this component's spans. */
  serviceName: string;
}

/** Headers of a request, as the sidecar's RequestHead (a Map) or as a plain record. */
export type HeaderCarrier = Map<string, string> | Record<string, string>;

const headerGetter: TextMapGetter<HeaderCarrier> = {
  keys: (carrier) => (carrier instanceof Map ? [...carrier.keys()] : Object.keys(carrier)),
  get: (carrier, key) => (carrier instanceof Map ? carrier.get(key) : carrier[key]),
};
const recordSetter: TextMapSetter<Record<string, string>> = {
  set: (carrier, key, value) => {
    carrier[key] = value;
  },
};

export interface SpanOptions {
  kind: SpanKind;
  attributes?: Attributes;
  /** Where the caller's trace context comes from when no span of this process is active. */
  parentHeaders?: HeaderCarrier;
}

/** The spans one component makes: a no-op when tracing is off. */
export class Tracing {
  /** Tracing off: spans are never made, headers pass as they are. */
  static readonly off = new Tracing(undefined, undefined);

  private readonly propagator = new W3CTraceContextPropagator();

  private constructor(
    private readonly tracer: Tracer | undefined,
    private readonly provider: TracerProvider | undefined,
  ) {}

  /** Exports to the collector from now on; the process's async context follows spans across awaits. */
  static start(settings: TracingSettings, log: Logger): Tracing {
    diag.setLogger(
      {
        error: (message) => log.warn(`tracing: ${message}`),
        warn: (message) => log.warn(`tracing: ${message}`),
        info: () => undefined,
        debug: () => undefined,
        verbose: () => undefined,
      },
      DiagLogLevel.WARN,
    );
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    const provider = new TracerProvider({
      resource: resourceFromAttributes({ 'service.name': settings.serviceName }),
      sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(settings.samplingRatio) }),
      spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url: `${settings.otlpEndpoint.replace(/\/+$/, '')}/v1/traces` }) })],
    });
    return new Tracing(provider.getTracer('mcpgw'), provider);
  }

  get enabled(): boolean {
    return this.tracer !== undefined;
  }

  /**
   * Runs `work` in a span named `name`: a child of this process's active span, else of the trace
   * context in `parentHeaders`, else the root of a new trace. A thrown error ends it with error status;
   * `work` sets the status of a failure it answers rather than throws.
   */
  async inSpan<T>(name: string, options: SpanOptions, work: (span: Span) => Promise<T>): Promise<T> {
    if (!this.tracer) return work(trace.wrapSpanContext(INVALID_SPAN_CONTEXT));
    const active = context.active();
    const parent = trace.getSpan(active) || !options.parentHeaders ? active : this.propagator.extract(ROOT_CONTEXT, options.parentHeaders, headerGetter);
    return this.tracer.startActiveSpan(name, { kind: options.kind, attributes: options.attributes }, parent, async (span) => {
      try {
        return await work(span);
      } catch (error) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).message });
        throw error;
      } finally {
        span.end();
      }
    });
  }

  /**
   * `headers` for a request made inside the active span: its traceparent (and the trace's tracestate)
   * replace the caller's, so that what the request causes hangs under that span. Unchanged when off.
   */
  headersFor(headers: Record<string, string>): Record<string, string> {
    const active = context.active();
    if (!this.tracer || !trace.getSpan(active)) return headers;
    const ours = { ...headers };
    delete ours.traceparent;
    delete ours.tracestate;
    this.propagator.inject(active, ours, recordSetter);
    return ours;
  }

  /** Exports what is buffered and stops. */
  async shutdown(): Promise<void> {
    await this.provider?.shutdown();
  }
}

/** Marks a span failed without a thrown error (an answer that reports the failure). */
export function failSpan(span: Span, message: string): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message });
}

export { SpanKind };
