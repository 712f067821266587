import { RepeatedValue, Spread, pairedAddedMedian, pairedRatioMedian, signedMicros, spreadOf } from '../load/stats';
import { ConfigurationResults } from '../scenarios/configuration';
import { NEAR_CALL_START_MS, StreamingResults } from '../scenarios/streaming';
import { SATURATION, ToolCallResults } from '../scenarios/tool-call';
import { ToolListResults } from '../scenarios/tool-list';
import { SYSTEMS_CORE_ROWS, TracingResults, TracingRun, systemsCoreMicrosPerCall } from '../scenarios/tracing';
import { ATTRIBUTE_VARIANTS, AttributeCostRun } from '../scenarios/tracing-attributes';
import { SystemId } from '../systems/systems';
import { LIST_VARIANTS, ListVariant } from '../systems/topology';
import { BenchResults, LatencySpread, streamingFigures, surfaceListFigures, toolCallFigures, toolListFigures, tracingFigures } from './results';
import { ms } from './targets';

/** The Markdown report of one run: what was measured, how, and how far each target is. */

const num = (value: number, digits = 2) => (Number.isFinite(value) ? value.toFixed(value >= 100 ? 0 : value >= 10 ? 1 : digits) : 'n/a');
/** Median over repetitions, with the range when there were several. */
const cell = (spread: Spread | undefined, repetitions: number) =>
  !spread ? '–' : repetitions > 1 ? `${num(spread.median)} (${num(spread.min)}–${num(spread.max)})` : num(spread.median);
const times = (value: number | undefined, reference: number | undefined) =>
  value !== undefined && reference !== undefined && Number.isFinite(value / reference) ? `${(value / reference).toFixed(2)}×` : 'n/a';

function table(header: string[], rows: string[][]): string[] {
  return [`| ${header.join(' | ')} |`, `| ${header.map(() => '---').join(' | ')} |`, ...rows.map((row) => `| ${row.join(' | ')} |`)];
}

const systemName = (results: BenchResults, id: SystemId) => `${id} ${results.systems.find((system) => system.id === id)?.name ?? ''}`.trim();

/** One line naming every kind of wrong answer a scenario's runs counted, so a number is never read without its failures. */
function errorLines<Run extends { errors: Record<string, number> }>(runs: Run[], label: (run: Run) => string): string[] {
  const counts = new Map<string, number>();
  for (const run of runs) {
    for (const [reason, count] of Object.entries(run.errors)) {
      const key = `${label(run)}: ${reason}`;
      counts.set(key, (counts.get(key) ?? 0) + count);
    }
  }
  return counts.size === 0 ? [] : ['Wrong or failed answers, all repetitions:', '', ...[...counts].map(([key, count]) => `- ${key} × ${count}`), ''];
}

/** The `--only` option a run of one scenario alone was made with; empty for a whole run. */
/** What a run of one scenario alone (`--only`) measured. */
function aloneMethod(results: BenchResults, repetitions: number): string {
  switch (results.only) {
    case 'tool-list':
      return `the tools/list scenario alone (\`--only tool-list\`), ${repetitions} repetition(s), systems interleaved within each; fixed-rate (open-loop) arrivals with latency from the intended send time; every answer checked for its entry count`;
    case 'streaming':
      return `the streaming scenario alone (\`--only streaming\`), ${repetitions} repetition(s), systems interleaved within each`;
    case 'tracing':
      return `the tracing scenario alone (\`--only tracing\`): none of the five systems, only the gateways of scenario 5 and its backend; ${repetitions} repetition(s)`;
    default:
      return 'the configuration scenario alone (`--only configuration`)';
  }
}

