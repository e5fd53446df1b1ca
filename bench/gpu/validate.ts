// Kernel-by-kernel check of a BERT train step on a device (CUDA) against a reference device (CPU): every kernel's
// inputs are copied out before it runs, the same kernel runs on the reference with them, and the outputs are compared.
// Reports the kernels that disagree (with their CUDA source), and the first kernel whose output holds NaN or infinity
// where the reference's does not. Prints one JSON object. Usage: node validate.mjs [--batch 2] [--seq 128] [--preset
// large] [--layers 2] [--steps 2] [--device CUDA] [--reference CPU]
import { argsWithUsage } from "../args.ts";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import { Buffer } from "../../src/device.ts";
import type { TypedArray } from "../../src/dtype.ts";
import { f16BitsToF32, bf16BitsToF32 } from "../../src/dtype.ts";
import type { ExecItem } from "../../src/engine/schedule.ts";
import { execObservers, kernelTimers } from "../../src/engine/realize.ts";
import { backendOf } from "../../src/engine/backend.ts";
import { cudaForm, renderCudaForm } from "../../src/codegen/cuda_forms.ts";
import { BERT_PRESETS, BertForPretraining, type BertPresetName } from "../../models/bert.ts";
import { createBertOptimizer, makeBertTrainStep, trainStepOptionsFromEnv } from "../../models/bert_train_step.ts";
import { fakeBatch, samplesToTensors } from "../../mlperf/bert/data/loader.ts";

const { values } = argsWithUsage(
  "Usage: node validate.mjs [--batch 2] [--seq 128] [--preset large] [--layers 2] [--steps 2] [--device CUDA] [--reference CPU] [--float float16]",
  {
    batch: { type: "string", default: "2" },
    seq: { type: "string", default: "128" },
    preset: { type: "string", default: "large" },
    layers: { type: "string", default: "2" },
    steps: { type: "string", default: "2" },
    device: { type: "string", default: "CUDA" },
    reference: { type: "string", default: "CPU" },
    float: { type: "string", default: "float16" },
  },
);
const [batchSize, seq] = [Number(values.batch), Number(values.seq)];
const config = { ...BERT_PRESETS[values.preset as BertPresetName], numHiddenLayers: Number(values.layers) };
Device.DEFAULT = values.device;
Tensor.defaultFloat = values.float === "float32" ? dtypes.float32 : dtypes.float16;

/** Elements as numbers (16-bit floats decoded). */
function numbers(buffer: Buffer, data: TypedArray): ArrayLike<number> {
  if (buffer.dtype === dtypes.float16) return Array.from(data as Uint16Array, f16BitsToF32);
  if (buffer.dtype === dtypes.bfloat16) return Array.from(data as Uint16Array, bf16BitsToF32);
  return data as ArrayLike<number>;
}

/** Largest |got - want| / (1 + |want|) (Infinity where one is finite and the other is not), and its index. */
function compare(
  got: ArrayLike<number>,
  want: ArrayLike<number>,
): { error: number; at: number; nonFinite: number; refNonFinite: number } {
  let error = 0,
    at = -1,
    nonFinite = 0,
    refNonFinite = 0;
  for (let i = 0; i < want.length; i++) {
    const [g, w] = [Number(got[i]), Number(want[i])];
    if (!Number.isFinite(g)) nonFinite++;
    if (!Number.isFinite(w)) refNonFinite++;
    const e =
      Number.isFinite(g) && Number.isFinite(w)
        ? Math.abs(g - w) / (1 + Math.abs(w))
        : Object.is(g, w) || (Number.isNaN(g) && Number.isNaN(w))
          ? 0
          : Infinity;
    if (e > error) [error, at] = [e, i];
  }
  return { error, at, nonFinite, refNonFinite };
}

const tolerance = (b: Buffer) =>
  b.dtype === dtypes.float16 ? 2e-2 : b.dtype === dtypes.bfloat16 ? 5e-2 : b.dtype.kind === "float" ? 2e-3 : 0;

const snapshots = new Map<ExecItem, TypedArray[]>();
const reports: object[] = [];
let firstNonFinite: object | undefined;
let checked = 0;
const shown = new Set<string>();
execObservers.add((item) => {
  if (item.kind === "kernel")
    snapshots.set(
      item,
      item.buffers.map((b) => b.toTypedArray()),
    );
});
kernelTimers.add((item) => {
  const inputs = snapshots.get(item)!;
  snapshots.delete(item);
  checked++;
  // the reference runs the same kernel on copies (a buffer passed twice stays one copy)
  const copies = new Map<Buffer, Buffer>();
  const refBuffers = item.buffers.map((b, i) => {
    let copy = copies.get(b);
    if (!copy) copies.set(b, (copy = new Buffer(values.reference, b.size, b.dtype).copyin(inputs[i]!)));
    return copy;
  });
  backendOf(values.reference).compile(item.kernel).run(refBuffers, { wait: true });
  const out = item.buffers[0]!;
  const result = compare(numbers(out, out.toTypedArray()), numbers(out, refBuffers[0]!.toTypedArray()));
  const form = cudaForm(item.kernel);
  const entry = { index: checked, name: item.kernel.name, form: form.kind, dtype: out.dtype.name, ...result };
  if (result.nonFinite > result.refNonFinite && !firstNonFinite) firstNonFinite = entry;
  if (result.error > tolerance(out)) {
    reports.push(entry);
    const key = `${item.kernel.name}|${form.kind}`;
    if (!shown.has(key) && shown.size < 6) {
      shown.add(key);
      console.error(
        `// kernel ${checked} ${item.kernel.name}: max error ${result.error} at ${result.at}\n${renderCudaForm(form, "tg_kernel", true).code}\n`,
      );
    }
  }
});

Tensor.manualSeed(0);
const model = new BertForPretraining(config);
const { optimizer, scheduler } = createBertOptimizer(model, { lr: 1e-4, totalSteps: 1000, warmupSteps: 0 });
const step = makeBertTrainStep({ model, optimizer, scheduler }, trainStepOptionsFromEnv(Tensor.defaultFloat));
const batch = samplesToTensors(fakeBatch(batchSize, seq, Math.min(20, seq), 0, config.vocabSize));
const losses: number[] = [];
for (let i = 0; i < Number(values.steps); i++) losses.push(step(...batch).item());
console.log(
  JSON.stringify({
    model: `BERT-${values.preset} (${config.numHiddenLayers} layers) ${values.float}`,
    device: values.device,
    reference: values.reference,
    batch: batchSize,
    seq,
    losses,
    kernels_checked: checked,
    disagreeing: reports.length,
    first_non_finite: firstNonFinite ?? null,
    reports: reports.slice(0, 40),
  }),
);
