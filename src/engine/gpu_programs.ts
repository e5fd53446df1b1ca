// Kernels as programs on a GPU, for every GPU language (CUDA C: cuda_programs.ts; HIP C++: amd_programs.ts): each
// kernel's form (the language's: tensor cores or matrix instructions, a group reduce, GPU-shaped loops), rendered,
// compiled by the runtime into one module per batch of kernels, loaded and launched by it (runtime/gpu.ts).
//
// - a program compiles on its first run, together with every program of its device made but not compiled yet
//   (a schedule's kernels): one compiler start, one module; kernels whose code is the same share a function;
// - a buffer in two slots (an in-place assign) runs a variant compiled without the promise of unaliased slots;
// - BEAM=n searches the loop options on the GPU (timed with events) as on the CPU; a target may search more
//   (CUDA's tensor-core tiles). Winners are cached on disk (engine/search.ts).
import { type Buffer, aliasedSlots } from "../device.ts";
import type { KernelIR } from "../codegen/ir.ts";
import type { CudaKernelSource, Restrict } from "../renderer/cuda.ts";
import { type GpuDevice, GpuKernel, type Handle, loadFunctions, timeLaunches } from "../runtime/gpu.ts";
import type { Program } from "./backend.ts";
import { beamSearch, searchLimits } from "./search.ts";

/** The plain form every language has: GPU-shaped loops over the kernel, one thread per output iteration. */
export interface LoopsForm {
  readonly kind: "loops";
  readonly kernel: KernelIR;
}

/** What the engine needs of one GPU language on one device: its forms, renderer, prelude and compiler. */
export interface GpuTarget<F extends { readonly kind: string }> {
  readonly device: GpuDevice;
  /** The kernel's form on the GPU before any search. */
  form(kernel: KernelIR): F;
  /** A form searched by BEAM other than loop options (CUDA's tiles); undefined where there is none to search. */
  searchForm?(kernel: KernelIR, form: F): F | undefined;
  render(form: F | LoopsForm, fnName: string, restrict: Restrict): CudaKernelSource;
  /** The helpers every module starts with. */
  readonly prelude: string;
  /** The code object of a module's source for this device; `what` names its kernels in errors. */
  compile(source: string, what: string): Uint8Array;
}

const isLoops = (form: { readonly kind: string }): form is LoopsForm => form.kind === "loops";

/** Programs created but not compiled yet: the first run compiles those of its device together, in one module. */
const pending = new Set<GpuProgram<{ readonly kind: string }>>();

/** Turns kernels into programs of `target`'s language on its device. */
export function gpuPrograms<F extends { readonly kind: string }>(target: GpuTarget<F>): (kernel: KernelIR) => Program {
  return (kernel) => new GpuProgram(target, kernel);
}

/** A kernel compiled for one device, in each aliasing variant it runs with (compiled on first use of each). */
export class GpuProgram<F extends { readonly kind: string }> implements Program {
  readonly loaded = new Map<string, GpuKernel>();
  private form: F | LoopsForm | undefined;

  constructor(
    readonly target: GpuTarget<F>,
    readonly kernel: KernelIR,
  ) {
    pending.add(this);
  }

  get device(): GpuDevice {
    return this.target.device;
  }

  ranKernel(): KernelIR {
    return this.form && isLoops(this.form) ? this.form.kernel : this.kernel;
  }

  /** The kernel's form on the GPU: searched (BEAM), or the language's own choice. */
  chosenForm(): F | LoopsForm {
    if (this.form) return this.form;
    const form = this.target.form(this.kernel);
    if (isLoops(form) && searchLimits().beam > 0) {
      const kind = this.device.driver.kind;
      return (this.form = {
        kind: "loops",
        kernel: beamSearch(this.kernel, kind, (ks) => timeCandidates(this.target, ks)),
      });
    }
    return (this.form = (searchLimits().beam > 0 && this.target.searchForm?.(this.kernel, form)) || form);
  }

