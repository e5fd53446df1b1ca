// A roofline model of one jitted BERT float16 train step on an H200, without a GPU: for each kernel of the step (a
// NULL device runs it; bench/gpu/step_kernels.ts), its FLOPs (the lowering's count of arithmetic operations) and
// the bytes it moves at least (every buffer's touched span read or written once, lower.ts estimateBytes), hence its
// least time: max(FLOPs / compute peak, bytes / HBM bandwidth), the compute peak the tensor cores' for kernels in
// the tensor-core form and the CUDA cores' float32 rate for the rest. The sum is the step's lower bound with its
// launches replayed as a CUDA graph; with each launch taking at least --launch-us (launches without a graph), the
// second sum. Peaks are the H200 SXM datasheet's (below). `--profile FILE` puts a measured per-kernel profile
// (bench/gpu/bert_step.ts --profile-out) beside the bounds, its groups ranked by measured minus bound. Prints JSON.
// Usage: npx tsx bench/gpu/roofline.ts [--batch 8] [--seq 512] [--preset large] [--layers N] [--profile FILE]
//        [--top 10] [--hbm-tbs 4.8] [--tc-tflops 990] [--fp32-tflops 67] [--launch-us 2]
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import type { KernelIR } from "../../src/codegen/ir.ts";
import type { CudaForm } from "../../src/codegen/cuda_forms.ts";
import { estimateBytes } from "../../src/codegen/lower.ts";
import { benchArgs } from "../args.ts";
import {
  type FormClass,
  type KernelProfile,
  PROFILE_FORMAT,
  STEP_SHAPE_OPTIONS,
  bertConfigOf,
  bertStepKernels,
  formClassOf,
  formLabel,
  formsOf,
  stepShapeOf,
  useNullDevice,
} from "./step_kernels.ts";

/** A GPU's peaks, per second. */
export interface Peaks {
  readonly hbmBytes: number;
  /** Dense float16 multiply-adds on tensor cores (float32 accumulation), as FLOPs. */
  readonly tensorFlops: number;
  /** float32 on the CUDA cores: what every kernel outside the tensor-core form gets. */
  readonly fp32Flops: number;
  /** The least time of a launch without a graph (the host's launch rate). */
  readonly launchSeconds: number;
}

// NVIDIA's H200 datasheet (SXM): HBM3e 4.8 TB/s, FP16 tensor core 1,979 TFLOP/s with sparsity (989.5 dense), FP32
// 67 TFLOP/s. Assumptions: a kernel outside tensor cores runs at the float32 rate (its 16-bit math is converted
// and accumulated in float32; integer work such as dropout's Threefry counts at the same rate), and a launch
// without a graph costs ~2 us of host time (CUDA's usual figure); a graph's launches are taken as free.
export const H200: Peaks = { hbmBytes: 4.8e12, tensorFlops: 990e12, fp32Flops: 67e12, launchSeconds: 2e-6 };

/** One kernel's least time: the slower of its compute and its memory traffic at the peaks. */
export interface KernelBound {
  readonly name: string;
  readonly form: string;
  readonly formClass: FormClass;
  readonly flops: number;
  readonly bytes: number;
  readonly computeSeconds: number;
  readonly memorySeconds: number;
  readonly seconds: number;
}

export function kernelBound(kernel: KernelIR, form: CudaForm, peaks: Peaks): KernelBound {
  const formClass = formClassOf(form);
  const bytes = estimateBytes(kernel);
  const computeSeconds = kernel.flops / (formClass === "tensor" ? peaks.tensorFlops : peaks.fp32Flops);
  const memorySeconds = bytes / peaks.hbmBytes;
  return {
    name: kernel.name,
    form: formLabel(form),
    formClass,
    flops: kernel.flops,
    bytes,
    computeSeconds,
    memorySeconds,
    seconds: Math.max(computeSeconds, memorySeconds),
  };
}

/** The kernels of one name and form, as bench/gpu/forms.ts groups them. */
export interface BoundGroup {
  readonly name: string;
  readonly form: string;
  readonly formClass: FormClass;
  count: number;
  flops: number;
  bytes: number;
  /** The sum of its kernels' bounds. */
  seconds: number;
  /** The part of `seconds` spent in kernels whose compute binds. */
  computeBoundSeconds: number;
}

export const groupKey = (name: string, form: string): string => `${name} ${form}`;

