// CUDA C as a GPU language of gpu_programs.ts: each kernel's form (codegen/cuda_forms.ts: tensor cores or GPU-shaped
// loops), rendered to CUDA C (renderer/cuda.ts, cuda_matmul.ts), compiled by the runtime into one module per
// batch of kernels (cuda_compile.ts: NVRTC or nvcc, cubins cached on disk), loaded and launched by it
// (runtime/cuda.ts, gpu.ts).
//
// How kernels map to the GPU:
// - the output loops are flattened onto the grid, one thread per output iteration (CUDA_BLOCK threads a
//   block, default 256), with a bounds check; reduces are loops inside the thread;
// - a long reduce with few outputs, or whose rows no two outputs share (softmax, norms), runs in "group"
//   mode: one block per output, its threads split the reduce loop and combine with warp shuffles (4096 or
//   more such rows of up to 4096: one warp a row, 8 rows a block, shuffles alone);
// - reduces with many outputs get small register tiles (up to 4 x 4 upcast lanes), aligned neighbouring
//   loads become float4/ushort4 loads;
// - big elementwise kernels take 4 (or 2) neighbours a thread along the axis their store steps along:
//   aligned loads and the store become vectors (8 bytes for 16-bit floats, 16 for float32);
// - a float32 sum of products of two float16 (or bfloat16) factors, whatever follows it, becomes a
//   tensor-core kernel (mma.sync m16n8k16, 128 x 128 x 32 tiles, fragments by ldmatrix, split-K for few
//   tiles and a long k, with a device workspace). Factors that are plain loads travel by cp.async through
//   a pipeline of 2-4 stages in dynamic shared memory (as deep as two blocks a multiprocessor allow: 4 on
//   an H100/H200, 2 on a 4090; TC_STAGES sets it); a factor computed from loads (a bias added first) is
//   evaluated while staging, rounded to 16 bits, through two stages; TC=0 turns tensor cores off;
// - on an H100/H200 (sm_90) a tile may use wgmma instead (warpgroups multiplying straight from shared
//   memory); modules with such a kernel compile for sm_90a;
// - BEAM=n searches the loop options on the GPU (timed with events) as on the CPU, and times each
//   tensor-core kernel at every tile of cuda_matmul.ts's lists (block and warp shapes, pipeline depths,
//   wgmma on sm_90); TC_TILE (e.g. 128x256x32:2x4, 128x128x64:wgmma) sets the tile instead. Winners are
//   cached on disk (engine/search.ts).
//
// Environment: CUDA_BLOCK, TC, TC_STAGES, TC_TILE, BEAM, DEBUG (>= 1 names each GPU's tile, >= 2 times each
// kernel with events).
// Semantics match the JS reference as the C backend does, except that float32 exp2/log2/sin use CUDA's
// float functions (within 2 ulp) and reduces may add in another order (group mode, tensor cores).
import type { Buffer } from "../device.ts";
import type { KernelIR } from "../codegen/ir.ts";
import { debugLevel } from "../helpers.ts";
import { type CudaForm, cudaForm, renderCudaForm } from "../codegen/cuda_forms.ts";
import { CUDA_PRELUDE } from "../renderer/cuda.ts";
import {
  type MatmulPattern,
  type TensorCoreTile,
  WGMMA_ARCH,
  renderMatmulTC,
  tensorCoreTile,
  tileCandidates,
  tileName,
} from "../renderer/cuda_matmul.ts";
import { compileCuda } from "../runtime/cuda_compile.ts";
import type { GpuDevice } from "../runtime/gpu.ts";
import type { Program } from "./backend.ts";
import { type GpuTarget, gpuPrograms, timeSources } from "./gpu_programs.ts";
import { searchChoice } from "./search.ts";

const tiles = new WeakMap<GpuDevice, TensorCoreTile>();

/**
 * The tile tensor-core kernels take on `device` unless BEAM chose another: TC_TILE's or the default, at the GPU's
 * depth.
 */
export function deviceTile(device: GpuDevice): TensorCoreTile {
  let tile = tiles.get(device);
  if (!tile) tiles.set(device, (tile = tensorCoreTile(device.sharedPerMultiprocessor, undefined, device.arch)));
  return tile;
}

/** CUDA C on `device`: its forms, the tile its tensor-core kernels take, NVRTC or nvcc for its architecture. */
function cudaTarget(device: GpuDevice): GpuTarget<CudaForm> {
  return {
    device,
    form: cudaForm,
    searchForm: (kernel, form) => {
      if (form.kind !== "tensorCores" || process.env.TC_TILE) return undefined;
      const candidates = tileCandidates(device.sharedPerMultiprocessor, form.pattern, device.arch);
      const byName = new Map(candidates.map((t) => [tileName(t), t]));
      const chosen = searchChoice(kernel, `CUDA ${device.arch}`, [...byName.keys()], (names) =>
        timeTiles(
          device,
          kernel,
          form.pattern,
          names.map((n) => byName.get(n)!),
        ),
      );
      return { ...form, tile: chosen ? byName.get(chosen) : undefined };
    },
    render: (form, fnName, restrict) => renderCudaForm(form, fnName, restrict, deviceTile(device)),
    prelude: CUDA_PRELUDE,
    compile: (source, what) => compileCuda(source, compileArch(device.arch, source), what),
  };
}

/** Turns kernels into programs on `device` (its tile chosen, and named at DEBUG >= 1, now). */
export function cudaPrograms(device: GpuDevice): (kernel: KernelIR) => Program {
  const tile = deviceTile(device);
  if (debugLevel() >= 1)
    console.error(`tsgrad: CUDA:${device.index} ${device.arch}, tensor-core tile ${tileName(tile)}`);
  return gpuPrograms(cudaTarget(device));
}

/**
 * The architecture a module is compiled for: the GPU's, or its "a" variant (sm_90a: code for that GPU
 * alone) where a kernel of the module (past the prelude, which defines the helpers) uses wgmma.
 */
export function compileArch(arch: string, source: string): string {
  const kernels = source.startsWith(CUDA_PRELUDE) ? source.slice(CUDA_PRELUDE.length) : source;
  return arch === WGMMA_ARCH && /\btg_wgmma_/.test(kernels) ? `${arch}a` : arch;
}

/**
 * Times a tensor-core kernel at each tile (seconds; Infinity where one fails to compile or launch), on
 * scratch buffers, or on `on` (the kernel's own buffers: the output then holds the last tile's result).
 */
export function timeTiles(
  device: GpuDevice,
  kernel: KernelIR,
  pattern: MatmulPattern,
  tiles: readonly TensorCoreTile[],
  on?: readonly Buffer[],
): number[] {
  return timeSources(
    cudaTarget(device),
    kernel,
    tiles.map((tile) => () => renderMatmulTC(pattern, "candidate", true, tile)),
    on,
  );
}
