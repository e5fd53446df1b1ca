// One BERT-large float16 pretraining step (forward, backward with loss scaling, clipping, LAMB) at
// sequence length 512 on random data, jitted, timed over --steps steps after warm-up (compile, capture).
// FLOPs are counted analytically (the matmuls), the same formula as torch_bench.py, so the two compare.
// Prints one JSON object. `--profile-out FILE` also writes one step's every kernel group (name, CUDA form, count,
// ms, each kernel waited for and timed alone) as the profile bench/gpu/roofline.ts --profile sets beside its bounds.
// Usage: node bert_step.mjs [--batch 8] [--seq 512] [--steps 5] [--preset large] [--layers 24] [--device CUDA]
//        [--profile-out FILE]
import { writeFileSync } from "node:fs";
import { argsWithUsage } from "../args.ts";
import { type KernelProfile, PROFILE_FORMAT, formLabel } from "./step_kernels.ts";
import { Device, GlobalCounters, Tensor, dtypes } from "../../src/index.ts";
import { jit } from "../../src/tensor/index.ts";
import { kernelTimers } from "../../src/engine/realize.ts";
import { estimateBytes } from "../../src/codegen/lower.ts";
import type { KernelIR } from "../../src/codegen/ir.ts";
import { cudaForm } from "../../src/codegen/cuda_forms.ts";
import { groupSize } from "../../src/renderer/cuda.ts";
import { BERT_PRESETS, BertForPretraining, type BertPresetName } from "../../models/bert.ts";
import {
  type BertBatchTensors,
  createBertOptimizer,
  makeBertTrainStep,
  trainStepOptionsFromEnv,
} from "../../models/bert_train_step.ts";
import { fakeBatch, samplesToTensors } from "../../mlperf/bert/data/loader.ts";

const { values } = argsWithUsage(
  "Usage: bert_step [--batch 8] [--seq 512] [--steps 5] [--preset tiny|mini|base|large] [--layers N] [--device CUDA] [--profile-out FILE]",
  {
    batch: { type: "string", default: "8" },
    seq: { type: "string", default: "512" },
    steps: { type: "string", default: "5" },
    preset: { type: "string", default: "large" },
    layers: { type: "string" },
    device: { type: "string", default: "CUDA" },
    "profile-out": { type: "string" },
  },
);
const [batchSize, seq, steps] = [values.batch, values.seq, values.steps].map(Number) as [number, number, number];
const maskedPositions = Math.min(76, seq); // the reference's max_predictions_per_seq at seq 512
const preset = BERT_PRESETS[values.preset as BertPresetName];
if (!preset) throw new Error(`--preset ${values.preset}: expected one of ${Object.keys(BERT_PRESETS).join(", ")}`);
const config = { ...preset, numHiddenLayers: values.layers ? Number(values.layers) : preset.numHiddenLayers };
Device.DEFAULT = values.device;
Tensor.defaultFloat = dtypes.float16;

/** Matmul FLOPs of one train step: forward, and twice that backward. */
function bertStepFlops(b: number, s: number, p: number, c: typeof config): number {
  const { hiddenSize: h, intermediateSize: i, numHiddenLayers: l, vocabSize: v } = c;
  const tokens = b * s;
  const perLayer = 2 * tokens * (4 * h * h + 2 * h * i) + 2 * 2 * b * s * s * h;
  const heads = 2 * b * p * (h * h + h * v) + 2 * b * h * h;
  return 3 * (l * perLayer + heads);
}

/** Valid-looking samples (about 15% of positions masked, at most maskedPositions), as the trainer's warm-up uses. */
function randomBatch(): BertBatchTensors {
  const batch = samplesToTensors(fakeBatch(batchSize, seq, maskedPositions, 0, config.vocabSize));
  Tensor.realizeAll(batch);
  return batch;
}

const started = performance.now();
Tensor.manualSeed(0);
const model = new BertForPretraining(config);
const { optimizer, scheduler } = createBertOptimizer(model, { lr: 1e-4, totalSteps: 1000, warmupSteps: 0 });
const step = jit(makeBertTrainStep({ model, optimizer, scheduler }, trainStepOptionsFromEnv(dtypes.float16)));
const batch = randomBatch();
const losses: number[] = [];
for (let warm = 0; warm < 2; warm++) {
  const t = performance.now();
  losses.push(step(...batch).item());
  console.error(
    `bert warm-up step ${warm + 1}: ${((performance.now() - t) / 1000).toFixed(1)} s (compile${warm ? ", capture" : ""})`,
  );
}
const times: number[] = [];
let kernels = 0;
for (let i = 0; i < steps; i++) {
  GlobalCounters.reset();
  const t = performance.now();
  losses.push(step(...batch).item());
  times.push(performance.now() - t);
  kernels = GlobalCounters.kernelCount;
}
times.sort((a, b) => a - b);

