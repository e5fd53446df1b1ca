// The CPU device's graphs: a jitted function's kernel calls (and copies between virtual CPU devices), recorded
// once into a table of (function pointer, buffer addresses), replayed by one native call whose C loop calls
// each kernel in turn. Kernel by kernel, a replay costs a koffi call, an argument array and two clock reads
// per kernel, a fair share of a small model's step; a graph costs one call for the whole step.
import koffi from "koffi";
import type { Buffer } from "../device.ts";
import { debugLevel } from "../helpers.ts";
import { type CompiledFunction, compileLibraries, findCompiler } from "./compiler_cache.ts";
import { pollFinalBuilds } from "./compile_tiers.ts";

/** The most buffers a recorded kernel may take (the scheduler caps kernels at 48 inputs and one output). */
export const GRAPH_MAX_BUFFERS = 64;

/**
 * A kernel as a graph calls it: where its function lives now, and, while a quick build of it runs, the switch to its
 * final build (compile_tiers.ts) that replays take up.
 */
export interface GraphKernel {
  readonly compiled: CompiledFunction;
  readonly upgrading: boolean;
  /** Whether it switched to another function now. */
  upgrade(): boolean;
}

/**
 * One recorded call: a kernel (its function, the buffers it runs on in slot order), or a copy between two CPU
 * devices' buffers.
 */
export type GraphCall =
  | { readonly kernel: GraphKernel; readonly buffers: readonly Buffer[] }
  | { readonly copy: { readonly dst: Buffer; readonly src: Buffer } };

/** Graphs built, replays run and kernels pointed at their final builds, for tests. */
export const cpuGraphStats = { built: 0, replays: 0, switched: 0 };

// Walks a table: per call, the function pointer, the word count n, then n words: a kernel's buffer addresses
// (kernels are `void f(T0* b0, ..., int threads)`: every buffer is a pointer, so each arity is one cast), or
// for a copy (pointer 0) the destination, the source and the byte count.
const cases = Array.from({ length: GRAPH_MAX_BUFFERS }, (_, i) => {
  const n = i + 1;
  const types = Array.from({ length: n }, () => "void*").join(", ");
  const args = Array.from({ length: n }, (_, j) => `(void*)(uintptr_t)a[${j}]`).join(", ");
  return `    case ${n}: ((void (*)(${types}, int))fn)(${args}, threads); break;`;
});
const RUNNER_SOURCE = `#include <stdint.h>
#include <string.h>
#include <dlfcn.h>

void tg_kernel(const uint64_t* table, int64_t calls, int threads) {
  const uint64_t* p = table;
  for (int64_t c = 0; c < calls; c++) {
    void* fn = (void*)(uintptr_t)p[0];
    const uint64_t* a = p + 2;
    if (!fn) memcpy((void*)(uintptr_t)a[0], (const void*)(uintptr_t)a[1], (size_t)a[2]);
    else switch ((int)p[1]) {
${cases.join("\n")}
    }
    p += 2 + p[1];
  }
}

/* The address of a kernel in its library (already loaded by koffi: dlopen only finds it again). */
uint64_t tg_graph_symbol(const char* path, const char* name) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  return library ? (uint64_t)(uintptr_t)dlsym(library, name) : 0;
}
`;

interface Runner {
  run: (table: ArrayBuffer, calls: number, threads: number) => void;
  /** A uint64 return: koffi gives a number where it fits one exactly, a bigint past that. */
  symbol: (path: string, name: string) => number | bigint;
}

let runner: Runner | null | undefined;

/** The runner library (compiled once, cached on disk like a kernel), or null where it does not build. */
function loadRunner(): Runner | null {
  if (runner !== undefined) return runner;
  try {
    const compiler = findCompiler();
    if (!compiler) return (runner = null);
    const [compiled] = compileLibraries(compiler, [{ prelude: "", code: RUNNER_SOURCE }]);
    const library = koffi.load(compiled!.path);
    runner = {
      run: library.func(`void ${compiled!.symbol}(void *, int64_t, int)`) as Runner["run"],
      symbol: library.func("uint64_t tg_graph_symbol(const char *, const char *)") as Runner["symbol"],
    };
  } catch (e) {
    if (debugLevel() >= 1)
      console.error(`tsgrad: CPU graphs off, the runner did not build: ${e instanceof Error ? e.message : String(e)}`);
    runner = null;
  }
  return runner;
}