function environmentSection(results: BenchResults): string[] {
  const { machine, versions } = results.environment;
  const s = results.settings;
  const withSessions = Object.entries(results.toolCall?.sessionIds ?? {})
    .filter(([, handedOut]) => handedOut)
    .map(([id]) => id)
    .join(', ');
  const packages = ['@modelcontextprotocol/sdk', '@grpc/grpc-js', 'typescript'].map((name) => `${name} ${versions.packages[name] ?? '?'}`).join(', ');
  return [
    '## Machine, versions, settings',
    '',
    `- Machine: ${machine.nproc} CPUs (${machine.cpuModel}), ${machine.memoryGiB} GiB, ${machine.kernel}, load average at start ${machine.loadAverageAtStart.join(' / ')}`,
    `- Versions: Node ${versions.node}, Envoy ${versions.envoy}, ${packages} (all packages in the JSON); project ${versions.project.commit.slice(0, 12)}${versions.project.uncommittedChanges ? ' with uncommitted changes' : ''}`,
    `- Load average (1 min / 5 min) after each phase: ${results.loadAverages.map((entry) => `${entry.after} ${entry.oneMinute} / ${entry.fiveMinutes}`).join(', ')} — the machine is shared; a load well above 2 means other work competed with the bench`,
    `- CPU placement: ${results.cpuPlan.pinned ? `load generator on CPU ${results.cpuPlan.loadGenerator}, every system under test (and its backends) on CPU ${results.cpuPlan.systemsUnderTest} (taskset)` : 'not pinned (one CPU)'}; nice ${results.cpuPlan.niceness} for the bench and everything it starts`,
    ...(results.toolCall
      ? [
          `- Method: ${s.repetitions} repetition(s), systems interleaved within each; fixed-rate (open-loop) arrivals with latency from the intended send time; ${s.toolCall.initialWarmup.durationMs / 1000} s warm-up per system, then ${s.toolCall.warmupMs / 1000} s warm-up + ${s.toolCall.measureMs / 1000} s measured per rate; saturation = closed loop, ${s.toolCall.saturation.concurrency} clients, ${s.toolCall.saturation.measureMs / 1000} s; every answer checked (JSON-RPC result, echoed text, tool count)`,
          `- MCP client load: JSON-RPC over Streamable HTTP (POST, \`accept: application/json, text/event-stream\`), ${s.toolCall.sessions} sessions per system opened with initialize (the client declares sampling, elicitation and roots) + notifications/initialized, a ~1 KB RS256 bearer token on every request to every system (C validates it and applies a per-tool rule on every route), their \`mcp-protocol-version\` and, where the path hands one out (${withSessions || 'none did'}), \`mcp-session-id\` on every request; the backends are stateless`,
        ]
      : [`- Method: ${aloneMethod(results, s.repetitions)}`]),
    '',
    ...(results.systems.length > 0 ? [...table(['system', 'set-up'], results.systems.map((system) => [`${system.id} ${system.name}`, system.setup])), ''] : []),
  ];
}

function targetsSection(results: BenchResults): string[] {
  return [
    '## Targets (reported, not asserted)',
    '',
    ...table(
      ['target', 'measured (medians over repetitions)', 'status'],
      results.targets.map((target) => [target.target, target.measured, target.met === null ? 'not measured' : target.met ? 'met' : 'missed']),
    ),
    '',
  ];
}

function toolCallSection(results: BenchResults, toolCall: ToolCallResults): string[] {
  const loads = [...results.settings.toolCall.ratesPerSecond.map(String), SATURATION];
  const ids = results.systems.map((system) => system.id);
  const rows: string[][] = [];
  for (const load of loads) {
    const figures = Object.fromEntries(ids.map((id) => [id, toolCallFigures(toolCall, id, load)]));
    for (const id of ids) {
      const f = figures[id];
      if (!f) continue;
      const l: LatencySpread = f.latencyMs;
      const ref = (other: SystemId, quantile: 'p50' | 'p99') => figures[other]?.latencyMs[quantile].median;
      rows.push([
        load === SATURATION ? `saturation (${results.settings.toolCall.saturation.concurrency} clients)` : `${load} req/s`,
        systemName(results, id),
        cell(l.p50, f.repetitions),
        cell(l.p90, f.repetitions),
        cell(l.p99, f.repetitions),
        cell(l.max, f.repetitions),
        cell(f.throughput, f.repetitions),
        `${f.errors}/${f.sent}`,
        `${times(l.p50.median, ref('A', 'p50'))} / ${times(l.p99.median, ref('A', 'p99'))}`,
        `${times(l.p50.median, ref('D', 'p50'))} / ${times(l.p99.median, ref('D', 'p99'))}`,
      ]);
    }
  }
  return [
    '## 1. tools/call, small result',
    '',
    'Latency in ms from the intended send time to the last byte of the answer: median over repetitions (min–max). Throughput: correct answers per second. Ratios: p50 / p99 against A and against D.',
    '',
    ...table(['load', 'system', 'p50', 'p90', 'p99', 'max', 'ok/s', 'errors/sent', '×A p50 / p99', '×D p50 / p99'], rows),
    '',
    ...errorLines(toolCall.runs, (run) => `${systemName(results, run.system)} at ${run.load === SATURATION ? SATURATION : `${run.load} req/s`}`),
  ];
}

