import { LatencySummary, Spread, spreadOf, spreadOfSummaries } from '../load/stats';
import { ConfigurationResults } from '../scenarios/configuration';
import { LateFrames, StreamingResults } from '../scenarios/streaming';
import { ToolCallResults } from '../scenarios/tool-call';
import { ToolListResults } from '../scenarios/tool-list';

/** Scenarios `scripts/bench.sh --only <name>` runs alone: tools/list (3), tracing (5). */
export const SCENARIOS_RUN_ALONE = ['tool-list', 'configuration', 'tracing', 'streaming'] as const;
export type ScenarioRunAlone = (typeof SCENARIOS_RUN_ALONE)[number];
import { TracingResults } from '../scenarios/tracing';
import { BenchSettings } from '../settings';
import { CpuPlan } from '../systems/process-group';
import { SystemId } from '../systems/systems';
import { ListVariant } from '../systems/topology';
import { Environment } from './environment';

/** Everything one run wrote to bench/results/<name>.json. */
export interface BenchResults {
  schemaVersion: 1;
  mode: BenchSettings['mode'];
  startedAt: string;
  finishedAt: string;
  durationSeconds: number;
  environment: Environment;
  cpuPlan: CpuPlan;
  /**
   * The machine's load average after each phase: the bench shares its machine, and a load well
   * above what the bench itself puts on (about 2 with every system pinned) flags numbers to distrust.
   */
  loadAverages: { after: string; oneMinute: number; fiveMinutes: number }[];
  settings: BenchSettings;
  /** The scenario run alone (`--only`), if one was. */
  only?: ScenarioRunAlone;
  systems: { id: SystemId; name: string; setup: string }[];
  /** Scenarios 1, 2 and 4: absent in a run of one scenario alone (`--only tool-list`, `--only tracing`). */
  toolCall?: ToolCallResults;
  streaming?: StreamingResults;
  /** Scenario 3: absent in a run of the configuration or tracing scenario alone. */
  toolList?: ToolListResults;
  configuration?: ConfigurationResults;
  tracing?: TracingResults;
  targets: TargetAssessment[];
}

export interface TargetAssessment {
  target: string;
  measured: string;
  /** null when the run could not measure it. */
  met: boolean | null;
}

/** A latency summary over repetitions: each figure as median and range across them. */
export type LatencySpread = Record<keyof LatencySummary, Spread>;

export interface RepeatedFigures {
  latencyMs: LatencySpread;
  throughput: Spread;
  sent: number;
  errors: number;
  repetitions: number;
}

function repeated(runs: { latencyMs: LatencySummary; throughput: number; sent: number; ok: number }[]): RepeatedFigures | undefined {
  if (runs.length === 0) return undefined;
  return {
    latencyMs: spreadOfSummaries(runs.map((run) => run.latencyMs)),
    throughput: spreadOf(runs.map((run) => run.throughput)),
    sent: runs.reduce((sum, run) => sum + run.sent, 0),
    errors: runs.reduce((sum, run) => sum + run.sent - run.ok, 0),
    repetitions: runs.length,
  };
}

export function toolCallFigures(results: ToolCallResults, system: SystemId, load: string): RepeatedFigures | undefined {
  return repeated(results.runs.filter((run) => run.system === system && run.load === load));
}

export function tracingFigures(results: TracingResults, variant: string, load: string): RepeatedFigures | undefined {
  return repeated(results.runs.filter((run) => run.variant === variant && run.load === load));
}

export function toolListFigures(
  results: ToolListResults | undefined,
  system: SystemId,
  variant: ListVariant,
): (RepeatedFigures & { pageLatencyMs: LatencySpread; pagesPerListing: number }) | undefined {
  if (!results) return undefined;
  const runs = results.runs.filter((run) => run.system === system && run.variant === variant);
  const figures = repeated(runs);
  if (!figures) return undefined;
  return { ...figures, pageLatencyMs: spreadOfSummaries(runs.map((run) => run.pageLatencyMs)), pagesPerListing: Math.max(...runs.map((run) => run.pagesPerListing)) };
}

/** The gateway's prompts/list or resources/list over the repetitions (undefined: not measured in this run). */
export function surfaceListFigures(
  results: ToolListResults | undefined,
  method: 'prompts/list' | 'resources/list',
): (RepeatedFigures & { pageLatencyMs: LatencySpread; pagesPerListing: number; entries: number }) | undefined {
  const runs = (results?.surfaceRuns ?? []).filter((run) => run.method === method);
  const figures = repeated(runs);
  if (!figures) return undefined;
  return {
    ...figures,
    pageLatencyMs: spreadOfSummaries(runs.map((run) => run.pageLatencyMs)),
    pagesPerListing: Math.max(...runs.map((run) => run.pagesPerListing)),
    entries: runs[0].entries,
  };
}

export interface StreamingFigures {
  firstFrameMs: LatencySpread;
  laterFramesMs: LatencySpread;
  requestToFirstFrameMs: LatencySpread;
  /** Summed over repetitions. */
  lateFrames: LateFrames;
  framesReceived: number;
  framesExpected: number;
  errors: number;
}

export function streamingFigures(results: StreamingResults, system: SystemId): StreamingFigures | undefined {
  const runs = results.runs.filter((run) => run.system === system);
  if (runs.length === 0) return undefined;
  return {
    firstFrameMs: spreadOfSummaries(runs.map((run) => run.firstFrameMs)),
    laterFramesMs: spreadOfSummaries(runs.map((run) => run.laterFramesMs)),
    requestToFirstFrameMs: spreadOfSummaries(runs.map((run) => run.requestToFirstFrameMs)),
    lateFrames: {
      late: runs.reduce((sum, run) => sum + run.lateFrames.late, 0),
      atOwnCallEnd: runs.reduce((sum, run) => sum + run.lateFrames.atOwnCallEnd, 0),
      nearAnotherCallStart: runs.reduce((sum, run) => sum + run.lateFrames.nearAnotherCallStart, 0),
    },
    framesReceived: runs.reduce((sum, run) => sum + run.framesReceived, 0),
    framesExpected: runs.reduce((sum, run) => sum + run.framesExpected, 0),
    errors: runs.reduce((sum, run) => sum + Object.values(run.errors).reduce((a, b) => a + b, 0), 0),
  };
}
