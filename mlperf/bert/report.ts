// The run report: one self-contained HTML file (inline SVG, no scripts, no web fonts) with the
// curves of one or more BERT runs, read from MLPerf logs and from the trainer's console logs.
//
//   npx tsx mlperf/bert/report.ts LOG... [-o report.html] [--title TEXT]
//
// What is read from a log (any mix, in one file; other lines are ignored):
// - `:::MLLOG {json}` records (mllog.ts): hyper-parameters, init/run start and stop,
//   eval_accuracy with its epoch_num (= samples trained), the seed;
// - the trainer's per-step line, written by formatStepLine:
//     step 12 | 792 samples | 345.6 ms (host 1.2 ms, data 0.4 ms, device 344.0 ms) | loss 7.1234 | lr 1.20e-4 | 0.52 GB
//     | 123.4 GFLOP/s
//   `samples` counts every sample trained so far, this step's included; `ms` is the wall time
//   of the step, split into host overhead, waiting for data and device time; GB is device
//   memory in use; throughput (samples/s) is derived from samples per step and ms;
// - the trainer's eval line, written by formatEvalLine (used when the log has no MLLOG
//   eval_accuracy, e.g. LOGMLPERF=0):
//     eval step 2272 | 149952 samples | masked-LM accuracy 0.720385 | loss 1.4567 | 9.6 s
// - the trainer's knob lines: `HParam: "BS": 66`.
// Lines may carry a prefix (a timestamp, a progress bar ended by \r): the patterns are found anywhere in a line.
// Step and eval lines between init_start and init_stop (or, without MLLOG records, after the trainer's
// `warm-up (init phase, ...` line) are the init phase's warm-up on fake data: the report shows them in a section of
// their own, never in the run's curves. Step time, throughput and compute rate are
// drawn on axes fitted to the bulk of the steps (yRange); the few steps beyond (compiles) are marked at the edge.
import { readFileSync, renameSync, writeFileSync, rmSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { MLLOG_KEYS as K, type ParsedMllog, parseMllog } from "./mllog.ts";
import { reportFailure } from "./exit_status.ts";

export class ReportError extends Error {
  override name = "ReportError";
}

/** One training step as the trainer measured it. */
export interface StepStats {
  step: number;
  samples: number;
  totalMs: number;
  hostMs: number;
  dataMs: number;
  deviceMs: number;
  loss: number;
  learningRate: number;
  memoryGB: number;
  gflops: number;
  /** Time in the gradient all-reduce between ranks (data-parallel runs only; not in host or device). */
  reduceMs?: number;
}

/** One evaluation over the eval set. */
export interface EvalStats {
  step: number;
  samples: number;
  maskedLmAccuracy: number;
  loss: number;
  seconds: number;
}

/** The console line for a training step; parseStepLine reads it back. */
export function formatStepLine(s: StepStats): string {
  const ms = (value: number) => `${value.toFixed(1)} ms`;
  return (
    `step ${s.step} | ${s.samples} samples | ${ms(s.totalMs)} (host ${ms(s.hostMs)}, data ${ms(s.dataMs)}, device ${ms(s.deviceMs)})` +
    ` | loss ${s.loss.toFixed(4)} | lr ${s.learningRate.toExponential(2)} | ${s.memoryGB.toFixed(2)} GB | ${s.gflops.toFixed(1)} GFLOP/s` +
    (s.reduceMs === undefined ? "" : ` | all-reduce ${ms(s.reduceMs)}`)
  );
}

/** The console line for an evaluation; parseEvalLine reads it back. */
export function formatEvalLine(e: EvalStats): string {
  return `eval step ${e.step} | ${e.samples} samples | masked-LM accuracy ${e.maskedLmAccuracy.toFixed(6)} | loss ${e.loss.toFixed(4)} | ${e.seconds.toFixed(1)} s`;
}

const NUMBER = String.raw`(-?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|NaN|Infinity))`;
const STEP_LINE = new RegExp(
  String.raw`\bstep (\d+) \| (\d+) samples \| ${NUMBER} ms \(host ${NUMBER} ms, data ${NUMBER} ms, device ${NUMBER} ms\)` +
    String.raw` \| loss ${NUMBER} \| lr ${NUMBER} \| ${NUMBER} GB \| ${NUMBER} GFLOP/s(?: \| all-reduce ${NUMBER} ms)?`,
);
const EVAL_LINE = new RegExp(
  String.raw`\beval step (\d+) \| (\d+) samples \| masked-LM accuracy ${NUMBER} \| loss ${NUMBER} \| ${NUMBER} s\b`,
);
const HPARAM_LINE = /\bHParam: "([^"]+)": (.*)$/;
/** The trainer's first line of each phase (train.ts phaseLine): the phases of a log without MLLOG records. */
const WARM_UP_PHASE_LINE = /\bwarm-up \(init phase\b/;
const RUN_PHASE_LINE = /\btraining \(run phase\)/;

export function parseStepLine(line: string): StepStats | null {
  const m = STEP_LINE.exec(line);
  if (m === null) return null;
  const [step, samples, totalMs, hostMs, dataMs, deviceMs, loss, learningRate, memoryGB, gflops, reduceMs] = m
    .slice(1)
    .map((v) => (v === undefined ? undefined : Number(v))) as number[];
  return {
    ...(reduceMs === undefined ? {} : { reduceMs }),
    step: step!,
    samples: samples!,
    totalMs: totalMs!,
    hostMs: hostMs!,
    dataMs: dataMs!,
    deviceMs: deviceMs!,
    loss: loss!,
    learningRate: learningRate!,
    memoryGB: memoryGB!,
    gflops: gflops!,
  };
}

export function parseEvalLine(line: string): EvalStats | null {
  const m = EVAL_LINE.exec(line);
  if (m === null) return null;
  const [step, samples, maskedLmAccuracy, loss, seconds] = m.slice(1).map(Number) as number[];
  return { step: step!, samples: samples!, maskedLmAccuracy: maskedLmAccuracy!, loss: loss!, seconds: seconds! };
}

/** The init phase's untimed warm-up: steps and an eval on fake data that compile every kernel (not the run). */
export interface WarmUp {
  steps: StepStats[];
  /** Accuracy on fake data: it shows the eval step ran, and is no result. */
  evals: EvalStats[];
}

/** Everything the report shows about one run (one log file). */
export interface RunLog {
  name: string;
  /** The run's training steps (after run_start, or all of them in a log without MLLOG phase records). */
  steps: StepStats[];
  evals: { samples: number; maskedLmAccuracy: number }[];
  warmUp: WarmUp;
  /** MLLOG hyper-parameter and submission records, key -> value (strings as they are, the rest as JSON). */
  mlperfParameters: Map<string, string>;
  /** The trainer's `HParam:` knob lines, name -> value text. */
  knobs: Map<string, string>;
  initStartMs: number | null;
  initStopMs: number | null;
  runStartMs: number | null;
  runStopMs: number | null;
  status: string | null;
  unreadableRecords: number;
}

/** MLLOG keys that mark progress rather than describe the run. */
const PROGRESS_KEYS: Set<string> = new Set([
  K.CACHE_CLEAR,
  K.INIT_START,
  K.INIT_STOP,
  K.RUN_START,
  K.RUN_STOP,
  K.EPOCH_START,
  K.EPOCH_STOP,
  K.BLOCK_START,
  K.BLOCK_STOP,
  K.EVAL_START,
  K.EVAL_STOP,
  K.EVAL_ACCURACY,
]);

/** Where each phase of the log starts: line numbers of init_start (warm-up), init_stop and run_start (the run). */
function phaseStarts(records: ParsedMllog["records"]): { lineNumber: number; warmUp: boolean }[] {
  return records
    .filter(({ fields }) => fields.key === K.INIT_START || fields.key === K.INIT_STOP || fields.key === K.RUN_START)
    .map(({ fields, lineNumber }) => ({ lineNumber, warmUp: fields.key === K.INIT_START }));
}

/**
 * Reads one log's text; `name` labels the run. Steps and evals between init_start and init_stop (or after the
 * trainer's warm-up phase line, up to its run phase line) are the warm-up.
 */
export function parseRunLog(text: string, name: string): RunLog {
  const run: RunLog = {
    name,
    steps: [],
    evals: [],
    warmUp: { steps: [], evals: [] },
    mlperfParameters: new Map(),
    knobs: new Map(),
    initStartMs: null,
    initStopMs: null,
    runStartMs: null,
    runStopMs: null,
    status: null,
    unreadableRecords: 0,
  };
  const parsed = parseMllog(text);
  const phases = phaseStarts(parsed.records);
  const consoleEvals: RunLog["evals"] = [];
  let inWarmUp = false;
  text.split(/\r\n|\n|\r/).forEach((line, lineIndex) => {
    while (phases.length > 0 && phases[0]!.lineNumber <= lineIndex + 1) inWarmUp = phases.shift()!.warmUp;
    if (WARM_UP_PHASE_LINE.test(line)) inWarmUp = true;
    else if (RUN_PHASE_LINE.test(line)) inWarmUp = false;
    const step = parseStepLine(line);
    if (step !== null) (inWarmUp ? run.warmUp.steps : run.steps).push(step);
    const evaluation = parseEvalLine(line);
    if (evaluation !== null && inWarmUp) run.warmUp.evals.push(evaluation);
    else if (evaluation !== null)
      consoleEvals.push({ samples: evaluation.samples, maskedLmAccuracy: evaluation.maskedLmAccuracy });
    const knob = HPARAM_LINE.exec(line);
    if (knob !== null) run.knobs.set(knob[1]!, knob[2]!.trim());
  });
  run.unreadableRecords = parsed.problems.length;
  for (const { fields } of parsed.records) {
    const key = fields.key;
    const time = typeof fields.time_ms === "number" ? fields.time_ms : Number(fields.time_ms);
    const metadata = (typeof fields.metadata === "object" && fields.metadata !== null ? fields.metadata : {}) as {
      [name: string]: unknown;
    };
    if (typeof key !== "string" || !Number.isFinite(time)) {
      run.unreadableRecords++;
      continue;
    }
    if (key === K.INIT_START) run.initStartMs = Math.min(run.initStartMs ?? Infinity, time);
    else if (key === K.INIT_STOP) run.initStopMs = time;
    else if (key === K.RUN_START) run.runStartMs = time;
    else if (key === K.RUN_STOP) {
      run.runStopMs = time;
      run.status = typeof metadata.status === "string" ? metadata.status : null;
    } else if (key === K.EVAL_ACCURACY && typeof fields.value === "number" && typeof metadata.epoch_num === "number") {
      run.evals.push({ samples: metadata.epoch_num, maskedLmAccuracy: fields.value });
    } else if (!PROGRESS_KEYS.has(key)) {
      run.mlperfParameters.set(
        key,
        typeof fields.value === "string" ? fields.value : (JSON.stringify(fields.value) ?? "null"),
      );
    }
  }
  if (run.evals.length === 0) run.evals = consoleEvals;
  return run;
}

/** Minutes from init_start to init_stop: the untimed init phase (warm-up and compiles). */
export function initMinutes(run: RunLog): number | null {
  return run.initStartMs !== null && run.initStopMs !== null ? (run.initStopMs - run.initStartMs) / 60e3 : null;
}

/** Minutes from run_start to run_stop: the MLPerf score of one run. */
export function timeToTrainMinutes(run: RunLog): number | null {
  return run.runStartMs !== null && run.runStopMs !== null ? (run.runStopMs - run.runStartMs) / 60e3 : null;
}

/** MLPerf scoring of a set: drop the fastest and slowest run, average the rest; a run that did
 *  not succeed counts as infinitely slow, so a second one leaves the set unscored (null). */
export function olympicMeanMinutes(runs: RunLog[]): number | null {
  if (runs.length < 3) return null;
  const times = runs
    .map((r) => (r.status === "success" ? (timeToTrainMinutes(r) ?? Infinity) : Infinity))
    .sort((a, b) => a - b);
  const kept = times.slice(1, -1);
  if (kept.some((t) => !Number.isFinite(t))) return null;
  return kept.reduce((a, b) => a + b, 0) / kept.length;
}

// ---------------------------------------------------------------- rendering

const PALETTE = [
  "#4e79a7",
  "#f28e2b",
  "#e15759",
  "#59a14f",
  "#b07aa1",
  "#76b7b2",
  "#edc948",
  "#ff9da7",
  "#9c755f",
  "#7f7f7f",
];
const colorOf = (runIndex: number) => PALETTE[runIndex % PALETTE.length]!;
const TARGET_ACCURACY = 0.72;
const MAX_POINTS_PER_SERIES = 600;

const escapeXml = (text: string) =>
  text.replace(/[&<>"']/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch]!);

interface Point {
  x: number;
  y: number;
}

interface Series {
  runIndex: number;
  points: Point[];
  /** Draw a dot at every point, with a tooltip (few points, like evaluations). */
  markers?: boolean;
}

interface ChartSpec {
  title: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  formatY: (value: number) => string;
  /** Horizontal reference line. */
  target?: { y: number; label: string };
  /** Fit the y range to the bulk of the values (yRange), marking the few outside, so that spikes do not flatten
   *  the curve. */
  robustY?: boolean;
  empty: string;
}

/** Averages consecutive points so a 50,000-step run stays a light SVG. */
function downsample(points: Point[]): Point[] {
  if (points.length <= MAX_POINTS_PER_SERIES) return points;
  const chunk = Math.ceil(points.length / MAX_POINTS_PER_SERIES);
  const result: Point[] = [];
  for (let i = 0; i < points.length; i += chunk) {
    const group = points.slice(i, i + chunk).filter((p) => Number.isFinite(p.y));
    if (group.length === 0) continue;
    result.push({
      x: group.reduce((a, p) => a + p.x, 0) / group.length,
      y: group.reduce((a, p) => a + p.y, 0) / group.length,
    });
  }
  return result;
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.round(q * (sorted.length - 1))))]!;
}