function streamingSection(results: BenchResults, streaming: StreamingResults): string[] {
  const { notifications, intervalMs, callsPerRepetition, concurrency } = results.settings.streaming;
  const ids = results.systems.map((system) => system.id);
  const figures = Object.fromEntries(ids.map((id) => [id, streamingFigures(streaming, id)]));
  const reps = results.settings.repetitions;
  const rows = ids.flatMap((id) => {
    const f = figures[id];
    if (!f) return [];
    const refLater = (other: SystemId) => figures[other]?.laterFramesMs.p99.median;
    const a = figures.A;
    return [
      [
        systemName(results, id),
        cell(f.firstFrameMs.p50, reps),
        cell(f.firstFrameMs.p99, reps),
        cell(f.laterFramesMs.p50, reps),
        cell(f.laterFramesMs.p99, reps),
        cell(f.laterFramesMs.max, reps),
        a ? `${ms(f.laterFramesMs.p50.median - a.laterFramesMs.p50.median)} / ${ms(f.laterFramesMs.p99.median - a.laterFramesMs.p99.median)}` : 'n/a',
        `${times(f.laterFramesMs.p99.median, refLater('A'))} / ${times(f.laterFramesMs.p99.median, refLater('D'))}`,
        cell(f.requestToFirstFrameMs.p50, reps),
        `${f.framesReceived}/${f.framesExpected}${f.errors ? `, ${f.errors} failed calls` : ''}`,
      ],
    ];
  });
  return [
    '## 2. Streaming: progress notifications',
    '',
    `A tool sends ${notifications} progress notifications ${intervalMs} ms apart, each stamped with the backend's monotonic clock just before it is written; the client notes the same clock when the chunk arrives. ${callsPerRepetition} calls per repetition, ${concurrency} at a time. One-way delay per frame in ms (median over repetitions, min–max); "added over A" is the path's own share.`,
    '',
    ...table(
      ['system', 'first frame p50', 'first frame p99', 'later frames p50', 'later frames p99', 'later frames max', 'added over A p50 / p99', '×A / ×D (later p99)', 'request → first frame p50', 'frames'],
      rows,
    ),
    '',
    `Where the slowest 1 % of each repetition's later frames (those that make its p99) sit, summed over repetitions: among their own call's last two frames (the calls of a wave end together there), and sent within ${NEAR_CALL_START_MS} ms of another call's request (its request processing and, on C, its session check).`,
    '',
    ...ids.flatMap((id) => {
      const late = figures[id]?.lateFrames;
      return late ? [`- ${systemName(results, id)}: of ${late.late} slowest frames, ${late.atOwnCallEnd} at their call's end, ${late.nearAnotherCallStart} near another call's start`] : [];
    }),
    '',
    ...errorLines(streaming.runs, (run) => systemName(results, run.system)),
  ];
}