/** The step's kernels grouped by name and form, in order of first launch. */
export function groupBounds(bounds: readonly KernelBound[]): BoundGroup[] {
  const groups = new Map<string, BoundGroup>();
  for (const b of bounds) {
    const key = groupKey(b.name, b.form);
    let group = groups.get(key);
    if (!group) {
      group = {
        name: b.name,
        form: b.form,
        formClass: b.formClass,
        count: 0,
        flops: 0,
        bytes: 0,
        seconds: 0,
        computeBoundSeconds: 0,
      };
      groups.set(key, group);
    }
    group.count++;
    group.flops += b.flops;
    group.bytes += b.bytes;
    group.seconds += b.seconds;
    if (b.computeSeconds > b.memorySeconds) group.computeBoundSeconds += b.seconds;
  }
  return [...groups.values()];
}

/** Totals of a set of kernels: how many, FLOPs, bytes, the summed bound with graphs and without. */
export function totalsOf(bounds: readonly KernelBound[], peaks: Peaks) {
  return {
    kernels: bounds.length,
    flops: bounds.reduce((sum, b) => sum + b.flops, 0),
    bytes: bounds.reduce((sum, b) => sum + b.bytes, 0),
    seconds: bounds.reduce((sum, b) => sum + b.seconds, 0),
    secondsWithLaunches: bounds.reduce((sum, b) => sum + Math.max(b.seconds, peaks.launchSeconds), 0),
  };
}

/** A measured group beside its bound. */
export interface ProfileGap {
  readonly name: string;
  readonly form: string;
  readonly count: number;
  readonly measuredCount: number;
  readonly measuredMs: number;
  readonly boundMs: number;
  readonly gapMs: number;
  /** measured / bound */
  readonly ratio: number;
}

/**
 * The measured profile's groups beside the model's, ranked by gap (measured - bound, the time there is to win);
 * measured groups the model has no kernel for are listed apart, not guessed at.
 */
export function compareProfile(groups: readonly BoundGroup[], profile: KernelProfile) {
  const byKey = new Map(groups.map((g) => [groupKey(g.name, g.form), g]));
  const gaps: ProfileGap[] = [];
  const unmatched: KernelProfile["kernels"][number][] = [];
  for (const measured of profile.kernels) {
    const group = byKey.get(groupKey(measured.name, measured.form));
    if (!group) {
      unmatched.push(measured);
      continue;
    }
    const boundMs = group.seconds * 1e3;
    gaps.push({
      name: measured.name,
      form: measured.form,
      count: group.count,
      measuredCount: measured.count,
      measuredMs: measured.ms,
      boundMs,
      gapMs: measured.ms - boundMs,
      ratio: measured.ms / boundMs,
    });
  }
  return { gaps: gaps.sort((a, b) => b.gapMs - a.gapMs), unmatched };
}

/** A profile file, checked to be one and to be of the step's shape where it says which. */
export function readProfile(path: string, expected: Partial<KernelProfile>): KernelProfile {
  const profile = JSON.parse(readFileSync(path, "utf8")) as KernelProfile;
  if (profile.format !== PROFILE_FORMAT || !Array.isArray(profile.kernels))
    throw new Error(`${path}: not a kernel profile (expected "format": "${PROFILE_FORMAT}" and a "kernels" list)`);
  for (const field of ["preset", "layers", "batch", "seq"] as const)
    if (profile[field] !== undefined && profile[field] !== expected[field])
      throw new Error(`${path}: measured with ${field} ${profile[field]}, the model is of ${field} ${expected[field]}`);
  return profile;
}

const round = (x: number, digits: number): number => +x.toFixed(digits);