  run(buffers: Buffer[], opts: { wait?: boolean } = {}): number | undefined {
    // one buffer in two slots (an in-place assign) must not be promised to the compiler as unaliased: those
    // slots lose __restrict__ in a variant of their own ("" is the plain kernel)
    const aliased = aliasedSlots(buffers);
    if (!this.loaded.has(aliased)) {
      const others = aliased === "" ? [...pending].filter((p) => p !== this && p.device === this.device) : [];
      compileTogether(this.target, [this, ...(others as GpuProgram<F>[])], aliased);
    }
    return this.loaded.get(aliased)!.run(buffers, opts);
  }
}

/**
 * Compiles several programs' kernels as one module (the compiler starts once; the cache keeps the whole
 * batch). Kernels whose code is the same (a model's layers) are compiled once and share a function.
 */
function compileTogether<F extends { readonly kind: string }>(
  target: GpuTarget<F>,
  programs: readonly GpuProgram<F>[],
  aliased: string,
): void {
  const restrict = aliased === "" || new Set(aliased.split(",").map(Number));
  const rendered = programs.map((p) => target.render(p.chosenForm(), "tg_kernel", restrict));
  const firstOf = new Map<string, number>();
  rendered.forEach((r, i) => firstOf.has(r.code) || firstOf.set(r.code, i));
  const unique = [...firstOf.keys()];
  const names = [...firstOf.values()].map((i, u) => `${programs[i]!.kernel.name.replace(/\W/g, "_")}_${u}`);
  const source = `${target.prelude}\n${unique.map((code, u) => code.replace(/\btg_kernel\b/, names[u]!)).join("\n\n")}\n`;
  const what =
    programs.length === 1 ? programs[0]!.kernel.name : `${unique.length} kernels (${programs[0]!.kernel.name}, ...)`;
  const fns = compileAndLoad(target, source, names, what);
  const fnOf = new Map(unique.map((code, u) => [code, fns[u]!]));
  const kernels = rendered.map(
    (r, i) =>
      new GpuKernel(
        target.device,
        fnOf.get(r.code)!,
        r.launch,
        programs[i]!.kernel.name,
        programs[i]!.kernel.buffers.length,
      ),
  );
  programs.forEach((p, i) => {
    p.loaded.set(aliased, kernels[i]!);
    if (aliased === "") pending.delete(p);
  });
}

/** Compiles (or finds in the cache) a module for the target's device and loads it; the handles of functions `names`. */
function compileAndLoad<F extends { readonly kind: string }>(
  target: GpuTarget<F>,
  source: string,
  names: readonly string[],
  what: string,
): Handle[] {
  return loadFunctions(target.device, target.compile(source, what), names);
}

/**
 * Times BEAM's candidates on scratch buffers of the kernel's sizes (Infinity for those that fail to compile or launch).
 */
function timeCandidates<F extends { readonly kind: string }>(
  target: GpuTarget<F>,
  kernels: readonly KernelIR[],
): number[] {
  if (kernels.length === 0) return [];
  return timeSources(
    target,
    kernels[0]!,
    kernels.map((kernel) => () => target.render({ kind: "loops", kernel }, "candidate", true)),
  );
}

/**
 * The fastest of three launches of each rendering of `kernel`, on scratch buffers of its sizes (or on `on`);
 * Infinity for one that fails to render, compile or launch. Renderings with the same code are timed once.
 */
export function timeSources<F extends { readonly kind: string }>(
  target: GpuTarget<F>,
  kernel: KernelIR,
  renders: readonly (() => CudaKernelSource)[],
  on?: readonly Buffer[],
): number[] {
  const device = target.device;
  const sizes = kernel.buffers.map((b) => b.size * b.dtype.itemsize);
  const byCode = new Map<string, number>();
  return timeLaunches(device, kernel.name, sizes, on, (time) =>
    renders.map((render) => {
      try {
        const rendered = render();
        const known = byCode.get(rendered.code);
        if (known !== undefined) return known;
        const [fn] = compileAndLoad(
          target,
          `${target.prelude}\n${rendered.code}\n`,
          ["candidate"],
          `BEAM candidate of ${kernel.name}`,
        );
        const fastest = time(new GpuKernel(device, fn!, rendered.launch, kernel.name, sizes.length));
        byCode.set(rendered.code, fastest);
        return fastest;
      } catch {
        return Infinity;
      }
    }),
  );
}
