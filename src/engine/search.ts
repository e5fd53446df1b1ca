// BEAM search over kernel options: BEAM=N keeps the N fastest option sets each round, extending each by
// one more option, until a round finds nothing faster. Candidates are compiled together and timed on
// scratch buffers by the backend; the winner is cached on disk by (kernel, device) so later runs skip the search.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { cacheDir, debugLevel, getenv, writeAtomic } from "../helpers.ts";
import type { KernelIR } from "../codegen/ir.ts";
import type { KernelSpec } from "../codegen/kernel_spec.ts";
import { kernelSpecOf, lowerKernel } from "../codegen/lower.ts";
import { type KernelOpts, NO_OPTS, optsKey, splittingChunk, upcastWidth } from "../codegen/opts.ts";
import { countStmts, heuristicOpts, loopTrips, tileTrips } from "../codegen/heuristics.ts";

/** Times each kernel (seconds; Infinity when it does not compile). */
export type TimeKernels = (kernels: readonly KernelIR[]) => number[];

/** Set while a jitted function runs its first, uncaptured call (tensor/jit.ts). */
export const jitFirstCall = { depth: 0 };

/**
 * Whether IGNORE_JIT_FIRST_BEAM holds BEAM back now: a jitted step's first call runs once, its capture (the
 * second call) is what replays, so only the capture's kernels are worth searching.
 */
export const beamHeldBack = (): boolean =>
  jitFirstCall.depth > 0 && getenv("IGNORE_JIT_FIRST_BEAM", 0) !== 0 && getenv("BEAM", 0) > 0;

/** The search's limits, read from the environment (tinygrad's names). */
export function searchLimits() {
  return {
    beam: beamHeldBack() ? 0 : getenv("BEAM", 0),
    /** Most IR statements a candidate may have (code size). */
    uopsMax: getenv("BEAM_UOPS_MAX", 3000),
    /** Most elements a candidate computes per iteration (upcast lanes times unroll). */
    upcastMax: getenv("BEAM_UPCAST_MAX", 256),
    /** Most threads' worth of local work: the CPU has no local memory, so this only caps parallel loops' depth. */
    localMax: getenv("BEAM_LOCAL_MAX", 1024),
    /**
     * Microseconds a round must gain to go on (tinygrad's BEAM_MIN_PROGRESS); a kernel faster than this is not
     * searched.
     */
    minProgressUs: getenv("BEAM_MIN_PROGRESS", 0.01),
  };
}

/** A round must beat the best so far by this fraction to continue the search. */
const MIN_GAIN = 0.03;

const memo = new Map<string, KernelOpts>();

/** Counts searches and cache hits, for tests and DEBUG output. */
export const searchStats = { searched: 0, cacheHits: 0 };

/** Seconds between progress lines of a long search. */
const PROGRESS_EVERY_S = 10;
const progress = { seconds: 0, announced: false, lastLine: 0 };

/**
 * Progress on stderr (DEBUG=2 prints every search instead): a search can take minutes for a whole model, the
 * first time only. One line when the first search starts, then one every PROGRESS_EVERY_S seconds.
 */
function reportProgress(searching: string, seconds?: number): void {
  if (seconds !== undefined) {
    progress.seconds += seconds;
    return;
  }
  if (debugLevel() >= 2) return;
  const now = performance.now();
  if (!progress.announced) {
    progress.announced = true;
    progress.lastLine = now;
    console.error(
      `BEAM=${searchLimits().beam}: searching kernel options (once: the choices are cached in ${join(cacheDir(), "beam")})`,
    );
  } else if (now - progress.lastLine >= PROGRESS_EVERY_S * 1000) {
    progress.lastLine = now;
    console.error(
      `BEAM: ${searchStats.searched} kernels searched in ${progress.seconds.toFixed(0)} s, ${searchStats.cacheHits} from the cache; now ${searching}`,
    );
  }
}

/** The searched kernel for `kernel` on `device` (the kernel itself when it cannot be searched). */
export function beamSearch(kernel: KernelIR, device: string, time: TimeKernels): KernelIR {
  const limits = searchLimits();
  // a scatter has no options to choose (and the spec of a kernel read back from the disk is made again: only when
  // searched)
  if (limits.beam <= 0 || kernel.opts === "scatter") return kernel;
  const spec = kernelSpecOf(kernel);
  if (!spec) return kernel;
  const key = searchKey(spec, device);
  const cached = memo.get(key) ?? readCached(key);
  if (cached) {
    searchStats.cacheHits++;
    memo.set(key, cached);
    return lowerKernel(spec, cached);
  }
  reportProgress(kernel.name);
  const start = performance.now();
  const best = search(spec, limits, time);
  searchStats.searched++;
  reportProgress(kernel.name, (performance.now() - start) / 1000);
  memo.set(key, best.opts);
  mkdirSync(join(cacheDir(), "beam"), { recursive: true });
  writeAtomic(cachePath(key), JSON.stringify(best.opts));
  if (debugLevel() >= 2)
    console.error(
      `BEAM=${limits.beam} ${kernel.name}: ${optsKey(best.opts)} ${(best.seconds * 1e6).toFixed(1)} us, searched in ${((performance.now() - start) / 1000).toFixed(2)} s`,
    );
  return best.kernel;
}