/** About `count` round tick values covering [low, high]. */
function niceTicks(low: number, high: number, count: number): number[] {
  const span = high - low;
  const raw = span / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const candidates = [1, 2, 2.5, 5, 10].map((f) => f * magnitude);
  const step = candidates.reduce((best, c) => (Math.abs(span / c - count) < Math.abs(span / best - count) ? c : best));
  const ticks: number[] = [];
  for (let i = Math.ceil(low / step - 1e-9); i <= Math.floor(high / step + 1e-9); i++) ticks.push(i * step);
  return ticks;
}

/** 1.5M, 150k, 66: sample counts and throughputs. */
export function formatCount(value: number): string {
  const abs = Math.abs(value);
  const trim = (text: string) => text.replace(/\.0+$|(\.\d*?)0+$/, "$1");
  if (abs >= 1e9) return `${trim((value / 1e9).toFixed(2))}G`;
  if (abs >= 1e6) return `${trim((value / 1e6).toFixed(2))}M`;
  if (abs >= 1e3) return `${trim((value / 1e3).toFixed(1))}k`;
  return String(Number(value.toPrecision(3)));
}

const formatRate = (value: number) => (value === 0 ? "0" : value.toExponential(1));
const formatPlain = (value: number) => String(Number(value.toPrecision(4)));

