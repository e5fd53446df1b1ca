// BERT pretraining train steps (forward + backward + LAMB, one jitted step) on the default device:
// ms per step (median after the JIT captured), kernels a step and their summed run time (host devices), and
// GFLOP/s from analytic matmul FLOPs x3, for the configurations; and the start-up figure: process
// start to the first tiny train step, with a cold kernel cache (and when its -O3 builds were all in) and then a
// warm one; the steps are timed once every kernel runs its -O3 build. `--profile N` adds each
// configuration's N costliest kernels (by name and options: median ms a step over the timed steps, how many,
// GFLOP/s and the GB/s of the buffers they touch, which tells memory-bound kernels from the rest). `--breakdown`
// adds the step's time by kernel kind (GEMM-like: 4 or more FLOPs a byte touched; other reductions;
// elementwise; scatters), each kind's GFLOP/s and share of the machine's peak (bench/peak.ts, measured first;
// `--peak GFLOPS` gives it instead). Timing kernels one by one runs the captured step without its graph, so
// --profile and --breakdown time steps of their own, after the graph steps of median_step_ms; the breakdown's
// shares are of those kernel-by-kernel steps (timed_step_ms). Prints JSON on stdout, progress on stderr.
// `--torch PYTHON` also times PyTorch's eager step of each tiny, base and large configuration (bench/gpu/torch_bench.py
// on the CPU, float32, the same threads, batch, sequence and predictions), first, while no tsgrad model holds
// memory, and reports the ratio. Use a PyTorch built with a real BLAS (the wheels, MKL): Debian's python3-torch runs the reference BLAS.
// Usage: npx tsx bench/bert-step.ts [--configs tiny,mini] [--steps 3] [--base] [--large] [--no-startup] [--profile 20]
//        [--breakdown] [--peak GFLOPS] [--torch python3]
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Device, GlobalCounters, Tensor } from "../src/index.ts";
import { jit } from "../src/tensor/index.ts";
import { kernelTimers } from "../src/engine/realize.ts";
import { waitForFinalBuilds } from "../src/runtime/compile_tiers.ts";
import { threadCount } from "../src/runtime/cpu.ts";
import { BERT_PRESETS, BertForPretraining, type BertConfig } from "../models/bert.ts";
import { createBertOptimizer, makeBertTrainStep } from "../models/bert_train_step.ts";
import { fakeBatch, samplesToTensors } from "../mlperf/bert/data/loader.ts";

interface Run {
  preset: keyof typeof BERT_PRESETS;
  batch: number;
  seq: number;
  predictions: number;
}
const RUNS: Record<string, Run> = {
  tiny: { preset: "tiny", batch: 8, seq: 128, predictions: 20 },
  mini: { preset: "mini", batch: 8, seq: 128, predictions: 20 },
  base: { preset: "base", batch: 8, seq: 128, predictions: 20 },
  large: { preset: "large", batch: 1, seq: 512, predictions: 76 },
};

const { values } = parseArgs({
  options: {
    configs: { type: "string", default: "tiny,mini" },
    steps: { type: "string", default: "3" },
    base: { type: "boolean", default: false },
    large: { type: "boolean", default: false },
    "no-startup": { type: "boolean", default: false },
    "first-step-only": { type: "string" },
    profile: { type: "string" },
    breakdown: { type: "boolean", default: false },
    peak: { type: "string" },
    torch: { type: "string" },
    help: { type: "boolean", default: false },
  },
});
if (values.help) {
  console.log(
    "usage: npx tsx bench/bert-step.ts [--configs tiny,mini] [--steps 3] [--base] [--large] [--no-startup] [--profile N] [--breakdown] [--peak GFLOPS] [--torch python3]",
  );
  process.exit(0);
}

/** Forward matmul FLOPs of one step: encoder layers over every token, the MLM head over the masked positions. */
function forwardFlops(c: BertConfig, r: Run): number {
  const tokens = r.batch * r.seq;
  const [h, i, v] = [c.hiddenSize, c.intermediateSize, c.vocabSize];
  const layer = tokens * (2 * 4 * h * h + 2 * 2 * h * i + 2 * 2 * r.seq * h);
  const head = r.batch * r.predictions * (2 * h * h + 2 * h * v) + r.batch * 2 * h * h;
  return c.numHiddenLayers * layer + head;
}

