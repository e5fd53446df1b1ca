// How a kernel is shaped for a GPU: the tensor-core form when its plain lowering is a 16-bit matmul
// (TC=0 turns that off), else the loop IR lowered again with GPU options. The CPU heuristics' register
// tiles (up to 128 lanes) starve a GPU of threads; here a reduce with many outputs gets at most 4 x 4
// lanes and only while 2^16 threads remain, and reduces with few outputs stay plain for group mode.
import { getenv } from "../helpers.ts";
import type { KernelIR } from "../codegen/ir.ts";
import { kernelSpecOf, lowerKernel } from "../codegen/lower.ts";
import { NO_OPTS, type Upcast } from "../codegen/opts.ts";
import { axisFacts } from "../codegen/heuristics.ts";
import { mergeNestedLoops } from "../codegen/merge_loops.ts";
import { type CudaKernelSource, groupSize, renderCuda, splitOutputLoops } from "./cuda.ts";
import { type MatmulPattern, matchMatmul, renderMatmulTC, worthTensorCores } from "./cuda_matmul.ts";

/** What the CUDA backend renders for one kernel. */
export type CudaForm =
  | { readonly kind: "tensorCores"; readonly pattern: MatmulPattern }
  | { readonly kind: "loops"; readonly kernel: KernelIR };

/** Threads that must remain after upcasting for the GPU to stay busy. */
const MIN_THREADS = 1 << 16;

/** The form of `kernel` on CUDA. Kernels without a spec (hand-made IR) keep their loops as they are. */
export function cudaForm(kernel: KernelIR): CudaForm {
  const spec = kernelSpecOf(kernel);
  const plain = mergeNestedLoops(spec ? lowerKernel(spec, NO_OPTS) : kernel);
  if (getenv("TC", 1) !== 0) {
    const pattern = matchMatmul(plain);
    if (pattern && worthTensorCores(pattern)) return { kind: "tensorCores", pattern };
  }
  if (!spec) return { kind: "loops", kernel };
  return { kind: "loops", kernel: mergeNestedLoops(lowerKernel(spec, { ...NO_OPTS, upcast: gpuUpcasts(plain) })) };
}

/** Register tiles for reduces with many outputs: the axes whose loads are shared or contiguous, 4 (or 2) lanes each. */
function gpuUpcasts(plain: KernelIR): Upcast[] {
  if (!plain.name.startsWith("r") || groupSize(plain) > 0) return [];
  let threads = splitOutputLoops(plain).loops.reduce((n, l) => n * l.size, 1);
  const ranked = axisFacts(plain)
    .filter((f) => f.reuse > 0 || f.contiguous > 0)
    .sort((a, b) => 2 * b.reuse + b.contiguous - (2 * a.reuse + a.contiguous) || b.axis - a.axis);
  const upcast: Upcast[] = [];
  for (const f of ranked.slice(0, 2)) {
    const amount = [4, 2].find((n) => f.size % n === 0 && threads / n >= MIN_THREADS);
    if (!amount) continue;
    upcast.push({ axis: f.axis, amount });
    threads /= amount;
  }
  return upcast;
}

/** Renders a form as the kernel `fnName`. */
export function renderCudaForm(form: CudaForm, fnName: string, restrict: boolean): CudaKernelSource {
  return form.kind === "tensorCores" ? renderMatmulTC(form.pattern, fnName, restrict) : renderCuda(form.kernel, fnName, { restrict });
}
