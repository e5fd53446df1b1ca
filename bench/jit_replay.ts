// What a jitted replay costs beyond its kernels, with the device's graphs (CPU: one native call walks a table of
// kernel calls) and without (CPU_GRAPH=0: a koffi call, an argument array and two clock reads per kernel), in
// the same process, alternating: (1) a chain of N tiny kernels (each an elementwise op on 16 floats, kept apart
// by contiguous()), as microseconds a kernel; (2) the demo's BERT train step (2 layers, hidden 64, batch 32,
// sequence 32), as ms a step. Prints JSON: medians of each mode and the ratio graph/kernel-by-kernel.
// Usage: npx tsx bench/jit_replay.ts [--kernels 500] [--rounds 5] [--steps 20] [--devices 1]
import { argsWithUsage } from "./args.ts";
import { Device, Tensor, dtypes } from "../src/index.ts";
import { jit } from "../src/tensor/index.ts";
import { BertForPretraining, type BertConfig } from "../models/bert.ts";
import { createBertOptimizer, makeBertTrainStep } from "../models/bert_train_step.ts";
import { fakeBatch, samplesToTensors } from "../mlperf/bert/data/loader.ts";
import { replicateParameters } from "../src/nn/parallel.ts";

const { values } = argsWithUsage(
  "usage: npx tsx bench/jit_replay.ts [--kernels 500] [--rounds 5] [--steps 20] [--devices 1]  (--devices n: the BERT step sharded over CPU:0..n-1)",
  {
    kernels: { type: "string", default: "500" },
    rounds: { type: "string", default: "5" },
    steps: { type: "string", default: "20" },
    devices: { type: "string", default: "1" },
  },
);
if (Device.DEFAULT !== "CPU")
  throw new Error(`jit_replay measures the CPU device's graphs; the default device here is ${Device.DEFAULT}`);
const [chainLength, rounds, steps, deviceCount] = [
  Number(values.kernels),
  Number(values.rounds),
  Number(values.steps),
  Number(values.devices),
];
for (const [name, v] of Object.entries({ kernels: chainLength, rounds, steps, devices: deviceCount })) {
  if (!(Number.isInteger(v) && v >= 1))
    throw new Error(`--${name} ${values[name as keyof typeof values]}: expected a whole number, 1 or more`);
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
/** Runs `fn` with CPU_GRAPH set to `graph` (read on each replay). */
function withGraph<T>(graph: boolean, fn: () => T): T {
  process.env.CPU_GRAPH = graph ? "1" : "0";
  try {
    return fn();
  } finally {
    delete process.env.CPU_GRAPH;
  }
}

// (1) N tiny kernels: per-kernel cost of a replay. Each mode has its own jitted function (a capture's graph is built
// once).
const chain = (x: Tensor): Tensor => {
  let y = x;
  for (let i = 0; i < chainLength; i++)
    y = y
      .mul(1.0001)
      .add(i % 3)
      .contiguous();
  return y;
};
const chains = { graph: jit(chain), kernels: jit(chain) };
const x = Tensor.rand([16], { dtype: dtypes.float32 }).realize();
const chainUs: Record<"graph" | "kernels", number[]> = { graph: [], kernels: [] };
for (const mode of ["graph", "kernels"] as const)
  for (let i = 0; i < 3; i++) withGraph(mode === "graph", () => chains[mode](x).realize());
for (let r = 0; r < rounds; r++) {
  for (const mode of ["graph", "kernels"] as const) {
    const start = performance.now();
    withGraph(mode === "graph", () => chains[mode](x).realize());
    chainUs[mode].push(((performance.now() - start) * 1000) / chainLength);
  }
}

// (2) the demo's train step
const config: BertConfig = {
  vocabSize: 77,
  hiddenSize: 64,
  numHiddenLayers: 2,
  numAttentionHeads: 2,
  intermediateSize: 256,
  maxPositionEmbeddings: 512,
  typeVocabSize: 2,
  hiddenDropoutProb: 0,
  attentionProbsDropoutProb: 0,
  initializerRange: 0.02,
  layerNormEps: 1e-12,
};
const devices = Array.from({ length: deviceCount }, (_, i) => `CPU:${i}`);
function makeStep() {
  Tensor.manualSeed(0);
  const model = new BertForPretraining(config);
  if (deviceCount > 1) replicateParameters(model, devices);
  const state = { model, ...createBertOptimizer(model, { lr: 1e-3, totalSteps: 1000, warmupSteps: 10 }) };
  return jit(makeBertTrainStep(state, { lossScale: 1, gradientAccSteps: 1, maxGradNorm: 1 }));
}
const trainSteps = { graph: makeStep(), kernels: makeStep() };
const batches = Array.from({ length: 4 }, (_, i) =>
  samplesToTensors(fakeBatch(32, 32, 5, i, config.vocabSize), deviceCount > 1 ? devices : undefined),
);
const stepMs: Record<"graph" | "kernels", number[]> = { graph: [], kernels: [] };
const losses: Record<"graph" | "kernels", number[]> = { graph: [], kernels: [] };
for (const mode of ["graph", "kernels"] as const)
  for (let i = 0; i < 3; i++) withGraph(mode === "graph", () => trainSteps[mode](...batches[i]!).item());
for (let s = 0; s < steps; s++) {
  for (const mode of ["graph", "kernels"] as const) {
    const start = performance.now();
    losses[mode].push(withGraph(mode === "graph", () => trainSteps[mode](...batches[s % batches.length]!).item()));
    stepMs[mode].push(performance.now() - start);
  }
}

const round = (v: number, digits = 2): number => +v.toFixed(digits);
console.log(
  JSON.stringify(
    {
      device: devices.length > 1 ? devices.join(",") : "CPU",
      tiny_kernels: {
        count: chainLength,
        us_per_kernel_graph: round(median(chainUs.graph)),
        us_per_kernel_kernel_by_kernel: round(median(chainUs.kernels)),
        ratio: round(median(chainUs.graph) / median(chainUs.kernels), 3),
      },
      demo_step: {
        ms_graph: round(median(stepMs.graph)),
        ms_kernel_by_kernel: round(median(stepMs.kernels)),
        ratio: round(median(stepMs.graph) / median(stepMs.kernels), 3),
        // both modes compute the same numbers: the losses of every timed step, compared exactly
        same_losses: losses.graph.every((l, i) => l === losses.kernels[i]),
      },
    },
    null,
    1,
  ),
);