/** The roofline's JSON report of a step's kernels (and forms), with the profile's gaps if one is given. */
export function rooflineReport(
  kernels: readonly KernelIR[],
  forms: readonly CudaForm[],
  peaks: Peaks,
  { top = 10, profile }: { top?: number; profile?: KernelProfile } = {},
) {
  const bounds = kernels.map((kernel, i) => kernelBound(kernel, forms[i]!, peaks));
  const groups = groupBounds(bounds);
  const totals = totalsOf(bounds, peaks);
  const byForm = Object.fromEntries(
    (["tensor", "group", "loops"] as const).map((formClass) => {
      const t = totalsOf(
        bounds.filter((b) => b.formClass === formClass),
        peaks,
      );
      return [
        formClass,
        {
          kernels: t.kernels,
          gflop: round(t.flops / 1e9, 2),
          gb: round(t.bytes / 1e9, 3),
          bound_ms: round(t.seconds * 1e3, 3),
        },
      ];
    }),
  );
  const computeBound = bounds.filter((b) => b.computeSeconds > b.memorySeconds);
  const compared = profile ? compareProfile(groups, profile) : undefined;
  const measuredMs = profile ? profile.kernels.reduce((sum, k) => sum + k.ms, 0) : 0;
  return {
    peaks: {
      hbm_tbs: peaks.hbmBytes / 1e12,
      tc_tflops: peaks.tensorFlops / 1e12,
      fp32_tflops: peaks.fp32Flops / 1e12,
      launch_us: peaks.launchSeconds * 1e6,
    },
    kernels: totals.kernels,
    distinct_groups: groups.length,
    lower_bound_ms: round(totals.seconds * 1e3, 3),
    lower_bound_ms_with_launch_floor: round(totals.secondsWithLaunches * 1e3, 3),
    total_gflop: round(totals.flops / 1e9, 2),
    total_gb: round(totals.bytes / 1e9, 3),
    bound_by_form: byForm,
    bound_ms_by_limit: {
      compute: round(computeBound.reduce((sum, b) => sum + b.seconds, 0) * 1e3, 3),
      memory: round((totals.seconds - computeBound.reduce((sum, b) => sum + b.seconds, 0)) * 1e3, 3),
    },
    top: [...groups]
      .sort((a, b) => b.seconds - a.seconds)
      .slice(0, top)
      .map((g) => ({
        name: g.name,
        form: g.form,
        count: g.count,
        gflop: round(g.flops / 1e9, 2),
        gb: round(g.bytes / 1e9, 3),
        bound_ms: round(g.seconds * 1e3, 3),
        limit: g.computeBoundSeconds > g.seconds / 2 ? "compute" : "memory",
        flop_per_byte: round(g.flops / g.bytes, 1),
      })),
    ...(compared
      ? {
          profile: {
            device: profile?.device,
            measured_ms: round(measuredMs, 3),
            gap_ms: round(measuredMs - totals.seconds * 1e3, 3),
            unmatched_groups: compared.unmatched.length,
            unmatched_ms: round(
              compared.unmatched.reduce((sum, k) => sum + k.ms, 0),
              3,
            ),
            by_gap: compared.gaps.slice(0, top).map((g) => ({
              name: g.name,
              form: g.form,
              count: g.count,
              ...(g.measuredCount !== g.count ? { measured_count: g.measuredCount } : {}),
              measured_ms: round(g.measuredMs, 3),
              bound_ms: round(g.boundMs, 3),
              gap_ms: round(g.gapMs, 3),
              ratio: round(g.ratio, 1),
            })),
          },
        }
      : {}),
  };
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { values } = benchArgs(import.meta.url, {
    ...STEP_SHAPE_OPTIONS,
    profile: { type: "string" },
    top: { type: "string", default: "10" },
    "hbm-tbs": { type: "string", default: String(H200.hbmBytes / 1e12) },
    "tc-tflops": { type: "string", default: String(H200.tensorFlops / 1e12) },
    "fp32-tflops": { type: "string", default: String(H200.fp32Flops / 1e12) },
    "launch-us": { type: "string", default: String(H200.launchSeconds * 1e6) },
  });
  const shape = stepShapeOf(values);
  const config = bertConfigOf(shape);
  const peaks: Peaks = {
    hbmBytes: Number(values["hbm-tbs"]) * 1e12,
    tensorFlops: Number(values["tc-tflops"]) * 1e12,
    fp32Flops: Number(values["fp32-tflops"]) * 1e12,
    launchSeconds: Number(values["launch-us"]) * 1e-6,
  };
  const profile = values.profile
    ? readProfile(values.profile, { ...shape, layers: config.numHiddenLayers })
    : undefined;
  useNullDevice();
  const kernels = bertStepKernels(shape);
  const report = rooflineReport(kernels, formsOf(kernels), peaks, { top: Number(values.top), profile });
  console.log(
    JSON.stringify(
      {
        model: `BERT-${shape.preset} (${config.numHiddenLayers} layers) float16`,
        batch: shape.batch,
        seq: shape.seq,
        ...report,
      },
      null,
      1,
    ),
  );
}