function stepper(r: Run) {
  const config = BERT_PRESETS[r.preset];
  Tensor.manualSeed(0);
  const model = new BertForPretraining(config);
  const state = { model, ...createBertOptimizer(model, { lr: 1e-4, totalSteps: 1000, warmupSteps: 10 }) };
  const step = jit(makeBertTrainStep(state, { lossScale: 1, gradientAccSteps: 1, maxGradNorm: 1 }));
  let seed = 0;
  return {
    config,
    /**
     * Wall ms of one step, with the kernels it ran and their summed run time (0 where launches do not wait: a GPU's).
     */
    step: (): { ms: number; kernels: number; kernelMs: number } => {
      const batch = samplesToTensors(fakeBatch(r.batch, r.seq, r.predictions, seed++, config.vocabSize));
      GlobalCounters.reset();
      const start = performance.now();
      step(...batch).item();
      return {
        ms: performance.now() - start,
        kernels: GlobalCounters.kernelCount,
        kernelMs: GlobalCounters.timeSumS * 1000,
      };
    },
  };
}

// child mode: one tiny step, then report how long since the process started
if (values["first-step-only"]) {
  const { step } = stepper(RUNS.tiny!);
  step();
  const firstStep = Math.round(performance.now());
  // a cold cache's first step ran on quick builds: the next process should find the -O3 ones, as a user's would
  waitForFinalBuilds();
  console.log(JSON.stringify({ ms_since_process_start: firstStep, o3_builds_in_ms: Math.round(performance.now()) }));
  process.exit(0);
}

/** The machine's peak GFLOP/s once measured (peakGflops). */
let peak: number | undefined;
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const names = [...values.configs.split(","), ...(values.base ? ["base"] : []), ...(values.large ? ["large"] : [])];
const results: Record<string, unknown>[] = [];
for (const name of names)
  if (!RUNS[name]) throw new Error(`unknown config ${name}; known: ${Object.keys(RUNS).join(", ")}`);
// PyTorch's steps first, while this process holds no model: BERT-large's step takes 11 GB in each, and run
// beside a tsgrad model the two did not fit the machine's 24 GB (the kernel reclaiming pages, not a fair time)
const torchSteps = new Map(
  values.torch ? names.map((name) => [name, torchStep(values.torch!, RUNS[name]!, Number(values.steps))]) : [],
);
for (const name of names) {
  const run = RUNS[name]!;
  console.error(`${name}: building the model and capturing the step...`);
  const { config, step } = stepper(run);
  const first = step().ms; // uncaptured
  step(); // captured
  waitForFinalBuilds(); // the timed steps run the -O3 builds, not quick ones a cold cache started with
  // per kernel launch of the timed steps: seconds, by position in the step (a jitted step replays in order)
  const launches: { key: string; seconds: number; flops: number; bytes: number }[] = [];
  const timer = (item: Parameters<typeof kernelTimers extends Set<infer F> ? F : never>[0], seconds: number): void => {
    launches.push({
      key: `${item.kernel.name} ${item.kernel.opts}`,
      seconds,
      flops: item.kernel.flops,
      bytes: item.buffers.reduce((sum, b) => sum + b.nbytes, 0),
    });
  };
  const steps = Array.from({ length: Number(values.steps) }, () => step());
  // the profile and breakdown time kernels one by one, which runs the step without its graph: steps of their own
  let timedMs = 0;
  if (values.profile || values.breakdown) {
    kernelTimers.add(timer);
    timedMs = median(Array.from({ length: Number(values.steps) }, () => step().ms));
    kernelTimers.delete(timer);
  }
  const ms = median(steps.map((s) => s.ms));
  const kernelMs = median(steps.map((s) => s.kernelMs));
  const gflop = (3 * forwardFlops(config, run)) / 1e9;
  results.push({
    config: name,
    ...run,
    first_step_ms: Math.round(first),
    median_step_ms: +ms.toFixed(1),
    gflop_per_step: +gflop.toFixed(2),
    gflops: +(gflop / (ms / 1000)).toFixed(2),
    kernels_per_step: steps.at(-1)!.kernels,
    ...(kernelMs > 0 ? { median_kernel_ms: +kernelMs.toFixed(1) } : {}),
    ...(values.profile ? { profile: profile(launches, steps.length, Number(values.profile)) } : {}),
    ...(values.breakdown ? { breakdown: breakdown(launches, steps.length, timedMs, peakGflops()) } : {}),
    ...(torchSteps.get(name) ? withSpeedup(torchSteps.get(name)!, ms) : {}),
  });
  console.error(JSON.stringify(results.at(-1)));
}

