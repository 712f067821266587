import { FleetSize } from './systems/topology';

/** Everything that shapes a run; recorded with the results. */
export interface BenchSettings {
  mode: 'full' | 'quick';
  /** Each measurement is repeated this many times, systems interleaved within a repetition. */
  repetitions: number;
  requestTimeoutMs: number;
  /** Fixed-rate runs stop sending (and count an error) beyond this many requests in flight. */
  maxInFlight: number;
  toolCall: {
    ratesPerSecond: number[];
    /** Once per system before anything is measured: JIT, connection pools, caches. */
    initialWarmup: { rate: number; durationMs: number };
    /** Before each measured run, at that run's rate, discarded. */
    warmupMs: number;
    measureMs: number;
    /** MCP sessions (initialize + notifications/initialized) the load is spread over. */
    sessions: number;
    saturation: { concurrency: number; warmupMs: number; measureMs: number };
  };
  streaming: { notifications: number; intervalMs: number; callsPerRepetition: number; concurrency: number };
  /** tools/call through gateways that differ only in tracing: off, and each sampling ratio (issue 15). */
  tracing: { ratePerSecond: number; samplingRatios: number[] };
  toolList: {
    fleet: FleetSize;
    /**
     * Whole listings per second. Low, because D and E fan every listing out to 50 backends that
     * share one core here, and the gateway pages 5,000 tools in 50 requests.
     */
    ratePerSecond: number;
    warmupRequests: number;
    measureMs: number;
    /** Per-backend timeout of the naive proxy's fan-out (Envoy mcp_router's default is 5 s). */
    naiveListTimeoutMs: number;
  };
  configuration: {
    changeTrials: number;
    /** Registry size for snapshot build, push-to-ACK and memory. */
    routes: number;
    toolServicesPerRoute: number;
    /** Distinct real backends the Tool Service ids share. */
    backendUrls: number;
    toolsPerBackend: number;
    /** In-process snapshot builds to time. */
    buildRepetitions: number;
    /** How long to wait for Envoy's ACK and for the catalog after the big change. */
    settleTimeoutMs: number;
  };
}

const FULL: BenchSettings = {
  mode: 'full',
  repetitions: 3,
  requestTimeoutMs: 10_000,
  maxInFlight: 2_000,
  toolCall: {
    ratesPerSecond: [100, 250, 500],
    initialWarmup: { rate: 200, durationMs: 3_000 },
    warmupMs: 1_000,
    measureMs: 6_000,
    sessions: 8,
    saturation: { concurrency: 16, warmupMs: 1_000, measureMs: 5_000 },
  },
  streaming: { notifications: 20, intervalMs: 50, callsPerRepetition: 20, concurrency: 10 },
  tracing: { ratePerSecond: 250, samplingRatios: [0.01, 1] },
  toolList: {
    fleet: { backends: 50, toolsPerBackend: 100, promptsPerBackend: 20, resourcesPerBackend: 100, slowListDelayMs: 2_000 },
    ratePerSecond: 2,
    warmupRequests: 3,
    measureMs: 6_000,
    naiveListTimeoutMs: 5_000,
  },
  configuration: {
    changeTrials: 5,
    routes: 1_000,
    toolServicesPerRoute: 5,
    backendUrls: 5,
    toolsPerBackend: 5,
    buildRepetitions: 5,
    settleTimeoutMs: 120_000,
  },
};

/** A smoke run: every scenario and system once, short, smaller sizes; numbers are not for keeping. */
const QUICK: BenchSettings = {
  ...FULL,
  mode: 'quick',
  repetitions: 1,
  toolCall: {
    ...FULL.toolCall,
    ratesPerSecond: [100, 500],
    initialWarmup: { rate: 200, durationMs: 1_000 },
    warmupMs: 500,
    measureMs: 2_000,
    saturation: { concurrency: 16, warmupMs: 500, measureMs: 2_000 },
  },
  streaming: { ...FULL.streaming, callsPerRepetition: 5, concurrency: 5 },
  toolList: { ...FULL.toolList, measureMs: 3_000, warmupRequests: 1 },
  configuration: { ...FULL.configuration, changeTrials: 2, routes: 100, buildRepetitions: 2, settleTimeoutMs: 60_000 },
};

export function benchSettings(quick: boolean): BenchSettings {
  return quick ? QUICK : FULL;
}