/**
 * The y range a chart shows: every value, or with `robust` the values inside Tukey's far-out fences (3 interquartile
 * ranges past the middle half, and never nearer than the median), so that a few spikes (compiles, a slow step)
 * do not flatten the curve. The values outside are marked at the plot's edge.
 */
export function yRange(values: number[], robust: boolean): { low: number; high: number } {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  const low = sorted[0]!;
  const high = sorted[sorted.length - 1]!;
  if (!robust) return { low, high };
  const q1 = quantile(sorted, 0.25);
  const q3 = quantile(sorted, 0.75);
  const reach = Math.max(3 * (q3 - q1), Math.abs(quantile(sorted, 0.5)));
  return { low: Math.max(low, q1 - reach), high: Math.min(high, q3 + reach) };
}

/** Off-axis points a chart marks, at most this many (the farthest out). */
const MAX_OFF_AXIS_MARKERS = 100;

interface OffAxisPoint extends Point {
  runIndex: number;
  above: boolean;
}

/** A run's points outside [low, high], drawn as triangles at the edge they passed; and the chart's note on them. */
function renderOffAxis(
  offAxis: OffAxisPoint[],
  spec: ChartSpec,
  range: { low: number; high: number },
  toX: (x: number) => number,
  plot: { top: number; bottom: number; right: number },
): string {
  if (offAxis.length === 0) return "";
  const f = (v: number) => v.toFixed(1);
  const distance = (p: OffAxisPoint) => (p.above ? p.y - range.high : range.low - p.y);
  const marked = [...offAxis].sort((a, b) => distance(b) - distance(a)).slice(0, MAX_OFF_AXIS_MARKERS);
  const markers = marked.map((p) => {
    const tip = `${formatCount(p.x)} samples: ${spec.formatY(p.y)} (off the axis)`;
    const shape = p.above ? `M${f(toX(p.x))},${plot.top + 1}l-4,7h8z` : `M${f(toX(p.x))},${plot.bottom - 1}l-4,-7h8z`;
    return `<path class="off-axis" d="${shape}" fill="${colorOf(p.runIndex)}"><title>${escapeXml(tip)}</title></path>`;
  });
  const above = offAxis.filter((p) => p.above);
  const below = offAxis.filter((p) => !p.above);
  const notes = [
    ...(above.length > 0
      ? [
          `▲ ${above.length} above ${spec.formatY(range.high)}, up to ${spec.formatY(Math.max(...above.map((p) => p.y)))}`,
        ]
      : []),
    ...(below.length > 0
      ? [
          `▼ ${below.length} below ${spec.formatY(range.low)}, down to ${spec.formatY(Math.min(...below.map((p) => p.y)))}`,
        ]
      : []),
  ];
  return (
    markers.join("") +
    `<text class="off-axis-note" x="${plot.right}" y="24" text-anchor="end">${escapeXml(notes.join(" · "))}</text>`
  );
}

