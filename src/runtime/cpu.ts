// The CPU device: kernels rendered to C, compiled by the system compiler into cached shared
// libraries, loaded with koffi and called directly on the buffers' memory (ArrayBuffers, no copies).
import koffi from "koffi";
import { availableParallelism } from "node:os";
import type { Backend, Buffer, Program } from "../device.ts";
import type { KernelIR } from "../codegen/ir.ts";
import { C_PRELUDE, renderC } from "../renderer/c.ts";
import { TsgradError, debugLevel, getenv } from "../helpers.ts";
import { type CFunction, type CompiledFunction, compileEach, compileLibraries, findCompiler } from "./compiler_cache.ts";
import { beamSearch } from "../engine/search.ts";
import { hostMemory } from "./host_memory.ts";

type KernelFn = (...args: unknown[]) => void;

/** One kernel as a C function (named `tg_kernel` until the compiler cache names it by hash). */
export function cFunction(kernel: KernelIR, restrict: boolean): CFunction {
  return { prelude: C_PRELUDE, code: `// ${kernel.name} ${kernel.opts}\n${renderC(kernel, "tg_kernel", { restrict })}` };
}

const loaded = new Map<string, KernelFn>();

/** Loads (once) the kernel function out of a compiled library. */
function loadKernel({ path, symbol }: CompiledFunction, kernel: KernelIR): KernelFn {
  let fn = loaded.get(symbol);
  if (!fn) {
    const params = [...kernel.buffers.map(() => "void *"), "int"].join(", ");
    fn = koffi.load(path).func(`void ${symbol}(${params})`) as KernelFn;
    loaded.set(symbol, fn);
  }
  return fn;
}

/** Compiles the kernels of several not-yet-compiled programs in one go (the compiler runs in parallel). */
export function compilePrograms(programs: readonly CpuProgram[], restrict = true): void {
  const compiler = findCompiler();
  if (!compiler) throw new TsgradError(`CPU device: no working C compiler (tried ${process.env.CC || "cc"}); use DEVICE=JS`);
  const todo = programs.filter((p) => !p.fn(restrict));
  for (const p of todo) if (!p.searched) p.useSearched(beamSearch(p.kernel, "CPU", timeKernels));
  const functions = todo.map((p) => cFunction(p.kernel, restrict));
  if (debugLevel() >= 4) functions.forEach((f) => console.error(f.code));
  const compiled = compileLibraries(compiler, functions);
  todo.forEach((p, i) => p.setFn(restrict, loadKernel(compiled[i]!, p.kernel)));
}

/** Times candidate kernels (BEAM) on scratch buffers of the kernel's sizes; Infinity for those that do not compile. */
function timeKernels(kernels: readonly KernelIR[]): number[] {
  const compiler = findCompiler()!;
  const libraries = compileEach(compiler, kernels.map((k) => cFunction(k, true)));
  const args = [...(kernels[0]?.buffers ?? []).map((b) => new ArrayBuffer(b.size * b.dtype.itemsize)), threadCount()];
  let best = Infinity;
  return kernels.map((kernel, i) => {
    const library = libraries[i]!;
    if ("error" in library) return Infinity;
    const fn = loadKernel(library, kernel);
    let fastest = Infinity;
    // the fastest of three runs (the machine may be shared); a candidate far slower than the best is not worth more
    for (let run = 0; run === 0 || (run < 3 && fastest < 3 * best); run++) {
      const start = performance.now();
      fn(...args);
      fastest = Math.min(fastest, (performance.now() - start) / 1000);
    }
    best = Math.min(best, fastest);
    return fastest;
  });
}

/** THREADS=n caps the threads a kernel uses (default: every core). */
export const threadCount = (): number => Math.max(1, getenv("THREADS", availableParallelism()));

/** Programs created but not compiled yet: the first run compiles all of them together (weakly held: one never run is dropped). */
const pending = new Set<WeakRef<CpuProgram>>();

/** The pending programs still alive (the rest are forgotten). */
function waitingPrograms(): CpuProgram[] {
  const alive: CpuProgram[] = [];
  for (const ref of pending) {
    const program = ref.deref();
    if (program) alive.push(program);
    else pending.delete(ref);
  }
  return alive;
}

export class CpuProgram implements Program {
  private restricted: KernelFn | undefined;
  private aliased: KernelFn | undefined;
  /** Whether BEAM had its say on the kernel's options (it leaves the kernel as is when BEAM=0). */
  searched = false;
  private readonly pendingRef = new WeakRef(this);
  constructor(public kernel: KernelIR) {
    pending.add(this.pendingRef);
  }

  useSearched(kernel: KernelIR): void {
    this.kernel = kernel;
    this.searched = true;
  }

  fn(restrict: boolean): KernelFn | undefined {
    return restrict ? this.restricted : this.aliased;
  }

  setFn(restrict: boolean, fn: KernelFn): void {
    if (restrict) this.restricted = fn;
    else this.aliased = fn;
    pending.delete(this.pendingRef);
  }

  run(buffers: Buffer[]): number {
    // one memory in two slots (an in-place assign) must not be promised to the compiler as unaliased
    const handles = buffers.map((b) => b.handle);
    const restrict = new Set(handles).size === handles.length;
    if (!this.fn(restrict)) compilePrograms(restrict ? [this, ...waitingPrograms().filter((p) => p !== this)] : [this], restrict);
    const fn = this.fn(restrict)!;
    const args = [...handles, threadCount()];
    const start = performance.now();
    fn(...args);
    return (performance.now() - start) / 1000;
  }
}

/** Whether this machine can compile kernels (probes the compiler once). */
export const cpuAvailable = (): boolean => findCompiler() !== null;

export function cpuBackend(): Backend {
  return {
    name: "CPU",
    scatters: true,
    ...hostMemory,
    compile: (kernel) => new CpuProgram(kernel),
  };
}
