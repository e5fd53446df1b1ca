// The CPU device: C functions compiled by the system compiler into cached shared libraries (compiler_cache.ts),
// loaded with koffi and called directly on the buffers' memory (ArrayBuffers, no copies), each with a thread count.
import koffi from "koffi";
import { availableParallelism } from "node:os";
import type { Buffer } from "../device.ts";
import { TsgradError, getenv } from "../helpers.ts";
import { type CFunction, type CompiledFunction, compileEach, findCompiler } from "./compiler_cache.ts";
import { type FinalBuild, type TieredFunction, compileTiered, pollFinalBuilds } from "./compile_tiers.ts";
import { alignedBytes } from "./host_memory.ts";
import { type GraphCall, type GraphKernel, cpuGraph } from "./cpu_graph.ts";

type KernelFn = (...args: unknown[]) => void;

/** THREADS=n caps the threads a kernel uses (default: every core). */
export const threadCount = (): number => Math.max(1, getenv("THREADS", availableParallelism()));

/** Whether this machine can compile kernels (probes the compiler once). */
export const cpuAvailable = (): boolean => findCompiler() !== null;

/**
 * Each function's library (several compiled at once, in parallel, and cached), or the compiler's error for it.
 * `tiered`: a large round may come back as quick builds switching to their final ones later (compile_tiers.ts).
 */
export function compileCpu(
  functions: readonly CFunction[],
  { tiered = false, timeoutS }: { tiered?: boolean; timeoutS?: number } = {},
): (TieredFunction | { error: string })[] {
  const compiler = findCompiler();
  if (!compiler)
    throw new TsgradError(`CPU device: no working C compiler (tried ${process.env.CC || "cc"}); use DEVICE=JS`);
  return tiered ? compileTiered(compiler, functions) : compileEach(compiler, functions, { timeoutS });
}

const loaded = new Map<string, KernelFn>();

/** Loads (once) a kernel function `void f(void* b0, ..., int threads)` out of its compiled library. */
function loadFunction({ path, symbol }: CompiledFunction, bufferCount: number): KernelFn {
  let fn = loaded.get(symbol);
  if (!fn) {
    const params = [...Array.from({ length: bufferCount }, () => "void *"), "int"].join(", ");
    fn = koffi.load(path).func(`void ${symbol}(${params})`) as KernelFn;
    loaded.set(symbol, fn);
  }
  return fn;
}

/** While a graph is being recorded (captureCpuGraph), the calls runs would make, made into the graph instead. */
let recording: GraphCall[] | undefined;

/**
 * A compiled kernel function taking `bufferCount` buffers, run on buffers' memory with THREADS threads. A quick
 * build switches to its final build at the first run after that is in the cache.
 */
export class CpuKernel implements GraphKernel {
  private fn: KernelFn;
  compiled: CompiledFunction;
  private final: FinalBuild | undefined;
  constructor(
    library: TieredFunction,
    private readonly bufferCount: number,
  ) {
    this.compiled = { path: library.path, symbol: library.symbol };
    this.fn = loadFunction(this.compiled, bufferCount);
    this.final = library.final;
  }

  /** Whether it still runs a quick build whose final build is under way. */
  get upgrading(): boolean {
    return this.final !== undefined;
  }

  /** Switches to the final build if it is ready (a look at the cache every few ms); whether it switched now. */
  upgrade(): boolean {
    if (!this.final) return false;
    pollFinalBuilds();
    const { state, compiled } = this.final;
    if (state === "building") return false;
    this.final = undefined;
    if (state === "failed") return false;
    this.fn = loadFunction(compiled, this.bufferCount);
    this.compiled = compiled;
    return true;
  }

  /** Runs on `buffers` and returns the seconds it took (0 while a graph records the call instead). */
  run(buffers: Buffer[]): number {
    if (this.final) this.upgrade();
    if (recording) {
      recording.push({ kernel: this, buffers });
      return 0;
    }
    const args = [...buffers.map((b) => b.handle), threadCount()];
    const start = performance.now();
    this.fn(...args);
    return (performance.now() - start) / 1000;
  }
}

/**
 * Times C functions that take buffers of `bufferBytes` each (BEAM's candidates), on scratch buffers of those
 * sizes: the fastest of up to three runs each, Infinity for those that do not compile.
 */
export function timeCpuFunctions(functions: readonly CFunction[], bufferBytes: readonly number[]): number[] {
  // a candidate gcc needs minutes for is dropped (timed as Infinity), not waited for
  const libraries = compileCpu(functions, { timeoutS: getenv("BEAM_COMPILE_TIMEOUT", 60) });
  const args = [...bufferBytes.map((bytes) => alignedBytes(bytes)), threadCount()];
  let best = Infinity;
  return libraries.map((library) => {
    if ("error" in library) return Infinity;
    const fn = loadFunction(library, bufferBytes.length);
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

/**
 * Records the kernel calls (and copies between CPU devices) `run` makes into one call table replayed by a
 * single native call; undefined where CPU_GRAPH=0, a device of another kind takes part, or no table builds.
 */
export function captureCpuGraph(
  run: () => void,
  span: { readonly devices: readonly string[] },
): ((swap?: ReadonlyMap<Buffer, Buffer>) => number) | undefined {
  if (getenv("CPU_GRAPH", 1) === 0 || span.devices.some((d) => !d.startsWith("CPU"))) return undefined;
  const calls: GraphCall[] = [];
  recording = calls;
  try {
    run();
  } finally {
    recording = undefined;
  }
  return cpuGraph(calls, threadCount());
}

/** While a graph records: a copy between two CPU devices' buffers goes into it as a memcpy (host memory). */
export const recordCpuCopy = (dst: Buffer, src: Buffer): boolean =>
  recording && src.device.startsWith("CPU") ? (recording.push({ copy: { dst, src } }), true) : false;