function renderChart(spec: ChartSpec, chartIndex: number): string {
  const width = 640;
  const height = 340;
  const margin = { left: 64, right: 20, top: 40, bottom: 48 };
  const plotWidth = width - margin.left - margin.right;
  const plotHeight = height - margin.top - margin.bottom;
  const finite = spec.series.map((s) => ({
    ...s,
    points: s.points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y)),
  }));
  const all = finite.flatMap((s) => s.points);
  const header =
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" role="img" aria-label="${escapeXml(spec.title)}">` +
    `<text class="chart-title" x="${margin.left}" y="24">${escapeXml(spec.title)}</text>`;
  if (all.length === 0) {
    return (
      `${header}<rect class="plot-bg" x="${margin.left}" y="${margin.top}" width="${plotWidth}" height="${plotHeight}"/>` +
      `<text class="empty" x="${margin.left + plotWidth / 2}" y="${margin.top + plotHeight / 2}" text-anchor="middle">${escapeXml(spec.empty)}</text></svg>`
    );
  }
  const range = yRange(
    all.map((p) => p.y),
    spec.robustY === true,
  );
  const offAxis: OffAxisPoint[] = finite.flatMap((s) =>
    s.points
      .filter((p) => p.y > range.high || p.y < range.low)
      .map((p) => ({ ...p, runIndex: s.runIndex, above: p.y > range.high })),
  );
  // lines run along the edge where a point is off the axis; the marker says where it went
  const clamp = (y: number) => Math.min(range.high, Math.max(range.low, y));
  const series = finite.map((s) => ({ ...s, points: downsample(s.points).map((p) => ({ x: p.x, y: clamp(p.y) })) }));
  const xs = all.map((p) => p.x);
  const xLow = Math.min(0, ...xs);
  let xHigh = Math.max(...xs);
  let yLow = range.low;
  let yHigh = range.high;
  if (spec.target !== undefined) {
    yLow = Math.min(yLow, spec.target.y);
    yHigh = Math.max(yHigh, spec.target.y);
  }
  if (xHigh === xLow) xHigh = xLow + 1;
  // A flat line (a constant LR, up to rounding) gets a range of +-10% around it.
  const flat = yHigh - yLow <= Math.abs(yHigh) * 1e-6;
  const pad = flat ? Math.abs(yHigh) * 0.1 || 1 : (yHigh - yLow) * 0.06;
  yLow = yLow >= 0 && yLow - pad < 0 ? 0 : yLow - pad; // an all-positive axis stops at 0
  yHigh += pad;
  const xTicks = niceTicks(xLow, xHigh, 6);
  const yTicks = niceTicks(yLow, yHigh, 5);
  const toX = (x: number) => margin.left + ((x - xLow) / (xHigh - xLow)) * plotWidth;
  const toY = (y: number) => margin.top + plotHeight - ((y - yLow) / (yHigh - yLow)) * plotHeight;
  const f = (v: number) => v.toFixed(1);
  const clipId = `plot-area-${chartIndex}`;
  const parts: string[] = [header];
  parts.push(
    `<defs><clipPath id="${clipId}"><rect x="${margin.left}" y="${margin.top}" width="${plotWidth}" height="${plotHeight}"/></clipPath></defs>`,
  );
  parts.push(
    `<rect class="plot-bg" x="${margin.left}" y="${margin.top}" width="${plotWidth}" height="${plotHeight}"/>`,
  );
  for (const t of yTicks) {
    parts.push(
      `<line class="grid" x1="${margin.left}" x2="${margin.left + plotWidth}" y1="${f(toY(t))}" y2="${f(toY(t))}"/>`,
    );
    parts.push(
      `<text class="tick" x="${margin.left - 8}" y="${f(toY(t) + 4)}" text-anchor="end">${escapeXml(spec.formatY(t))}</text>`,
    );
  }
  for (const t of xTicks) {
    parts.push(
      `<line class="grid" x1="${f(toX(t))}" x2="${f(toX(t))}" y1="${margin.top}" y2="${margin.top + plotHeight}"/>`,
    );
    parts.push(
      `<text class="tick" x="${f(toX(t))}" y="${margin.top + plotHeight + 18}" text-anchor="middle">${escapeXml(formatCount(t))}</text>`,
    );
  }
  parts.push(`<g clip-path="url(#${clipId})">`);
  if (spec.target !== undefined) {
    const y = f(toY(spec.target.y));
    parts.push(`<line class="target" x1="${margin.left}" x2="${margin.left + plotWidth}" y1="${y}" y2="${y}"/>`);
    parts.push(
      `<text class="target-label" x="${margin.left + 6}" y="${f(toY(spec.target.y) - 6)}">${escapeXml(spec.target.label)}</text>`,
    );
  }
  for (const s of series) {
    const color = colorOf(s.runIndex);
    const path = s.points.map((p) => `${f(toX(p.x))},${f(toY(p.y))}`).join(" ");
    parts.push(`<polyline class="series" stroke="${color}" points="${path}"/>`);
    if (s.markers) {
      for (const p of s.points) {
        const tip = `${formatCount(p.x)} samples: ${spec.formatY(p.y)}`;
        parts.push(
          `<circle cx="${f(toX(p.x))}" cy="${f(toY(p.y))}" r="3.2" fill="${color}"><title>${escapeXml(tip)}</title></circle>`,
        );
      }
    }
  }
  parts.push(`</g>`);
  parts.push(
    renderOffAxis(offAxis, spec, range, toX, {
      top: margin.top,
      bottom: margin.top + plotHeight,
      right: margin.left + plotWidth,
    }),
  );
  parts.push(`<rect class="frame" x="${margin.left}" y="${margin.top}" width="${plotWidth}" height="${plotHeight}"/>`);
  parts.push(
    `<text class="axis-label" x="${margin.left + plotWidth / 2}" y="${height - 8}" text-anchor="middle">${escapeXml(spec.xLabel)}</text>`,
  );
  parts.push(
    `<text class="axis-label" transform="translate(16 ${margin.top + plotHeight / 2}) rotate(-90)" text-anchor="middle">${escapeXml(spec.yLabel)}</text>`,
  );
  parts.push(`</svg>`);
  return parts.join("");
}