function toolListSection(results: BenchResults, toolList: ToolListResults): string[] {
  const s = results.settings.toolList;
  const ids = [...new Set(toolList.runs.map((run) => run.system))];
  const variantLabel: Record<ListVariant, string> = {
    normal: 'all up',
    down: 'one backend down',
    slow: `one backend slow (${s.fleet.slowListDelayMs / 1000} s)`,
  };
  const rows: string[][] = [];
  for (const variant of LIST_VARIANTS) {
    const figures = Object.fromEntries(ids.map((id) => [id, toolListFigures(toolList, id, variant)]));
    for (const id of ids) {
      const f = figures[id];
      if (!f) continue;
      const refD = (quantile: 'p50' | 'p99') => figures.D?.latencyMs[quantile].median;
      rows.push([
        `${variantLabel[variant]} (${toolList.expectedTools[variant].toLocaleString('en-US')} tools)`,
        systemName(results, id),
        cell(f.latencyMs.p50, f.repetitions),
        cell(f.latencyMs.p99, f.repetitions),
        cell(f.latencyMs.max, f.repetitions),
        String(f.pagesPerListing),
        `${num(f.pageLatencyMs.p50.median)} / ${num(f.pageLatencyMs.p99.median)}`,
        `${f.errors}/${f.sent}`,
        `${times(f.latencyMs.p50.median, refD('p50'))} / ${times(f.latencyMs.p99.median, refD('p99'))}`,
      ]);
    }
  }
  return [
    '## 3. tools/list, 50 backends × 100 tools',
    '',
    `${s.ratePerSecond} listings per second (fixed-rate arrivals) for ${s.measureMs / 1000} s per repetition: the client follows nextCursor until the last page, as an MCP client does, and the listing must hold every tool (a down backend's excepted). Latency in ms of the whole listing, median over repetitions (min–max); "per page" is each tools/list request alone. Ratios to A: n/a — ${toolList.unsupported.find((entry) => entry.system === 'A')?.reason ?? 'A is one backend'}.`,
    '',
    ...table(['route', 'system', 'p50', 'p99', 'max', 'pages', 'per page p50 / p99', 'errors/listings', '×D p50 / p99'], rows),
    '',
    ...toolList.unsupported.map((entry) => `- ${systemName(results, entry.system)}: not expressible — ${entry.reason}.`),
    '',
    ...errorLines(toolList.runs, (run) => `${systemName(results, run.system)}, ${variantLabel[run.variant]}`),
    ...surfaceListLines(results, toolList),
  ];
}

/** The gateway's prompts/list and resources/list of the all-up route (docs/catalog.md). */
function surfaceListLines(results: BenchResults, toolList: ToolListResults): string[] {
  const rows = (['prompts/list', 'resources/list'] as const).flatMap((method) => {
    const f = surfaceListFigures(toolList, method);
    if (!f) return [];
    return [[`${method} (${f.entries.toLocaleString('en-US')} entries)`, cell(f.latencyMs.p50, f.repetitions), cell(f.latencyMs.p99, f.repetitions), cell(f.latencyMs.max, f.repetitions), String(f.pagesPerListing), `${num(f.pageLatencyMs.p50.median)} / ${num(f.pageLatencyMs.p99.median)}`, `${f.errors}/${f.sent}`]];
  });
  if (rows.length === 0) return [];
  return [
    '',
    `The same route's prompts/list and resources/list, answered by C from its catalog (all backends up, ${results.settings.toolList.fleet.promptsPerBackend} prompts and ${results.settings.toolList.fleet.resourcesPerBackend} resources per backend; the same rate and measurement). No other system federates them: B forwards, D's mcp_router answers resources/list with an empty list, E fans out tools/list only.`,
    '',
    ...table(['list', 'p50', 'p99', 'max', 'pages', 'per page p50 / p99', 'errors/listings'], rows),
    ...errorLines(toolList.surfaceRuns ?? [], (run) => `C, ${run.method}`),
  ];
}

/** Median CPU µs per call of the gateway's processes over the repetitions. */
function cpuCell(runs: TracingRun[]): string {
  return ['envoy', 'sidecar', 'control-plane'].map((name) => (runs.length ? num(spreadOf(runs.map((run) => run.cpuMicrosPerCall[name])).median, 0) : '–')).join(' / ');
}