/**
 * How the CUDA backend shapes a kernel (names alone mix tensor-core and loop kernels of one shape): `kind` for the
 * sums by form, `label` (step_kernels.ts formLabel) for the profile file, as the roofline names its groups.
 */
const formCache = new Map<KernelIR, { kind: string; label: string }>();
function formOf(kernel: KernelIR): { kind: string; label: string } {
  if (!values.device.startsWith("CUDA")) return { kind: values.device, label: values.device };
  let form = formCache.get(kernel);
  if (!form) {
    const f = cudaForm(kernel);
    const kind =
      f.kind === "tensorCores"
        ? "tensor cores"
        : groupSize(f.kernel) > 0
          ? "group"
          : f.kernel.name.startsWith("E")
            ? "elementwise"
            : "loops";
    form = { kind, label: formLabel(f) };
    formCache.set(kernel, form);
  }
  return form;
}

// One more step with every kernel waited for and timed: where the device time goes, by kernel name and form.
const byName = new Map<string, { count: number; seconds: number; flops: number; bytes: number }>();
const byForm: Record<string, { count: number; seconds: number }> = {};
const byLabel = new Map<string, { name: string; form: string; count: number; seconds: number }>();
const timer = ({ kernel }: { kernel: KernelIR }, seconds: number) => {
  const { kind: form, label } = formOf(kernel),
    key = `${kernel.name} (${form})`;
  const entry = byName.get(key) ?? { count: 0, seconds: 0, flops: 0, bytes: 0 };
  byName.set(key, {
    count: entry.count + 1,
    seconds: entry.seconds + seconds,
    flops: entry.flops + kernel.flops,
    bytes: entry.bytes + estimateBytes(kernel),
  });
  const f = (byForm[form] ??= { count: 0, seconds: 0 });
  f.count++;
  f.seconds += seconds;
  const group = byLabel.get(`${kernel.name} ${label}`) ?? { name: kernel.name, form: label, count: 0, seconds: 0 };
  group.count++;
  group.seconds += seconds;
  byLabel.set(`${kernel.name} ${label}`, group);
};
kernelTimers.add(timer);
step(...batch).item();
kernelTimers.delete(timer);
const kernelSeconds = [...byName.values()].reduce((sum, e) => sum + e.seconds, 0);
const profile = [...byName.entries()]
  .sort((a, b) => b[1].seconds - a[1].seconds)
  .slice(0, 30)
  .map(([name, e]) => ({
    name,
    count: e.count,
    ms: +(e.seconds * 1e3).toFixed(3),
    share: +(e.seconds / kernelSeconds).toFixed(4),
    tflops: +(e.flops / e.seconds / 1e12).toFixed(2),
    gbps: +(e.bytes / e.seconds / 1e9).toFixed(1),
  }));
if (values["profile-out"]) {
  const measured: KernelProfile = {
    format: PROFILE_FORMAT,
    device: values.device,
    preset: values.preset,
    layers: config.numHiddenLayers,
    batch: batchSize,
    seq,
    kernels: [...byLabel.values()]
      .sort((a, b) => b.seconds - a.seconds)
      .map((g) => ({ name: g.name, form: g.form, count: g.count, ms: +(g.seconds * 1e3).toFixed(4) })),
  };
  writeFileSync(values["profile-out"], `${JSON.stringify(measured, null, 1)}\n`);
}
const ms = times[Math.floor(times.length / 2)]!;
const flops = bertStepFlops(batchSize, seq, maskedPositions, config);
console.log(
  JSON.stringify({
    model: `BERT-${values.preset} (${config.numHiddenLayers} layers) float16`,
    device: values.device,
    batch: batchSize,
    seq,
    steps,
    ms_per_step: +ms.toFixed(2),
    tflops: +(flops / (ms / 1e3) / 1e12).toFixed(2),
    step_flops: flops,
    sequences_per_s: +((batchSize * 1e3) / ms).toFixed(1),
    kernels_per_step: kernels,
    losses: losses.map((l) => +l.toFixed(4)),
    total_s: +((performance.now() - started) / 1000).toFixed(1),
    kernel_ms_sum: +(kernelSeconds * 1e3).toFixed(2),
    distinct_kernels: byName.size,
    ms_by_form: Object.fromEntries(
      Object.entries(byForm).map(([form, e]) => [form, { kernels: e.count, ms: +(e.seconds * 1e3).toFixed(2) }]),
    ),
    profile,
  }),
);
