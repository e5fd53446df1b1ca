// HIP C++ as a GPU language of gpu_programs.ts: each kernel's form on the AMD GPU (codegen/amd_forms.ts: RDNA3's
// WMMA tiles or CUDA's GPU-shaped loops), rendered as HIP (renderer/hip.ts's prelude), compiled by the runtime into
// one code object per batch of kernels (hip_compile.ts: hiprtc or hipcc, cached on disk), loaded and launched by it
// (runtime/hip.ts, gpu.ts). BEAM searches the loop options as on CUDA; WMMA tiles have no search (yet).
import type { KernelIR } from "../codegen/ir.ts";
import { type AmdForm, amdForm, renderAmdForm } from "../codegen/amd_forms.ts";
import { debugLevel } from "../helpers.ts";
import { HIP_PRELUDE } from "../renderer/hip.ts";
import { compileHip } from "../runtime/hip_compile.ts";
import type { GpuDevice } from "../runtime/gpu.ts";
import type { Program } from "./backend.ts";
import { gpuPrograms } from "./gpu_programs.ts";

/** Turns kernels into programs on the AMD GPU `device` (named, with its architecture, at DEBUG >= 1). */
export function amdPrograms(device: GpuDevice): (kernel: KernelIR) => Program {
  if (debugLevel() >= 1) console.error(`tsgrad: ${device.name} ${device.arch}`);
  return gpuPrograms<AmdForm>({
    device,
    form: (kernel) => amdForm(kernel, device.arch),
    render: renderAmdForm,
    prelude: HIP_PRELUDE,
    compile: (source, what) => compileHip(source, device.arch, what),
  });
}