/** The spans a variant's Envoy exported over the scenario, and per request it served. */
function spansCell(tracing: TracingResults, variant: string): string {
  const spans = tracing.envoySpansSent[variant] ?? 0;
  const requests = tracing.envoyRequestsServed[variant] ?? 0;
  return requests > 0 ? `${spans} (${(spans / requests).toFixed(3)} per request)` : String(spans);
}

/** A figure of each repetition of a variant at a load. */
function perRepetition(tracing: TracingResults, variant: string, load: string, pick: (run: TracingRun) => number): RepeatedValue[] {
  return tracing.runs.filter((run) => run.variant === variant && run.load === load).map((run) => ({ repetition: run.repetition, value: pick(run) }));
}

/** CPU µs per call a variant adds over tracing off, paired by repetition (pairedAddedMedian). */
function addedOverOff(tracing: TracingResults, variant: string, load: string, pick: (run: TracingRun) => number): string {
  return variant === 'off' ? '' : signedMicros(pairedAddedMedian(perRepetition(tracing, 'off', load, pick), perRepetition(tracing, variant, load, pick)));
}

/** A variant's figure as a multiple of tracing off's, paired by repetition (pairedRatioMedian). */
function pairedTimesOff(tracing: TracingResults, variant: string, load: string, pick: (run: TracingRun) => number): string {
  const ratio = pairedRatioMedian(perRepetition(tracing, 'off', load, pick), perRepetition(tracing, variant, load, pick));
  return ratio === undefined ? 'n/a' : `${ratio.toFixed(2)}×`;
}

/**
 * Where both cores went at saturation, per call: the systems' core (each process counted, softirq, what
 * no row counts, idle) and the load generator's (the load generator, Jaeger, idle, and how long the load
 * generator waited for its core). Idle on the systems' core, or a large uncounted share, says the
 * measured saturation is not the gateway's cost alone.
 */
function tracingCoreLines(tracing: TracingResults): string[] {
  const runs = tracing.runs.filter((run) => run.load === SATURATION);
  if (runs.length === 0) return [];
  const median = (variant: string, pick: (run: TracingRun) => number) => num(spreadOf(runs.filter((run) => run.variant === variant).map(pick)).median, 0);
  const rows = tracing.variants.map(({ id }) => [
    id,
    ...SYSTEMS_CORE_ROWS.map((name) => median(id, (run) => run.cpuMicrosPerCall[name] ?? 0)),
    median(id, systemsCoreMicrosPerCall),
    addedOverOff(tracing, id, SATURATION, systemsCoreMicrosPerCall),
    median(id, (run) => run.cores.systems.busy - systemsCoreMicrosPerCall(run)),
    median(id, (run) => run.cores.systems.idle),
    median(id, (run) => run.cpuMicrosPerCall['load generator'] ?? 0),
    median(id, (run) => run.cpuMicrosPerCall.jaeger ?? 0),
    median(id, (run) => run.cores.loadGenerator.idle),
    median(id, (run) => run.loadGeneratorRunQueueWaitMicros),
    id === 'off' ? '' : pairedTimesOff(tracing, id, SATURATION, (run) => 1 / systemsCoreMicrosPerCall(run)),
  ]);
  return [
    "Where the cores went at saturation, µs per answered call (medians over repetitions; /proc/<pid>/stat per process, /proc/stat per core). The systems' core: each process, softirq (loopback delivery, the spans' export included), their sum, what the core was busy with that no row counts (other work on the machine), and idle. The load generator's core: the load generator, Jaeger, idle, and the time the load generator's event loop waited, runnable, for its core. The last column is the saturation the systems' CPU per call alone implies (off's sum over the variant's, paired by repetition): what the measured ×off would be if the systems' core did nothing else and never idled.",
    '',
    ...table(
      [
        'tracing',
        'Envoy',
        'sidecar',
        'control plane',
        'Redis',
        'Portal',
        'backend',
        'softirq',
        "sum on the systems' core",
        'sum added over off (paired)',
        "systems' core busy, no row",
        "systems' core idle",
        'load generator',
        'Jaeger',
        "load generator's core idle",
        'load generator waited for its core',
        '×off implied by the sum',
      ],
      rows,
    ),
    '',
  ];
}