/** PyTorch's step as torchStep measured it. */
interface TorchStep {
  version: string;
  blas: string | null;
  median_step_ms: number;
}

/**
 * PyTorch's eager step of `run` on the CPU (bench/gpu/torch_bench.py under `python`, float32, THREADS threads): its
 * median ms over `steps` steps; undefined for a preset it has not.
 */
function torchStep(python: string, run: Run, steps: number): TorchStep | undefined {
  if (!["tiny", "base", "large"].includes(run.preset)) return undefined;
  const script = fileURLToPath(new URL("./gpu/torch_bench.py", import.meta.url));
  const args = [
    script,
    ...["--device", "cpu", "--shapes", "", "--preset", run.preset, "--batch", `${run.batch}`, "--seq", `${run.seq}`],
    ...["--predictions", `${run.predictions}`, "--steps", `${Math.max(steps, 3)}`, "--threads", `${threadCount()}`],
  ];
  console.error(`${run.preset}: timing PyTorch's step (${python} ${args.join(" ")})...`);
  const child = spawnSync(python, args, { encoding: "utf8" });
  if (child.error) throw new Error(`--torch ${python}: could not run it (${child.error.message})`);
  if (child.status !== 0) throw new Error(`torch_bench.py failed under ${python}: ${child.stderr.slice(-2000)}`);
  if (child.stderr.trim()) console.error(child.stderr.trim());
  const out = JSON.parse(child.stdout) as { torch: string; blas: string | null; bert: { ms_per_step: number } };
  return { version: out.torch, blas: out.blas, median_step_ms: out.bert.ms_per_step };
}

/** PyTorch's step beside tsgrad's `ms`, and how many times faster tsgrad's is. */
function withSpeedup(torch: TorchStep, ms: number) {
  return { torch, speedup_vs_torch: +(torch.median_step_ms / ms).toFixed(2) };
}

/**
 * The `top` costliest kernels of a step, grouped by name and options: the median over steps of each launch's
 * time (launch i of every step is the same kernel), summed per group.
 */
function profile(
  launches: readonly { key: string; seconds: number; flops: number; bytes: number }[],
  stepCount: number,
  top: number,
) {
  const perStep = launches.length / stepCount;
  const groups = new Map<string, { ms: number; count: number; flops: number; bytes: number }>();
  for (let i = 0; i < perStep; i++) {
    const { key, flops, bytes } = launches[i]!;
    const ms = median(Array.from({ length: stepCount }, (_, s) => launches[s * perStep + i]!.seconds)) * 1000;
    const group = groups.get(key) ?? { ms: 0, count: 0, flops: 0, bytes: 0 };
    group.ms += ms;
    group.count++;
    group.flops += flops;
    group.bytes += bytes;
    groups.set(key, group);
  }
  return [...groups]
    .sort((a, b) => b[1].ms - a[1].ms)
    .slice(0, top)
    .map(([kernel, g]) => ({
      kernel,
      count: g.count,
      ms: +g.ms.toFixed(2),
      gflops: +(g.flops / g.ms / 1e6).toFixed(1),
      gbps: +(g.bytes / g.ms / 1e6).toFixed(1),
    }));
}

/** The kind of a kernel for the breakdown: its name's form and its arithmetic intensity. */
function kindOf(key: string, flops: number, bytes: number): string {
  if (key.startsWith("s_")) return "scatter";
  if (flops >= 4 * bytes) return "gemm";
  if (key.startsWith("r_")) return "reduce";
  return "elementwise";
}

