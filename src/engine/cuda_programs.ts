// Kernels as programs on a CUDA device: each kernel's form (codegen/cuda_forms.ts: tensor cores or GPU-shaped
// loops), rendered to CUDA C (renderer/cuda.ts, cuda_matmul.ts), compiled by the runtime into one module per
// batch of kernels (cuda_compile.ts: NVRTC or nvcc, cubins cached on disk), loaded and launched by it
// (runtime/cuda.ts).
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
import { type Buffer, aliasedSlots } from "../device.ts";
import type { KernelIR } from "../codegen/ir.ts";
import { debugLevel } from "../helpers.ts";
import { type CudaForm, cudaForm, renderCudaForm } from "../codegen/cuda_forms.ts";
import { CUDA_PRELUDE, type CudaKernelSource } from "../renderer/cuda.ts";
import {
  type MatmulPattern,
  type TensorCoreTile,
  WGMMA_ARCH,
  renderMatmulTC,
  tensorCoreTile,
  tileCandidates,
  tileName,
} from "../renderer/cuda_matmul.ts";
import { type CudaDevice, CudaKernel, loadFunctions, timeLaunches } from "../runtime/cuda.ts";
import { compileCuda } from "../runtime/cuda_compile.ts";
import type { Handle } from "../runtime/cuda_driver.ts";
import type { Program } from "./backend.ts";
import { beamSearch, searchChoice, searchLimits } from "./search.ts";

const tiles = new WeakMap<CudaDevice, TensorCoreTile>();

/**
 * The tile tensor-core kernels take on `device` unless BEAM chose another: TC_TILE's or the default, at the GPU's
 * depth.
 */
export function deviceTile(device: CudaDevice): TensorCoreTile {
  let tile = tiles.get(device);
  if (!tile) tiles.set(device, (tile = tensorCoreTile(device.sharedPerMultiprocessor, undefined, device.arch)));
  return tile;
}

/** Turns kernels into programs on `device` (its tile chosen, and named at DEBUG >= 1, now). */
export function cudaPrograms(device: CudaDevice): (kernel: KernelIR) => Program {
  const tile = deviceTile(device);
  if (debugLevel() >= 1)
    console.error(`tsgrad: CUDA:${device.index} ${device.arch}, tensor-core tile ${tileName(tile)}`);
  return (kernel) => new CudaProgram(device, kernel);
}

/** Programs created but not compiled yet: the first run compiles those of its device together, in one module. */
const pending = new Set<CudaProgram>();

/** A kernel compiled for one device, in each aliasing variant it runs with (compiled on first use of each). */
export class CudaProgram implements Program {
  readonly loaded = new Map<string, CudaKernel>();
  private form: CudaForm | undefined;

  constructor(
    readonly device: CudaDevice,
    readonly kernel: KernelIR,
  ) {
    pending.add(this);
  }

  ranKernel(): KernelIR {
    return this.form?.kind === "loops" ? this.form.kernel : this.kernel;
  }

  /** The kernel's form on the GPU: searched (BEAM), tensor cores, or GPU-shaped loops. */
  chosenForm(): CudaForm {
    if (this.form) return this.form;
    const form = cudaForm(this.kernel);
    if (form.kind === "loops" && searchLimits().beam > 0) {
      return (this.form = {
        kind: "loops",
        kernel: beamSearch(this.kernel, "CUDA", (ks) => timeCandidates(this.device, ks)),
      });
    }
    if (form.kind === "tensorCores" && searchLimits().beam > 0 && !process.env.TC_TILE) {
      const tiles = tileCandidates(this.device.sharedPerMultiprocessor, form.pattern, this.device.arch);
      const byName = new Map(tiles.map((t) => [tileName(t), t]));
      const chosen = searchChoice(this.kernel, `CUDA ${this.device.arch}`, [...byName.keys()], (names) =>
        timeTiles(
          this.device,
          this.kernel,
          form.pattern,
          names.map((n) => byName.get(n)!),
        ),
      );
      return (this.form = { ...form, tile: chosen ? byName.get(chosen) : undefined });
    }
    return (this.form = form);
  }

  run(buffers: Buffer[], opts: { wait?: boolean } = {}): number | undefined {
    // one buffer in two slots (an in-place assign) must not be promised to the compiler as unaliased: those
    // slots lose __restrict__ in a variant of their own ("" is the plain kernel)
    const aliased = aliasedSlots(buffers);
    if (!this.loaded.has(aliased)) {
      const others = aliased === "" ? [...pending].filter((p) => p !== this && p.device === this.device) : [];
      compileTogether(this.device, [this, ...others], aliased);
    }
    return this.loaded.get(aliased)!.run(buffers, opts);
  }
}