function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** samples/s of each step: the samples it added (from the previous line, or the average
 *  batch when lines are missing) over its wall time. */
function throughputPoints(run: RunLog): Point[] {
  return run.steps.map((s, i) => {
    const previous = run.steps[i - 1];
    const stepSamples =
      previous !== undefined && previous.step === s.step - 1
        ? s.samples - previous.samples
        : s.samples / Math.max(1, s.step);
    return { x: s.samples, y: (stepSamples * 1000) / s.totalMs };
  });
}

const minutes = (value: number | null) => (value === null ? "–" : `${value.toFixed(2)} min`);
const cell = (text: string, className = "") => `<td${className ? ` class="${className}"` : ""}>${escapeXml(text)}</td>`;

function swatch(runIndex: number): string {
  return `<span class="swatch" style="background:${colorOf(runIndex)}"></span>`;
}

function renderSummary(runs: RunLog[]): string {
  const withSteps = runs.some((run) => run.steps.length > 0);
  const rows = runs.map((run, i) => {
    const best = run.evals.length > 0 ? Math.max(...run.evals.map((e) => e.maskedLmAccuracy)) : null;
    const stopEval = run.status === "success" ? run.evals[run.evals.length - 1] : undefined;
    const statusClass = run.status === "success" ? "ok" : run.status === null ? "muted" : "bad";
    const med = (pick: (s: StepStats) => number) => {
      const value = median(run.steps.map(pick));
      return value === null ? "–" : value.toFixed(1);
    };
    return (
      `<tr><td class="name" title="${escapeXml(run.name)}">${swatch(i)}${escapeXml(run.name)}</td>` +
      cell(run.status ?? (run.runStartMs !== null ? "no run_stop" : "–"), statusClass) +
      cell(minutes(timeToTrainMinutes(run)), "num strong") +
      cell(minutes(initMinutes(run)), "num") +
      cell(String(run.evals.length), "num") +
      cell(stopEval !== undefined ? stopEval.samples.toLocaleString("en-US") : "–", "num") +
      cell(best === null ? "–" : best.toFixed(4), best !== null && best >= TARGET_ACCURACY ? "num ok" : "num") +
      cell(run.mlperfParameters.get(K.GLOBAL_BATCH_SIZE) ?? run.knobs.get("BS") ?? "–", "num") +
      cell(run.mlperfParameters.get(K.SEED) ?? run.knobs.get("SEED") ?? "–", "num") +
      (withSteps
        ? cell(String(run.steps.length), "num") +
          cell(
            `${med((s) => s.totalMs)} / ${med((s) => s.hostMs)} / ${med((s) => s.dataMs)} / ${med((s) => s.deviceMs)}`,
            "num",
          )
        : "") +
      `</tr>`
    );
  });
  const olympic = olympicMeanMinutes(runs);
  const scoreLine =
    runs.length >= 3
      ? `<p class="score">MLPerf score of the set (olympic mean of time to train, fastest and slowest dropped): <strong>${escapeXml(olympic === null ? "not scored: more than one run did not succeed" : `${olympic.toFixed(2)} min`)}</strong></p>`
      : "";
  return (
    `<table class="summary"><thead><tr><th>run</th><th>status</th><th>time to train</th><th>init</th><th>evals</th>` +
    `<th>samples to converge</th><th>best accuracy</th><th>global batch</th><th>seed</th>` +
    (withSteps
      ? `<th>steps logged</th><th>median step ms<br/><span class="muted">total / host / data / device</span></th>`
      : "") +
    `</tr></thead><tbody>${rows.join("")}</tbody></table>${scoreLine}`
  );
}