/** The machine's float32 peak on every core: --peak, else bench/peak.ts run once (1 s). */
function peakGflops(): number {
  if (peak !== undefined) return peak;
  if (values.peak) return (peak = Number(values.peak));
  const child = spawnSync(
    process.execPath,
    ["--import", "tsx", fileURLToPath(new URL("./peak.ts", import.meta.url)), "--seconds", "1"],
    {
      encoding: "utf8",
    },
  );
  if (child.status !== 0) throw new Error(`bench/peak.ts failed: ${child.stderr.slice(-1000)}`);
  const runs = (JSON.parse(child.stdout) as { runs: { gflops: number }[] }).runs;
  peak = Math.max(...runs.map((r) => r.gflops));
  return peak;
}

/** The step's kernel time by kind: ms a step (median per launch), share of the step, GFLOP/s, share of peak. */
function breakdown(
  launches: readonly { key: string; seconds: number; flops: number; bytes: number }[],
  stepCount: number,
  stepMs: number,
  peakGflopsValue: number,
) {
  const perStep = launches.length / stepCount;
  const kinds = new Map<string, { ms: number; flops: number; kernels: number }>();
  for (let i = 0; i < perStep; i++) {
    const { key, flops, bytes } = launches[i]!;
    const ms = median(Array.from({ length: stepCount }, (_, s) => launches[s * perStep + i]!.seconds)) * 1000;
    const kind = kindOf(key, flops, bytes);
    const entry = kinds.get(kind) ?? { ms: 0, flops: 0, kernels: 0 };
    entry.ms += ms;
    entry.flops += flops;
    entry.kernels++;
    kinds.set(kind, entry);
  }
  const kernelMs = [...kinds.values()].reduce((sum, k) => sum + k.ms, 0);
  return {
    peak_gflops: peakGflopsValue,
    // the kernel-by-kernel step's wall time, and its part outside kernels (launching each from JavaScript, timing
    // it): a graph replay (median_step_ms) does without most of that
    timed_step_ms: +stepMs.toFixed(1),
    outside_kernels_ms: +(stepMs - kernelMs).toFixed(1),
    kinds: Object.fromEntries(
      [...kinds].map(([kind, k]) => [
        kind,
        {
          kernels: k.kernels,
          ms: +k.ms.toFixed(1),
          share_of_step: +(k.ms / stepMs).toFixed(3),
          gflops: +(k.flops / k.ms / 1e6).toFixed(1),
          share_of_peak: +(k.flops / k.ms / 1e6 / peakGflopsValue).toFixed(3),
        },
      ]),
    ),
  };
}

let startup: Record<string, unknown> | undefined;
if (!values["no-startup"]) {
  // cold: an empty kernel cache; warm: the same cache again
  const cache = mkdtempSync(join(tmpdir(), "tsgrad-bench-cache-"));
  const self = fileURLToPath(import.meta.url);
  const firstStep = (): { ms_since_process_start: number; o3_builds_in_ms: number } => {
    const child = spawnSync(process.execPath, ["--import", "tsx", self, "--first-step-only", "1"], {
      env: { ...process.env, TSGRAD_CACHE: cache },
      encoding: "utf8",
    });
    if (child.status !== 0) throw new Error(`first-step child failed: ${child.stderr.slice(-2000)}`);
    return JSON.parse(child.stdout);
  };
  try {
    const cold = firstStep();
    startup = {
      what: "wall ms from process start to the end of the first tiny train step (seq 128, batch 8)",
      cold_cache_ms: cold.ms_since_process_start,
      // a cold start runs -O1 builds while the -O3 ones compile in the background (src/runtime/compile_tiers.ts)
      cold_o3_builds_in_ms: cold.o3_builds_in_ms,
      warm_cache_ms: firstStep().ms_since_process_start,
    };
  } finally {
    rmSync(cache, { recursive: true, force: true });
  }
}
console.log(
  JSON.stringify(
    { device: Device.DEFAULT, flops: "analytic matmul FLOPs x3 (forward + backward)", results, startup },
    null,
    2,
  ),
);
