// Preloaded (`--import`) into a run of the op tests: renders every kernel they execute for CUDA, as the
// CUDA backend would (cuda_forms.ts) and in its other launch forms, and for an AMD gfx1100 as the AMD backend
// would (amd_forms.ts), and appends them as JSON lines to `$TSGRAD_CAPTURE_DIR/<pid>.jsonl`, so that a test can
// compile them all with nvcc and hipcc. Function names are `tg_kernel`, renamed by the compiling test.
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { execObservers } from "../../src/engine/realize.ts";
import { kernelSpecOf, lowerKernel } from "../../src/codegen/lower.ts";
import { NO_OPTS } from "../../src/codegen/opts.ts";
import { groupSize, renderCuda } from "../../src/renderer/cuda.ts";
import { matchMatmul, renderMatmulTC } from "../../src/renderer/cuda_matmul.ts";
import { cudaForm, renderCudaForm } from "../../src/codegen/cuda_forms.ts";
import { amdForm, renderAmdForm } from "../../src/codegen/amd_forms.ts";

/** One kernel's CUDA sources: `chosen` is what the backend launches; the others are forms it may take. */
export interface CapturedKernel {
  readonly name: string;
  readonly chosen: string;
  /** Buffers passed twice (in-place assigns): no __restrict__. */
  readonly aliased: string;
  /** The other reduce mode (group vs one thread per output), for reduce kernels. */
  readonly otherMode?: string;
  /** Tensor cores, for kernels whose plain form is a 16-bit matmul (even when too small to be chosen). */
  readonly tensorCores?: string;
  /** HIP C++ as the AMD backend launches it on a gfx1100 (WMMA tiles or loops), and its form's kind. */
  readonly amd: string;
  readonly amdKind: string;
}

function capture(kernel: Parameters<typeof cudaForm>[0]): CapturedKernel {
  const form = cudaForm(kernel);
  const spec = kernelSpecOf(kernel);
  const pattern = matchMatmul(spec ? lowerKernel(spec, NO_OPTS) : kernel);
  const loops = form.kind === "loops" ? form.kernel : undefined;
  const amd = amdForm(kernel, "gfx1100");
  return {
    name: kernel.name,
    chosen: renderCudaForm(form, "tg_kernel", true).code,
    aliased: renderCudaForm(form, "tg_kernel", false).code,
    otherMode: loops?.name.startsWith("r")
      ? renderCuda(loops, "tg_kernel", { restrict: true, group: groupSize(loops) > 0 ? 0 : 128 }).code
      : undefined,
    tensorCores: pattern ? renderMatmulTC(pattern, "tg_kernel", true).code : undefined,
    amd: renderAmdForm(amd, "tg_kernel", true).code,
    amdKind: amd.kind,
  };
}

const dir = process.env.TSGRAD_CAPTURE_DIR;
if (dir) {
  const file = join(dir, `${process.pid}.jsonl`);
  const seen = new Set<object>();
  execObservers.add((item) => {
    if (item.kind !== "kernel" || seen.has(item.kernel)) return;
    seen.add(item.kernel);
    appendFileSync(file, `${JSON.stringify(capture(item.kernel))}\n`);
  });
}