/** How many of a run's uncounted threads the per-repetition table names. */
const UNCOUNTED_NAMED = 4;

/**
 * The systems' core at saturation run by run, with what ran there besides the counted processes, by
 * thread (every thread's schedstat): a burst of other work during one repetition shows as that run's
 * "no row", and the medians of the table above cannot say whether it was tracing's or the machine's.
 */
function tracingUncountedLines(tracing: TracingResults): string[] {
  const runs = tracing.runs.filter((run) => run.load === SATURATION && run.uncountedOnSystemsCore !== undefined);
  if (runs.length === 0) return [];
  const rows = [...runs]
    .sort((a, b) => a.repetition - b.repetition)
    .map((run) => [
      String(run.repetition),
      run.variant,
      num(run.throughput, 0),
      num(systemsCoreMicrosPerCall(run), 0),
      num(run.cores.systems.busy - systemsCoreMicrosPerCall(run), 0),
      num(Object.values(run.uncountedOnSystemsCore).reduce((sum, micros) => sum + micros, 0), 0),
      Object.entries(run.uncountedOnSystemsCore)
        .slice(0, UNCOUNTED_NAMED)
        .map(([name, micros]) => `${name} ${num(micros, 1)}`)
        .join(', '),
    ]);
  return [
    "The systems' core at saturation, run by run (µs per answered call): the counted sum, the core's busy time no row counts (/proc/stat), the threads outside the counted processes that ran there (every thread's /proc/<pid>/task/<tid>/schedstat, by the core each was last on; the other variants' idle gateways are named so), and the largest of them. Softirq run in a process's own context is in that process's row, and a thread that ended during the run is in neither column.",
    '',
    ...table(['repetition', 'tracing', 'ok/s', 'counted sum', 'busy, no row', 'threads not counted', 'largest threads not counted'], rows),
    '',
  ];
}

function tracingSection(results: BenchResults, tracing: TracingResults): string[] {
  const loads = [String(results.settings.tracing.ratePerSecond), SATURATION];
  const rows: string[][] = [];
  for (const load of loads) {
    const off = tracingFigures(tracing, 'off', load);
    for (const variant of tracing.variants) {
      const f = tracingFigures(tracing, variant.id, load);
      if (!f) continue;
      rows.push([
        load === SATURATION ? `saturation (${results.settings.toolCall.saturation.concurrency} clients)` : `${load} req/s`,
        variant.id,
        cell(f.latencyMs.p50, f.repetitions),
        cell(f.latencyMs.p99, f.repetitions),
        cell(f.throughput, f.repetitions),
        `${f.errors}/${f.sent}`,
        `${times(f.latencyMs.p50.median, off?.latencyMs.p50.median)} / ${times(f.latencyMs.p99.median, off?.latencyMs.p99.median)}`,
        pairedTimesOff(tracing, variant.id, load, (run) => run.throughput),
        cpuCell(tracing.runs.filter((run) => run.variant === variant.id && run.load === load)),
        addedOverOff(tracing, variant.id, load, (run) => run.cpuMicrosPerCall.envoy),
        spansCell(tracing, variant.id),
      ]);
    }
  }
  return [
    '## 5. Tracing (issue 15)',
    '',
    `tools/call through gateways that differ only in tracing (${tracing.setup}). Median over repetitions (min–max); "×off ok/s" is the median over repetitions of the ratio to tracing off within each repetition, "added over off (paired)" likewise of the difference (both steadier on a shared machine than figures of the medians); the p50 / p99 ratios are of the medians.`,
    '',
    ...table(['load', 'tracing', 'p50', 'p99', 'ok/s', 'errors/sent', '×off p50 / p99', '×off ok/s', 'CPU µs per call: Envoy / sidecar / control plane', 'Envoy CPU µs per call added over off (paired)', 'spans Envoy exported (whole scenario)'], rows),
    '',
    ...errorLines(tracing.runs, (run) => `tracing ${run.variant} at ${run.load === SATURATION ? SATURATION : `${run.load} req/s`}`),
    ...tracingCoreLines(tracing),
    ...tracingUncountedLines(tracing),
    ...attributeCostLines(tracing.attributeCosts, results.settings.repetitions),
  ];
}