/** Step times as a short list: all of them, or the first few and the last two. */
function stepTimesText(steps: StepStats[]): string {
  const times = steps.map((s) => s.totalMs.toFixed(1));
  return times.length <= 8 ? times.join(", ") : `${times.slice(0, 5).join(", ")}, …, ${times.slice(-2).join(", ")}`;
}

/** The init phase of each run: what its untimed warm-up on fake data did, apart from the run's curves. */
function renderWarmUp(runs: RunLog[]): string {
  const rows = runs
    .map((run, i) => {
      const { steps, evals } = run.warmUp;
      if (steps.length === 0 && evals.length === 0 && initMinutes(run) === null) return "";
      const later = median(steps.slice(1).map((s) => s.totalMs));
      const fakeEval = evals.map((e) => `${e.maskedLmAccuracy.toFixed(4)} in ${e.seconds.toFixed(1)} s`).join("; ");
      return (
        `<tr><td class="name" title="${escapeXml(run.name)}">${swatch(i)}${escapeXml(run.name)}</td>` +
        cell(minutes(initMinutes(run)), "num") +
        cell(steps.length > 0 ? String(steps.length) : "not logged", "num") +
        cell(steps.length > 0 ? steps[0]!.totalMs.toFixed(1) : "–", "num") +
        cell(later === null ? "–" : later.toFixed(1), "num") +
        cell(steps.length > 0 ? stepTimesText(steps) : "–", "num list") +
        cell(fakeEval || "–", "num muted") +
        `</tr>`
      );
    })
    .filter((row) => row !== "");
  if (rows.length === 0) return "";
  return (
    `<h2>Init phase: warm-up on fake data</h2><div class="card">` +
    `<p class="note">Untimed (before run_start): steps and an eval on fake data that compile every kernel. ` +
    `They are not part of the run and not in its curves; the eval's accuracy is on fake data and is no result.</p>` +
    `<table class="warm-up"><thead><tr><th>run</th><th>init phase</th><th>warm-up steps</th><th>first step ms<br/><span class="muted">compiles</span></th>` +
    `<th>median later step ms</th><th>step times, ms</th><th>eval on fake data<br/><span class="muted">accuracy, time</span></th></tr></thead>` +
    `<tbody>${rows.join("")}</tbody></table></div>`
  );
}

/** key | value: one merged cell when every run agrees, else one cell per run (highlighted). */
function renderParameterTable(title: string, runs: RunLog[], pick: (run: RunLog) => Map<string, string>): string {
  const keys = [...new Set(runs.flatMap((run) => [...pick(run).keys()]))];
  if (keys.length === 0) return "";
  const header =
    runs.length > 1
      ? `<tr><th>key</th>${runs.map((run, i) => `<th>${swatch(i)}${escapeXml(run.name)}</th>`).join("")}</tr>`
      : `<tr><th>key</th><th>value</th></tr>`;
  const rows = keys.map((key) => {
    const values = runs.map((run) => pick(run).get(key) ?? "–");
    const agree = values.every((v) => v === values[0]);
    const cells = agree
      ? `<td class="num" colspan="${runs.length}">${escapeXml(values[0]!)}</td>`
      : values.map((v) => cell(v, "num differs")).join("");
    return `<tr><th class="key">${escapeXml(key)}</th>${cells}</tr>`;
  });
  return `<section><h3>${escapeXml(title)}</h3><table class="params"><thead>${header}</thead><tbody>${rows.join("")}</tbody></table></section>`;
}