interface Candidate {
  opts: KernelOpts;
  kernel: KernelIR;
  seconds: number;
}

function search(spec: KernelSpec, limits: ReturnType<typeof searchLimits>, time: TimeKernels): Candidate {
  const plain = lowerKernel(spec, NO_OPTS);
  const seen = new Set<string>();
  const evaluate = (options: readonly KernelOpts[]): Candidate[] => {
    const fresh: { opts: KernelOpts; kernel: KernelIR }[] = [];
    for (const opts of options) {
      if (seen.has(optsKey(opts))) continue;
      seen.add(optsKey(opts));
      const kernel = lowerKernel(spec, opts);
      if (fits(kernel, opts, limits)) fresh.push({ opts, kernel });
    }
    const seconds = time(fresh.map((c) => c.kernel));
    return fresh.map((c, i) => ({ ...c, seconds: seconds[i]! }));
  };
  // the search starts from the heuristics' choice: the plain kernel can be slower by orders of magnitude, and timing it
  // costs that much
  let beam = evaluate([heuristicOpts(spec, plain)]);
  if (beam.length === 0) return { opts: NO_OPTS, kernel: plain, seconds: Infinity };
  const start = beam[0]!;
  const minProgress = limits.minProgressUs / 1e6;
  // no option set can gain more than the whole kernel takes
  if (start.seconds < minProgress) return start;
  for (;;) {
    const next = evaluate(beam.flatMap((c) => extensions(c.opts, spec, plain)));
    const merged = [...beam, ...next].sort(bySpeed).slice(0, limits.beam);
    // gains within timing noise, or below BEAM_MIN_PROGRESS, do not count
    const gain = beam[0]!.seconds - merged[0]!.seconds;
    if (gain < beam[0]!.seconds * MIN_GAIN || gain < minProgress) break;
    beam = merged;
  }
  return confirm(beam[0]!, start, time);
}

/**
 * Times the winner and the starting point once more, side by side: the winner must still be faster (noise picks winners
 * too).
 */
function confirm(winner: Candidate, start: Candidate, time: TimeKernels): Candidate {
  if (winner === start) return winner;
  const [winnerSeconds, startSeconds] = time([winner.kernel, start.kernel]);
  return winnerSeconds! < startSeconds! * (1 - MIN_GAIN)
    ? { ...winner, seconds: winnerSeconds! }
    : { ...start, seconds: startSeconds! };
}

const bySpeed = (a: Candidate, b: Candidate): number => a.seconds - b.seconds;

function fits(kernel: KernelIR, opts: KernelOpts, limits: ReturnType<typeof searchLimits>): boolean {
  return (
    countStmts(kernel.body) <= limits.uopsMax &&
    upcastWidth(opts) * opts.unroll <= limits.upcastMax &&
    2 ** opts.parallel <= limits.localMax
  );
}

/**
 * Every option set one step beyond `opts`: one more upcast, a different unroll or split, more or fewer parallel loops.
 */
export function extensions(opts: KernelOpts, spec: KernelSpec, plain: KernelIR): KernelOpts[] {
  const out: KernelOpts[] = [];
  const shape = spec.value.shape;
  shape.forEach((size, axis) => {
    const left = opts.upcast.filter((u) => u.axis === axis).reduce((n, u) => n / u.amount, size);
    for (const amount of [2, 4, 8, 16])
      if (left % amount === 0 && left > 1) out.push({ ...opts, upcast: [...opts.upcast, { axis, amount }] });
    // or this axis's loop outermost (or back in order)
    const outer = opts.outer[0] === axis ? [] : [axis];
    if (size > 1) out.push({ ...opts, outer });
  });
  const reduceSize = lastReduceSize(plain);
  for (const unroll of [2, 4, 8])
    if (reduceSize % unroll === 0 && unroll !== opts.unroll) out.push({ ...opts, unroll });
  // host backends: the sum's steps over several accumulators (a vector of partial sums), or back to one
  if (spec.host && reduceSize > 1)
    for (const split of [0, 8, 16])
      if (reduceSize >= 4 * split && split !== (opts.split ?? 0)) out.push({ ...opts, split });
  const loops = loopTrips(shape, opts.upcast, opts.outer, opts.chunk).length;
  for (let parallel = 0; parallel <= Math.min(loops, 3); parallel++)
    if (parallel !== opts.parallel) out.push({ ...opts, parallel });
  // a K-blocked sum may do better whole, or in blocks half or twice as long
  if (opts.kblock)
    for (const kblock of [0, opts.kblock / 2, opts.kblock * 2])
      if (kblock === 0 || kblock >= 64) out.push({ ...opts, kblock });
  // chunked tiles may do better unchunked, or in chunks half or twice as long
  if (opts.chunk)
    for (const tiles of [0, opts.chunk.tiles / 2, opts.chunk.tiles * 2])
      out.push({ ...opts, chunk: tiles ? { axis: opts.chunk.axis, tiles } : undefined });
  return out.map((o) => (o.chunk && !chunkFits(shape, o) ? { ...o, chunk: undefined } : o));
}

