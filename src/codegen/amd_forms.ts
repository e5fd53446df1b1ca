// How a kernel is shaped for an AMD GPU: RDNA3's WMMA tiles (renderer/hip_wmma.ts) where the plain lowering is a
// 16-bit matmul big enough for them and the GPU has the instructions (gfx11), else CUDA's GPU-shaped loops
// (cuda_forms.ts: the same grid, group reduces, upcasts and vectors), rendered as HIP by the same renderer.
// TC=0 turns WMMA off, as it turns tensor cores off on CUDA.
import { getenv } from "../helpers.ts";
import type { KernelIR } from "./ir.ts";
import { type CudaForm, gpuLoopForm, plainLowering } from "./cuda_forms.ts";
import { type CudaKernelSource, type Restrict, renderCuda } from "../renderer/cuda.ts";
import { type MatmulPattern, matchMatmul } from "../renderer/cuda_matmul.ts";
import { renderMatmulWmma, worthWmma } from "../renderer/hip_wmma.ts";

/** What the AMD backend renders for one kernel. */
export type AmdForm =
  | { readonly kind: "wmma"; readonly pattern: MatmulPattern }
  | (CudaForm & { readonly kind: "loops" });

/** Whether `arch` has RDNA3's WMMA (gfx1100-gfx1103, gfx1150, gfx1151; RDNA4's differ and are not rendered). */
export const hasWmma = (arch: string): boolean => /^gfx11[05][0-3]$/.test(arch);

/** The form of `kernel` on an AMD GPU of `arch` (e.g. "gfx1100"). */
export function amdForm(kernel: KernelIR, arch: string): AmdForm {
  const lowered = plainLowering(kernel);
  if (hasWmma(arch) && getenv("TC", 1) !== 0) {
    const pattern = matchMatmul(lowered.plain);
    if (pattern && worthWmma(pattern)) return { kind: "wmma", pattern };
  }
  return gpuLoopForm(kernel, lowered);
}

/** Renders a form as the HIP kernel `fnName` (the module's source starts with HIP_PRELUDE). */
export function renderAmdForm(form: AmdForm, fnName: string, restrict: Restrict): CudaKernelSource {
  return form.kind === "wmma"
    ? renderMatmulWmma(form.pattern, fnName, restrict)
    : renderCuda(form.kernel, fnName, { restrict, group: form.group, rows: form.rows });
}
