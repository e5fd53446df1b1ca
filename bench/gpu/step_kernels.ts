// The kernels of one jitted BERT float16 train step as the CUDA backend would launch them, without a GPU: the step
// runs on a NULL device whose kernels do nothing, and each kernel is named by its CUDA form (cuda_forms.ts). Shared
// by bench/gpu/roofline.ts (the step's lower bound) and bench/gpu/bert_step.ts (the measured profile it compares
// with), with the profile file's format. Run alone, it prints each kernel of the step in launch order, one JSON
// line each (name, form, FLOPs, bytes moved at least), for diffing two commits' steps.
// Usage: npx tsx bench/gpu/step_kernels.ts [--batch 8] [--seq 512] [--preset large] [--layers N]
import { pathToFileURL } from "node:url";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import type { KernelIR } from "../../src/codegen/ir.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { registerBackend } from "../../src/engine/backend.ts";
import { type CudaForm, cudaForm } from "../../src/codegen/cuda_forms.ts";
import { groupSize } from "../../src/renderer/cuda.ts";
import { describeTensorCoreKernel } from "../../src/renderer/cuda_matmul.ts";
import { estimateBytes } from "../../src/codegen/lower.ts";
import { BERT_PRESETS, type BertConfig, BertForPretraining, type BertPresetName } from "../../models/bert.ts";
import { createBertOptimizer, makeBertTrainStep, trainStepOptionsFromEnv } from "../../models/bert_train_step.ts";
import { fakeBatch, samplesToTensors } from "../../mlperf/bert/data/loader.ts";
import { benchArgs } from "../args.ts";

/** Makes the default device a NULL one (no memory, kernels that do nothing) and the default float float16. */
export function useNullDevice(): void {
  registerBackend("NULL", () => ({
    name: "NULL",
    allocate: (bytes) => ({ bytes }),
    copyout: (_raw, bytes) => new Uint8Array(bytes),
    copyin: () => {},
    compile: () => ({ run: () => 0 }),
  }));
  Device.DEFAULT = "NULL";
  Tensor.defaultFloat = dtypes.float16;
}

/** The kernels `fn` launches, in order. */
export function recordKernels(fn: () => void): KernelIR[] {
  return recordItems(fn).items.flatMap((item) => (item.kind === "kernel" ? [item.kernel] : []));
}

export interface BertStepShape {
  readonly preset: BertPresetName;
  readonly batch: number;
  readonly seq: number;
  /** Encoder layers, where not the preset's. */
  readonly layers?: number;
}

/** The command-line options that give a step's shape (stepShapeOf), BERT-large at batch 8 by default. */
export const STEP_SHAPE_OPTIONS = {
  batch: { type: "string", default: "8" },
  seq: { type: "string", default: "512" },
  preset: { type: "string", default: "large" },
  layers: { type: "string" },
} as const;

export function stepShapeOf(values: { batch: string; seq: string; preset: string; layers?: string }): BertStepShape {
  return {
    preset: values.preset as BertPresetName,
    batch: Number(values.batch),
    seq: Number(values.seq),
    layers: values.layers === undefined ? undefined : Number(values.layers),
  };
}

/** The BERT config of a step's shape: the preset, with its layers replaced where `layers` is given. */
export function bertConfigOf(shape: BertStepShape): BertConfig {
  const preset = BERT_PRESETS[shape.preset];
  if (!preset) throw new Error(`preset ${shape.preset}: expected one of ${Object.keys(BERT_PRESETS).join(", ")}`);
  return { ...preset, numHiddenLayers: shape.layers ?? preset.numHiddenLayers };
}

/**
 * The kernels of one float16 train step on the default device (useNullDevice first): the second step, as a jitted
 * run captures it (the first also makes one-time copies).
 */
export function bertStepKernels(shape: BertStepShape): KernelIR[] {
  const config = bertConfigOf(shape);
  const model = new BertForPretraining(config);
  const { optimizer, scheduler } = createBertOptimizer(model, { lr: 1e-4, totalSteps: 1000, warmupSteps: 0 });
  const step = makeBertTrainStep({ model, optimizer, scheduler }, trainStepOptionsFromEnv(dtypes.float16));
  const batch = samplesToTensors(fakeBatch(shape.batch, shape.seq, Math.min(76, shape.seq), 0, config.vocabSize));
  Tensor.realizeAll([...batch, ...optimizer.params]);
  Tensor.realizeAll([step(...batch), ...Tensor.pendingAssigns()]);
  return recordKernels(() => Tensor.realizeAll([step(...batch), ...Tensor.pendingAssigns()]));
}

/**
 * How the CUDA backend shapes a kernel, in words: "tensor cores (A <path>; B <path>[; k split N])", "group N",
 * "group 32, a warp a row" or "loops". A kernel's name and this label name a group of a step's kernels in
 * bench/gpu/forms.ts, the roofline and the measured profile.
 */
export function formLabel(form: CudaForm): string {
  if (form.kind === "tensorCores") {
    const tc = describeTensorCoreKernel(form.pattern);
    return `tensor cores (A ${tc.a}; B ${tc.b}${tc.splits > 1 ? `; k split ${tc.splits}` : ""})`;
  }
  if (form.rows) return "group 32, a warp a row";
  const group = form.group ?? groupSize(form.kernel);
  return group > 0 ? `group ${group}` : "loops";
}

/** The three kinds of form: tensor-core tiles, group reductions (a block's threads share a sum), plain loops. */
export type FormClass = "tensor" | "group" | "loops";

export const formClassOf = (form: CudaForm): FormClass =>
  form.kind === "tensorCores" ? "tensor" : formLabel(form) === "loops" ? "loops" : "group";

/** Each kernel's CUDA form, computed once per distinct kernel (a jitted step repeats many). */
export function formsOf(kernels: readonly KernelIR[]): CudaForm[] {
  const cache = new Map<KernelIR, CudaForm>();
  return kernels.map((kernel) => {
    const form = cache.get(kernel) ?? cudaForm(kernel);
    cache.set(kernel, form);
    return form;
  });
}

/** The format name of a measured per-kernel profile (bench/gpu/bert_step.ts --profile-out). */
export const PROFILE_FORMAT = "tsgrad-kernel-profile/1";

/**
 * One step's kernel time as measured on a device, each kernel waited for and timed alone (no graph): a group's
 * `ms` is the sum over its `count` launches in the step. The step's shape is there so that a reader can check it
 * compares like with like.
 */
export interface KernelProfile {
  readonly format: typeof PROFILE_FORMAT;
  readonly device?: string;
  readonly preset?: string;
  readonly layers?: number;
  readonly batch?: number;
  readonly seq?: number;
  readonly kernels: readonly {
    readonly name: string;
    readonly form: string;
    readonly count: number;
    readonly ms: number;
  }[];
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { values } = benchArgs(import.meta.url, STEP_SHAPE_OPTIONS);
  useNullDevice();
  const kernels = bertStepKernels(stepShapeOf(values));
  const forms = formsOf(kernels);
  for (const [i, kernel] of kernels.entries())
    console.log(
      JSON.stringify({
        name: kernel.name,
        form: formLabel(forms[i]!),
        flops: kernel.flops,
        bytes: estimateBytes(kernel),
      }),
    );
}