/** Whether `opts.chunk` divides its axis's tiles into more than one chunk (another upcast may have changed them). */
function chunkFits(shape: readonly number[], opts: KernelOpts): boolean {
  const { axis, tiles } = opts.chunk!;
  const trips = tileTrips(shape, opts.upcast, axis);
  return (
    Number.isInteger(tiles) && tiles >= 1 && splittingChunk(opts.chunk, trips) !== undefined && trips % tiles === 0
  );
}

/** The trip count of the innermost reduce loop (1 when there is none). */
function lastReduceSize(kernel: KernelIR): number {
  let size = 1;
  const walk = (body: KernelIR["body"]): void => {
    for (const s of body)
      if (s.kind === "loop") {
        if (s.var.startsWith("r")) size = s.size;
        walk(s.body);
      }
  };
  walk(kernel.body);
  return size;
}

/**
 * (what the kernel computes, device, threads, where the search starts): the plain lowering's IR names the
 * computation exactly; the heuristics' choice is the search's start, so a change to the heuristics searches again
 * rather than keep a choice made from an older, maybe worse, start.
 */
function searchKey(spec: KernelSpec, device: string): string {
  const plain = lowerKernel(spec, NO_OPTS);
  const ir = JSON.stringify(plain.body, (_, v) =>
    typeof v === "object" && v !== null && "kind" in v && "min" in v && "key" in v ? v.key : v,
  );
  const buffers = plain.buffers.map((b) => `${b.dtype.name}[${b.size}]`).join(",");
  const start = optsKey(heuristicOpts(spec, plain));
  return createHash("sha256")
    .update(`${device}|${getenv("THREADS", 0)}|${buffers}|${start}|${ir}`)
    .digest("hex")
    .slice(0, 32);
}

const cachePath = (key: string): string => join(cacheDir(), "beam", `${key}.json`);

function readCached(key: string): KernelOpts | undefined {
  const path = cachePath(key);
  if (!existsSync(path)) return undefined;
  try {
    return JSON.parse(readFileSync(path, "utf8")) as KernelOpts;
  } catch {
    return undefined; // a damaged entry is searched again and overwritten
  }
}

const choiceMemo = new Map<string, string>();

/**
 * BEAM over a fixed list of named alternatives (a tensor-core kernel's tiles, which kernel options do not
 * describe): each is timed once and the fastest's name is cached on disk by (kernel, device, the list), as
 * searched options are. Undefined where the kernel cannot be searched, BEAM is off or nothing ran.
 */
export function searchChoice(
  kernel: KernelIR,
  device: string,
  names: readonly string[],
  time: (names: readonly string[]) => number[],
): string | undefined {
  const spec = kernelSpecOf(kernel);
  if (!spec || searchLimits().beam <= 0 || names.length === 0) return undefined;
  const key = searchKey(spec, `${device}|choices ${names.join(",")}`);
  const cached = choiceMemo.get(key) ?? readCachedChoice(key, names);
  if (cached) {
    searchStats.cacheHits++;
    choiceMemo.set(key, cached);
    return cached;
  }
  reportProgress(kernel.name);
  const start = performance.now();
  const seconds = time(names);
  const best = seconds.reduce((b, t, i) => (t < seconds[b]! ? i : b), 0);
  reportProgress(kernel.name, (performance.now() - start) / 1000);
  if (!Number.isFinite(seconds[best]!)) return undefined;
  searchStats.searched++;
  choiceMemo.set(key, names[best]!);
  mkdirSync(join(cacheDir(), "beam"), { recursive: true });
  writeAtomic(
    cachePath(key),
    JSON.stringify({ choice: names[best], seconds: Object.fromEntries(names.map((n, i) => [n, seconds[i]])) }),
  );
  if (debugLevel() >= 2)
    console.error(
      `BEAM ${kernel.name}: ${names[best]} ${(seconds[best]! * 1e6).toFixed(1)} us of ${names.length} choices, searched in ${((performance.now() - start) / 1000).toFixed(2)} s`,
    );
  return names[best];
}

function readCachedChoice(key: string, names: readonly string[]): string | undefined {
  const path = cachePath(key);
  if (!existsSync(path)) return undefined;
  try {
    const choice = (JSON.parse(readFileSync(path, "utf8")) as { choice?: unknown }).choice;
    return typeof choice === "string" && names.includes(choice) ? choice : undefined;
  } catch {
    return undefined; // searched again and overwritten
  }
}

/**
 * Forgets the searched options held in memory, so the next kernels read them from disk (or search again);
 * with `{ onDisk: true }` also deletes the on-disk caches of searched options, compiled kernels and lowered kernels.
 * The MLPerf init phase logs `cache_clear` around this call.
 */
export function clearKernelCache({ onDisk = false } = {}): void {
  memo.clear();
  choiceMemo.clear();
  // (an earlier process's background -O3 builds may still be adding files: rmSync retries a folder that fills again)
  if (onDisk)
    for (const folder of ["beam", "cpu", "lowered"])
      rmSync(join(cacheDir(), folder), { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
}
