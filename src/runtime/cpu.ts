// The CPU device: kernels rendered to C, compiled by the system compiler into cached shared
// libraries, loaded with koffi and called directly on the buffers' memory (ArrayBuffers, no copies).
import koffi from "koffi";
import { availableParallelism } from "node:os";
import { type Backend, type Buffer, type Program, aliasedSlots } from "../device.ts";
import type { KernelIR } from "../codegen/ir.ts";
import { C_PRELUDE, C_VECTOR_PRELUDE, renderC } from "../renderer/c.ts";
import { TsgradError, debugLevel, getenv } from "../helpers.ts";
import { type CFunction, CompileError, type CompiledFunction, compileEach, findCompiler, vectorLaneWidths } from "./compiler_cache.ts";
import { beamSearch } from "../engine/search.ts";
import { renderedSource } from "../engine/lowered_cache.ts";
import { alignedBytes, hostMemory } from "./host_memory.ts";
import { type GraphCall, cpuGraph } from "./cpu_graph.ts";

type KernelFn = (...args: unknown[]) => void;

/**
 * One kernel as a C function (named `tg_kernel` until the compiler cache names it by hash), for buffers that
 * share memory in the `aliased` slots (a comma-separated list; "" when no two slots share memory).
 */
export function cFunction(kernel: KernelIR, aliased: string): CFunction {
  const slots = new Set(aliased ? aliased.split(",").map(Number) : []);
  const { prelude, vectorLanes } = cTarget();
  const code = renderedSource(kernel, `c|${aliased}|${vectorLanes.join(",")}`, () => `// ${kernel.name} ${kernel.opts}\n${renderC(kernel, "tg_kernel", { aliased: slots, vectorLanes })}`);
  return { prelude, code };
}

let target: { prelude: string; vectorLanes: readonly number[] } | undefined;

/** The prelude kernels compile with and the vector widths they render register tiles at (probed once). */
function cTarget(): { prelude: string; vectorLanes: readonly number[] } {
  if (!target) {
    const vectorLanes = vectorLaneWidths(C_PRELUDE + C_VECTOR_PRELUDE);
    target = { vectorLanes, prelude: vectorLanes.length > 0 ? C_PRELUDE + C_VECTOR_PRELUDE : C_PRELUDE };
  }
  return target;
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

/** One way to compile a program: for buffers sharing memory in the `aliased` slots ("": none, all `restrict`). */
type Variant = { program: CpuProgram; aliased: string };

/** Compiles several not-yet-compiled program variants in one go (the compiler runs in parallel). */
export function compilePrograms(variants: readonly Variant[]): void {
  const compiler = findCompiler();
  if (!compiler) throw new TsgradError(`CPU device: no working C compiler (tried ${process.env.CC || "cc"}); use DEVICE=JS`);
  const todo = variants.filter(({ program, aliased }) => !program.fn(aliased));
  for (const { program } of todo) if (!program.searched) program.useSearched(beamSearch(program.kernel, "CPU", timeKernels));
  const functions = todo.map(({ program, aliased }) => cFunction(program.kernel, aliased));
  if (debugLevel() >= 4) functions.forEach((f) => console.error(f.code));
  const compiled = compileEach(compiler, functions);
  // the ones that compiled are ready; one that did not stops waiting (it would fail every later batch it joined)
  // and raises its error when it is run, not when a program beside it is
  let failed: string | undefined;
  todo.forEach(({ program, aliased }, i) => {
    const result = compiled[i]!;
    if ("error" in result) {
      program.giveUp(aliased);
      if (i === 0) failed = result.error;
    } else {
      program.setFn(aliased, loadKernel(result, program.kernel), result);
    }
  });
  if (failed !== undefined) throw new CompileError(failed);
}

/** Times candidate kernels (BEAM) on scratch buffers of the kernel's sizes; Infinity for those that do not compile. */
function timeKernels(kernels: readonly KernelIR[]): number[] {
  const compiler = findCompiler()!;
  const libraries = compileEach(compiler, kernels.map((k) => cFunction(k, "")));
  const args = [...(kernels[0]?.buffers ?? []).map((b) => alignedBytes(b.size * b.dtype.itemsize)), threadCount()];
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

/**
 * Programs created or expected to run (`expect`) but not compiled yet, with the variants they wait for: the
 * first run compiles all of them together (weakly held: one never run is dropped).
 */
const pending = new Set<WeakRef<CpuProgram>>();

/** The variants pending programs still alive wait for (the rest are forgotten). */
function waitingVariants(): Variant[] {
  const variants: Variant[] = [];
  for (const ref of pending) {
    const program = ref.deref();
    if (!program) pending.delete(ref);
    else for (const aliased of program.awaited) variants.push({ program, aliased });
  }
  return variants;
}

/** While a graph is being recorded (captureGraph), the calls runs would make, made into the graph instead. */
let recording: GraphCall[] | undefined;

export class CpuProgram implements Program {
  private readonly fns = new Map<string, { fn: KernelFn; compiled: CompiledFunction }>();
  /** The variants coming runs need that are not compiled yet (a new program's guess: no aliasing). */
  readonly awaited = new Set<string>([""]);
  private guessed = true;
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

  ranKernel(): KernelIR {
    return this.kernel;
  }

  fn(aliased: string): KernelFn | undefined {
    return this.fns.get(aliased)?.fn;
  }

  setFn(aliased: string, fn: KernelFn, compiled: CompiledFunction): void {
    this.fns.set(aliased, { fn, compiled });
    this.awaited.delete(aliased);
    if (this.awaited.size === 0) pending.delete(this.pendingRef);
  }

  /** Stops waiting for a variant that does not compile (running it compiles it alone, and fails by name). */
  giveUp(aliased: string): void {
    this.awaited.delete(aliased);
    if (this.awaited.size === 0) pending.delete(this.pendingRef);
  }

  /** A schedule will run this program on `buffers`: the variant they need compiles with the schedule's others. */
  expect(buffers: Buffer[]): void {
    const aliased = aliasedSlots(buffers);
    if (this.guessed) {
      this.guessed = false;
      this.awaited.clear();
    }
    if (!this.fn(aliased)) this.awaited.add(aliased);
    if (this.awaited.size > 0) pending.add(this.pendingRef);
    else pending.delete(this.pendingRef);
  }

  run(buffers: Buffer[]): number {
    const aliased = aliasedSlots(buffers);
    if (!this.fn(aliased)) compilePrograms([{ program: this, aliased }, ...waitingVariants().filter((v) => v.program !== this || v.aliased !== aliased)]);
    if (recording) {
      recording.push({ fn: this.fns.get(aliased)!.compiled, buffers });
      return 0;
    }
    const fn = this.fn(aliased)!;
    const args = [...buffers.map((b) => b.handle), threadCount()];
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
    hostForms: true,
    ...hostMemory,
    compile: (kernel) => new CpuProgram(kernel),
    graphsSwapBuffers: true,
    // a copy between two CPU devices' buffers goes into a graph as a memcpy (host memory)
    recordCopy: (dst, src) => (recording && src.device.startsWith("CPU") ? (recording.push({ copy: { dst, src } }), true) : false),
    captureGraph: (run, span) => {
      if (getenv("CPU_GRAPH", 1) === 0 || span.devices.some((d) => !d.startsWith("CPU"))) return undefined;
      const calls: GraphCall[] = [];
      recording = calls;
      try {
        run();
      } finally {
        recording = undefined;
      }
      return cpuGraph(calls, threadCount());
    },
  };
}