/**
 * Compiles several programs' kernels as one module (the compiler starts once; the cache keeps the whole
 * batch). Kernels whose code is the same (a model's layers) are compiled once and share a function.
 */
function compileTogether(device: CudaDevice, programs: readonly CudaProgram[], aliased: string): void {
  const restrict = aliased === "" || new Set(aliased.split(",").map(Number));
  const rendered = programs.map((p) => renderCudaForm(p.chosenForm(), "tg_kernel", restrict, deviceTile(device)));
  const firstOf = new Map<string, number>();
  rendered.forEach((r, i) => firstOf.has(r.code) || firstOf.set(r.code, i));
  const unique = [...firstOf.keys()];
  const names = [...firstOf.values()].map((i, u) => `${programs[i]!.kernel.name.replace(/\W/g, "_")}_${u}`);
  const source = `${CUDA_PRELUDE}\n${unique.map((code, u) => code.replace(/\btg_kernel\b/, names[u]!)).join("\n\n")}\n`;
  const what =
    programs.length === 1 ? programs[0]!.kernel.name : `${unique.length} kernels (${programs[0]!.kernel.name}, ...)`;
  const fns = compileAndLoad(device, source, names, what);
  const fnOf = new Map(unique.map((code, u) => [code, fns[u]!]));
  const kernels = rendered.map(
    (r, i) =>
      new CudaKernel(device, fnOf.get(r.code)!, r.launch, programs[i]!.kernel.name, programs[i]!.kernel.buffers.length),
  );
  programs.forEach((p, i) => {
    p.loaded.set(aliased, kernels[i]!);
    if (aliased === "") pending.delete(p);
  });
}

/** Compiles (or finds in the cache) a module for `device` and loads it; the handles of its functions `names`. */
function compileAndLoad(device: CudaDevice, source: string, names: readonly string[], what: string): Handle[] {
  return loadFunctions(device, compileCuda(source, compileArch(device.arch, source), what), names);
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
 * Times BEAM's candidates on scratch buffers of the kernel's sizes (Infinity for those that fail to compile or launch).
 */
function timeCandidates(device: CudaDevice, kernels: readonly KernelIR[]): number[] {
  if (kernels.length === 0) return [];
  return timeSources(
    device,
    kernels[0]!,
    kernels.map((kernel) => () => renderCudaForm({ kind: "loops", kernel }, "candidate", true)),
  );
}

/**
 * Times a tensor-core kernel at each tile (seconds; Infinity where one fails to compile or launch), on
 * scratch buffers, or on `on` (the kernel's own buffers: the output then holds the last tile's result).
 */
export function timeTiles(
  device: CudaDevice,
  kernel: KernelIR,
  pattern: MatmulPattern,
  tiles: readonly TensorCoreTile[],
  on?: readonly Buffer[],
): number[] {
  return timeSources(
    device,
    kernel,
    tiles.map((tile) => () => renderMatmulTC(pattern, "candidate", true, tile)),
    on,
  );
}

/**
 * The fastest of three launches of each rendering of `kernel`, on scratch buffers of its sizes (or on `on`);
 * Infinity for one that fails to render, compile or launch. Renderings with the same code are timed once.
 */
function timeSources(
  device: CudaDevice,
  kernel: KernelIR,
  renders: readonly (() => CudaKernelSource)[],
  on?: readonly Buffer[],
): number[] {
  const sizes = kernel.buffers.map((b) => b.size * b.dtype.itemsize);
  const byCode = new Map<string, number>();
  return timeLaunches(device, kernel.name, sizes, on, (time) =>
    renders.map((render) => {
      try {
        const rendered = render();
        const known = byCode.get(rendered.code);
        if (known !== undefined) return known;
        const [fn] = compileAndLoad(
          device,
          `${CUDA_PRELUDE}\n${rendered.code}\n`,
          ["candidate"],
          `BEAM candidate of ${kernel.name}`,
        );
        const fastest = time(new CudaKernel(device, fn!, rendered.launch, kernel.name, sizes.length));
        byCode.set(rendered.code, fastest);
        return fastest;
      } catch {
        return Infinity;
      }
    }),
  );
}