const STYLE = `
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--bg:#f6f8fa;--card:#fff;--ok:#1a7f37;--bad:#cf222e}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
main{max-width:1360px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px}h3{font-size:15px;margin:18px 0 8px}
.sub{color:var(--muted);margin:0 0 16px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px;overflow:hidden}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;margin:0 0 12px;padding:0;list-style:none}
.swatch{display:inline-block;width:12px;height:12px;border-radius:3px;margin-right:6px;vertical-align:-1px}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:16px}
.charts svg{width:100%;height:auto;display:block}
svg text{font-family:inherit;fill:var(--fg)}
.chart-title{font-size:15px;font-weight:600}
.tick{font-size:11px;fill:var(--muted)}
.axis-label{font-size:12px;fill:var(--muted)}
.empty{font-size:13px;fill:var(--muted)}
.plot-bg{fill:#fbfcfd}
.frame{fill:none;stroke:var(--line)}
.grid{stroke:#eaeef2;stroke-width:1}
.series{fill:none;stroke-width:1.8;stroke-linejoin:round;stroke-linecap:round;opacity:.9}
.target{stroke:var(--bad);stroke-width:1.4;stroke-dasharray:6 4}
.target-label{font-size:11px;fill:var(--bad)}
.off-axis{stroke:#fff;stroke-width:.8}
.off-axis-note{font-size:11px;fill:var(--muted)}
table{border-collapse:collapse;width:100%;background:var(--card)}
th,td{border-bottom:1px solid var(--line);padding:6px 10px;text-align:left;white-space:nowrap}
thead th,td.list{white-space:normal}
.params td,.params thead th{white-space:normal;overflow-wrap:anywhere}
td.name{max-width:320px;overflow:hidden;text-overflow:ellipsis}
thead th{background:var(--bg);font-weight:600;font-size:12px;vertical-align:bottom}
td.num{font-variant-numeric:tabular-nums}
th.key{font-weight:500;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.params td{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
td.differs{background:#fff8c5}
.ok{color:var(--ok);font-weight:600}.bad{color:var(--bad);font-weight:600}.muted{color:var(--muted)}
.strong{font-weight:600}
/* one run: its two tables side by side; several: each table full width, a column per run */
.param-tables{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:0 24px;align-items:start}
.param-tables h3{margin-top:0}
.score{margin:12px 0 0}
.note{color:var(--muted);font-size:12.5px}
`;

export interface ReportOptions {
  title?: string;
  generatedAt?: Date;
}