const symbols = new Map<string, bigint>();

/** The address of a compiled function (0n where the runner cannot find it). */
function pointerOf(r: Runner, { path, symbol }: CompiledFunction): bigint {
  let pointer = symbols.get(symbol);
  if (pointer === undefined) symbols.set(symbol, (pointer = BigInt(r.symbol(path, symbol))));
  return pointer;
}

/**
 * One replayable graph of `calls` (kernels run with `threads` threads each), or undefined where it cannot be
 * (the runner does not build, a kernel takes more than GRAPH_MAX_BUFFERS buffers or cannot be found). The replay
 * takes buffers to use instead of recorded ones (a jitted call's inputs: no copies) and returns the seconds it
 * ran. Each buffer's handle is compared on every replay: a swapped one, or one whose memory was given back and
 * allocated again, has its entries pointed at its memory now, never run on old memory. A kernel that switches to
 * its final build has its entries pointed at that between two replays.
 */
export function cpuGraph(
  calls: readonly GraphCall[],
  threads: number,
): ((swap?: ReadonlyMap<Buffer, Buffer>) => number) | undefined {
  const r = loadRunner();
  if (!r) return undefined;
  // each call as (function pointer, the buffers whose addresses follow, a byte count after them for a copy)
  const entries: { pointer: bigint; buffers: readonly Buffer[]; bytes?: number; kernel?: GraphKernel }[] = [];
  for (const c of calls) {
    if ("copy" in c) {
      entries.push({ pointer: 0n, buffers: [c.copy.dst, c.copy.src], bytes: c.copy.src.nbytes });
      continue;
    }
    const pointer = pointerOf(r, c.kernel.compiled);
    if (pointer === 0n || c.buffers.length > GRAPH_MAX_BUFFERS) return undefined;
    entries.push({ pointer, buffers: c.buffers, kernel: c.kernel });
  }
  const buffers = [...new Set(entries.flatMap((e) => e.buffers))];
  const slot = new Map(buffers.map((b, i) => [b, i]));
  // the table's layout once; where each buffer's address goes, to point it elsewhere without rebuilding
  const table = new BigUint64Array(
    entries.reduce((n, e) => n + 2 + e.buffers.length + (e.bytes === undefined ? 0 : 1), 0),
  );
  const positions: number[][] = buffers.map(() => []);
  // where the pointer of each kernel still waiting for its final build goes
  let upgrading = new Map<GraphKernel, number[]>();
  let at = 0;
  for (const { pointer, buffers: used, bytes, kernel } of entries) {
    if (kernel?.upgrading) upgrading.set(kernel, [...(upgrading.get(kernel) ?? []), at]);
    table[at++] = pointer;
    table[at++] = BigInt(used.length + (bytes === undefined ? 0 : 1));
    for (const b of used) positions[slot.get(b)!]!.push(at++);
    if (bytes !== undefined) table[at++] = BigInt(bytes);
  }
  // the memory each buffer's entries point into, kept reachable while the graph is
  const held: unknown[] = buffers.map(() => undefined);
  let finished = -1;
  cpuGraphStats.built++;
  return (swap) => {
    if (upgrading.size > 0 && pollFinalBuilds() !== finished) {
      finished = pollFinalBuilds();
      upgrading = new Map(
        [...upgrading].filter(([kernel, at]) => {
          kernel.upgrade();
          const pointer = pointerOf(r, kernel.compiled);
          // (not found: the kernel keeps its quick build here)
          if (pointer !== 0n && pointer !== table[at[0]!]) {
            for (const p of at) table[p] = pointer;
            cpuGraphStats.switched++;
          }
          return kernel.upgrading;
        }),
      );
    }
    buffers.forEach((b, i) => {
      const handle = (swap?.get(b) ?? b).handle;
      if (handle === held[i]) return;
      held[i] = handle;
      const address = koffi.address(handle);
      for (const p of positions[i]!) table[p] = address;
    });
    const start = performance.now();
    r.run(table.buffer as ArrayBuffer, entries.length, threads);
    cpuGraphStats.replays++;
    return (performance.now() - start) / 1000;
  };
}