/** What each piece of Envoy's tracing costs by itself: each variant adds one piece to the one above. */
function attributeCostLines(runs: AttributeCostRun[], repetitions: number): string[] {
  let previous: number | undefined;
  const rows = ATTRIBUTE_VARIANTS.map((variant) => {
    const own = runs.filter((run) => run.variant === variant);
    const micros = spreadOf(own.map((run) => run.envoyMicrosPerRequest));
    const added = previous === undefined ? '' : `${micros.median - previous >= 0 ? '+' : ''}${num(micros.median - previous, 1)}`;
    previous = micros.median;
    return [variant, cell(micros, repetitions), added, cell(spreadOf(own.map((run) => run.throughput)), repetitions)];
  });
  return [
    "What each piece costs by itself: Envoy alone answering directly (no MCP filters, no upstream), closed loop, its CPU time per request (median over repetitions, min–max); each row adds one piece to the row above (the last takes sampling to 0).",
    '',
    ...table(['Envoy', 'CPU µs per request', 'added', 'requests/s'], rows),
    '',
  ];
}

function configurationSection(results: BenchResults, configuration: ConfigurationResults): string[] {
  const c = configuration;
  const reps = c.registryChange.trials.length;
  const build = c.snapshotBuildInProcessMs;
  const memory = (label: string, m: typeof c.memoryAfter) => [label, num(m.controlPlaneMb, 0), num(m.sidecarMb, 0), num(m.envoyMb, 0)];
  return [
    '## 4. Configuration (issue 3)',
    '',
    `Only C has a control plane; B and D are static Envoy bootstraps and E a static file, where a change means a restart — so no ratios here. Gateway: ${c.settings.registrySource}, ${c.settings.xds}, catalog refresh every ${c.settings.catalogRefreshMs / 60000} min (so that only the fetch of new Tool Services falls inside the measurement).`,
    '',
    `Registry change → new route answering through Envoy (${reps} changes, each a new route with a new Tool Service: CDS + RDS + catalog), ms median (min–max):`,
    '',
    ...table(['tools/list lists its tools', 'tools/call answers'], [[cell(c.registryChange.toolsListMs, reps), cell(c.registryChange.toolsCallMs, reps)]]),
    '',
    `At ${c.size.routes.toLocaleString('en-US')} routes × ${c.size.toolServicesPerRoute} Tool Services (${c.size.toolServices.toLocaleString('en-US')} Tool Service ids, hence clusters, sharing ${c.size.backendUrls} real backends of ${c.size.toolsPerBackend} tools):`,
    '',
    ...table(
      ['figure', 'value'],
      [
        ['snapshot build in process: validate / IR / translate / encode, ms', `${num(build.validate.median)} / ${num(build.ir.median)} / ${num(build.translate.median)} / ${num(build.encode.median)}`],
        ['snapshot build in process: total, ms (min–max)', cell(build.total, results.settings.configuration.buildRepetitions)],
        ['control plane metric mcpgw_xds_snapshot_build_seconds (mean of the change), ms', num(c.snapshotBuildMetricMs)],
        ['Portal change → Envoy ACKed clusters and routes (wall clock), ms', num(c.changeToAckMs)],
        ['… of which: bench → dev Portal PUT answered (the Portal has the new document), ms', num(c.changeChainMs.portalPut)],
        ...Object.entries(c.changeChainMs.steps).map(([step, figure]) => [
          `… of which: control plane step ${step} (mcpgw_registry_update_step_seconds), ms`,
          figure.observations > 0 ? `${num(figure.ms)} (${figure.observations}×)` : 'not run',
        ]),
        ['… of which: push-to-ACK RouteConfiguration, ms', num(c.changeChainMs.routesPushToAck)],
        ['… of which: none of these (waits between steps, other work of the event loops, the ACK on its way back), ms', num(c.changeChainMs.notItemised)],
        ['CPU from the Portal change to the ACK: dev Portal / control plane / Envoy, ms', `${num(c.cpuMsToAck.portal)} / ${num(c.cpuMsToAck.controlPlane)} / ${num(c.cpuMsToAck.envoy)}`],
        ...Object.entries(c.pushToAckMetric).map(([type, figure]) => [`push-to-ACK ${type} (mcpgw_xds_push_to_ack_seconds), ms`, figure.acks > 0 ? `${num(figure.meanMs)} (${figure.acks} ACK)` : 'no push (unchanged)']),
        ['NACKs', String(c.nacks)],
        ['Portal change → last route answering tools/call, ms', c.changeToLastRouteServingMs === null ? 'not within the timeout' : num(c.changeToLastRouteServingMs)],
        ['sidecar catalog stream: breaks after the change (last reason)', c.sidecarCatalogStream.breaks ? `${c.sidecarCatalogStream.breaks} (${c.sidecarCatalogStream.lastReason})` : '0'],
        ['catalog: route backends after the change (ok / stale / missing)', `${c.catalog.states.ok} / ${c.catalog.states.stale} / ${c.catalog.states.missing}, ${c.catalog.refreshesAnswered} Tool Service refreshes ended (answered or timed out); ${c.catalog.settleMs === null ? 'not all served within the timeout' : `all served after ${num(c.catalog.settleMs)} ms`}`],
      ],
    ),
    '',
    'Resident memory (RSS, MB):',
    '',
    ...table(['when', 'control plane', 'sidecar', 'Envoy'], [memory('small registry', c.memoryBefore), memory(`${c.size.routes.toLocaleString('en-US')} routes`, c.memoryAfter)]),
    '',
    `Envoy after the last route serves (RSS each second for 20 s; then tcmalloc's allocated and heap size from the admin /memory; its route table as dumped, ${c.envoySettled.routes.toLocaleString('en-US')} routes):`,
    '',
    ...table(
      ['RSS median (min–max), MB', 'RSS at 20 s, MB', 'allocated, MB', 'heap size, MB', 'route table, JSON MB'],
      [[cell(c.envoySettled.rssMb, 20), num(c.envoySettled.lastRssMb, 0), num(c.envoySettled.allocatedMb, 1), num(c.envoySettled.heapSizeMb, 1), num(c.envoySettled.routeTableJsonBytes / 1024 / 1024, 2)]],
    ),
    '',
  ];
}

export function renderMarkdown(results: BenchResults, chartFile: string | undefined): string {
  return [
    `# MCP gateway benchmark — ${results.mode} run`,
    '',
    `Run ${results.startedAt} → ${results.finishedAt} (${Math.round(results.durationSeconds / 60)} min) with \`scripts/bench.sh${results.mode === 'quick' ? ' --quick' : ''}${results.only ? ` --only ${results.only}` : ''}\`.${results.systems.length > 0 ? ' Systems: A backend direct (the floor), B plain Envoy, C this gateway, D Envoy 1.40 mcp_router, E naive Node proxy — all on 127.0.0.1.' : ''}`,
    '',
    ...(chartFile ? [`![latency distributions](${chartFile})`, ''] : []),
    ...targetsSection(results),
    ...(results.toolCall ? toolCallSection(results, results.toolCall) : []),
    ...(results.streaming ? streamingSection(results, results.streaming) : []),
    ...(results.toolList ? toolListSection(results, results.toolList) : []),
    ...(results.configuration ? configurationSection(results, results.configuration) : []),
    ...(results.tracing ? tracingSection(results, results.tracing) : []),
    ...environmentSection(results),
  ].join('\n');
}