/** The whole HTML document for a set of runs. */
export function renderRunReport(runs: RunLog[], options: ReportOptions = {}): string {
  const title =
    options.title ?? (runs.length === 1 ? `BERT run report: ${runs[0]!.name}` : `BERT run report: ${runs.length} runs`);
  const generatedAt = (options.generatedAt ?? new Date())
    .toISOString()
    .replace("T", " ")
    .replace(/\.\d+Z$/, " UTC");
  const perStep = (pick: (s: StepStats) => number): Series[] =>
    runs.map((run, runIndex) => ({ runIndex, points: run.steps.map((s) => ({ x: s.samples, y: pick(s) })) }));
  const noSteps = "no step lines in these logs (the trainer's console log has them)";
  const charts: ChartSpec[] = [
    {
      title: "Training loss",
      xLabel: "samples trained",
      yLabel: "loss",
      series: perStep((s) => s.loss),
      formatY: formatPlain,
      empty: noSteps,
    },
    {
      title: "Eval masked-LM accuracy",
      xLabel: "samples trained",
      yLabel: "accuracy",
      series: runs.map((run, runIndex) => ({
        runIndex,
        markers: true,
        points: run.evals.map((e) => ({ x: e.samples, y: e.maskedLmAccuracy })),
      })),
      formatY: (v) => v.toFixed(3),
      target: { y: TARGET_ACCURACY, label: "target 0.720" },
      empty: "no evaluations in these logs",
    },
    {
      title: "Learning rate",
      xLabel: "samples trained",
      yLabel: "learning rate",
      series: perStep((s) => s.learningRate),
      formatY: formatRate,
      empty: noSteps,
    },
    {
      title: "Step time",
      xLabel: "samples trained",
      yLabel: "ms per step",
      series: perStep((s) => s.totalMs),
      formatY: formatPlain,
      robustY: true,
      empty: noSteps,
    },
    {
      title: "Throughput",
      xLabel: "samples trained",
      yLabel: "samples / s",
      series: runs.map((run, runIndex) => ({ runIndex, points: throughputPoints(run) })),
      formatY: formatCount,
      robustY: true,
      empty: noSteps,
    },
    {
      title: "Compute rate",
      xLabel: "samples trained",
      yLabel: "GFLOP/s",
      series: perStep((s) => s.gflops),
      formatY: formatCount,
      robustY: true,
      empty: noSteps,
    },
  ];
  // Charts without data collapse into one line instead of empty frames.
  const drawn = charts.filter((c) => c.series.some((s) => s.points.length > 0));
  const skipped = charts.filter((c) => !drawn.includes(c));
  const missing = [...new Set(skipped.map((c) => c.empty))]
    .map(
      (why) =>
        `<p class="note">Not drawn, ${escapeXml(why)}: ${escapeXml(
          skipped
            .filter((c) => c.empty === why)
            .map((c) => c.title.toLowerCase())
            .join(", "),
        )}.</p>`,
    )
    .join("");
  const legend = `<ul class="legend">${runs.map((run, i) => `<li>${swatch(i)}${escapeXml(run.name)}</li>`).join("")}</ul>`;
  const unreadable = runs
    .filter((r) => r.unreadableRecords > 0)
    .map((r) => `${r.name}: ${r.unreadableRecords} unreadable MLLOG line(s) skipped`);
  const parameters =
    renderParameterTable("MLPerf hyper-parameters and submission", runs, (run) => run.mlperfParameters) +
    renderParameterTable("Trainer knobs (HParam lines)", runs, (run) => run.knobs);
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1"/>
<title>${escapeXml(title)}</title>
<style>${STYLE}</style>
</head>
<body>
<main>
<h1>${escapeXml(title)}</h1>
<p class="sub">MLPerf Training BERT · generated ${escapeXml(generatedAt)} by mlperf/bert/report.ts · time to train = run_stop − run_start</p>
<h2>Runs</h2>
<div class="card">${renderSummary(runs)}${unreadable.length > 0 ? `<p class="note">${escapeXml(unreadable.join("; "))}</p>` : ""}</div>
<h2>Curves of the run</h2>
<div class="card">${legend}<div class="charts">${drawn.map(renderChart).join("\n")}</div>${missing}</div>
${renderWarmUp(runs)}
<h2>Hyper-parameters</h2>
<div class="card${runs.length === 1 ? " param-tables" : ""}">${parameters || `<p class="note">no hyper-parameters in these logs</p>`}</div>
</main>
</body>
</html>
`;
}

/** Labels runs by file name, adding the parent folder where two names collide. */
function runNames(logPaths: string[]): string[] {
  const base = logPaths.map((p) => path.basename(p));
  return logPaths.map((p, i) =>
    base.filter((b) => b === base[i]).length > 1 ? `${path.basename(path.dirname(p))}/${base[i]}` : base[i]!,
  );
}

/** Reads the logs and writes the report to `outPath` atomically (temp file, then rename). */
export function writeRunReport(logPaths: string[], outPath: string, options: ReportOptions = {}): RunLog[] {
  if (logPaths.length === 0) throw new ReportError("no logs given");
  const names = runNames(logPaths);
  const runs = logPaths.map((logPath, i) => {
    let text: string;
    try {
      text = readFileSync(logPath, "latin1");
    } catch (error) {
      throw new ReportError(`cannot read ${logPath}: ${(error as Error).message}`);
    }
    const run = parseRunLog(text, names[i]!);
    if (
      run.steps.length === 0 &&
      run.evals.length === 0 &&
      run.mlperfParameters.size === 0 &&
      run.runStartMs === null &&
      run.initStartMs === null
    ) {
      throw new ReportError(
        `${logPath} holds no :::MLLOG records, step lines or eval lines; is it a log of the BERT trainer?`,
      );
    }
    return run;
  });
  const html = renderRunReport(runs, options);
  const temp = path.join(path.dirname(outPath), `.${path.basename(outPath)}.${process.pid}.tmp`);
  try {
    writeFileSync(temp, html);
    renameSync(temp, outPath);
  } catch (error) {
    rmSync(temp, { force: true });
    throw new ReportError(`cannot write ${outPath}: ${(error as Error).message}`);
  }
  return runs;
}

const USAGE = `usage: npx tsx mlperf/bert/report.ts LOG... [-o report.html] [--title TEXT]

Writes one self-contained HTML report (inline SVG plots of loss, learning rate, eval
masked-LM accuracy with the 0.72 target, step time and throughput; the hyper-parameters;
the time to train) from MLPerf logs (result_*.txt, result_bert_<seed>.log) and the
trainer's console logs. Several logs are overlaid, one color per run. The init phase's
warm-up steps and fake-data eval are shown apart, not in the run's curves.

  -o, --output FILE   where to write the report (default report.html)
  --title TEXT        the report's title`;

function main(argv: string[]): number {
  const logs: string[] = [];
  let output = "report.html";
  let title: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--help" || arg === "-h") {
      console.log(USAGE);
      return 0;
    } else if (arg === "-o" || arg === "--output" || arg === "--title") {
      const value = argv[++i];
      if (value === undefined) {
        console.error(`report: ${arg} needs a value\n\n${USAGE}`);
        return 2;
      }
      if (arg === "--title") title = value;
      else output = value;
    } else if (arg.startsWith("-")) {
      console.error(`report: unknown option ${arg}\n\n${USAGE}`);
      return 2;
    } else {
      logs.push(arg);
    }
  }
  if (logs.length === 0) {
    console.error(`report: no LOG given\n\n${USAGE}`);
    return 2;
  }
  try {
    const runs = writeRunReport(logs, output, { title });
    console.error(`report: ${runs.length} run${runs.length === 1 ? "" : "s"} -> ${output}`);
    return 0;
  } catch (error) {
    return reportFailure("report", error, [ReportError]);
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = main(process.argv.slice(2));
}
