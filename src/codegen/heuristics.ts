// Hand-written kernel options: what every kernel gets unless BEAM searched better ones.
// Reduce kernels upcast the output axes that loads are shared along (register tiles for matmul) or
// that loads are contiguous along (vector lanes); big kernels split their outer loops across threads.
import { type Idx, coefficientOf, iadd, iconst, imul, ivar, substitute, varsOf } from "../shape/symbolic.ts";
import type { KernelIR, Stmt } from "./ir.ts";
import { type KernelSpec, blockedReduce } from "./kernel_spec.ts";
import type { ReduceArg } from "../uop.ts";
import { type Chunk, type KernelOpts, type Upcast, splittingChunk } from "./opts.ts";

/** Work (operations plus elements written) below which threads cost more than they save. */
const PARALLEL_MIN_WORK = 1 << 16;
/** Lanes (accumulators) at most: 8x16 float lanes are 16 AVX registers, the best matmul tile measured here. */
const MAX_LANES = 128;
/** Statements the upcast copies of a reduce loop's body may add up to: big fused bodies stay narrow. */
const LOOP_BODY_BUDGET = 512;
/** Statements the upcast copies of the whole kernel may add up to (compile time grows with code size). */
const KERNEL_BUDGET = 4000;
/** A vector axis at least this long takes 16 lanes even when 16 does not divide it (the rest: a narrower tile). */
const RAGGED_MIN = 1024;
/**
 * Lanes of a host matmul tile's vector axis (one AVX-512 vector of floats): its operand along that axis is
 * packed in panels this wide (engine/pack.ts), padded where the axis is ragged.
 */
export const TILE_LANES = 16;

/** Bytes an operand may have and still stay in a core's cache while it is read again and again. */
export const CACHED_BYTES = 256 * 1024;
/**
 * Bytes an operand may have and still come from a shared last-level cache when read again (a common share of
 * one; beyond it, from memory). Re-reads from there cost a fraction of memory's (LLC_REREAD_COST).
 */
const LAST_LEVEL_BYTES = 8 << 20;
const LLC_REREAD_COST = 1 / 8;

/** How output axis `axis` relates to the loads inside the reduce loops. */
export interface AxisFacts {
  readonly axis: number;
  readonly size: number;
  /** Loads whose index does not use the axis: shared by all its lanes when upcast. */
  readonly reuse: number;
  /**
   * Loads that step by one element along the axis (or within runs of 16: packed panels): upcast lanes read neighbours
   * (vectorisable).
   */
  readonly contiguous: number;
  /** Loads that read the axis from packed panels of TILE_LANES (`i % 16`): a tile of fewer lanes reads half-lines. */
  readonly panelled: number;
}

/** Statements in a block, nested ones included. */
export function countStmts(body: readonly Stmt[]): number {
  return body.reduce((n, s) => n + 1 + (s.kind === "loop" ? countStmts(s.body) : 0), 0);
}

/** Statements inside the innermost reduce loops (what upcasting copies once per lane in the hot loop). */
function reduceBodySize(body: readonly Stmt[], inReduce = false): number {
  return body.reduce(
    (n, s) => n + (s.kind === "loop" ? reduceBodySize(s.body, inReduce || s.var.startsWith("r")) : inReduce ? 1 : 0),
    0,
  );
}

/** The loads inside reduce loops (buffer slot and index), from a plain lowering. */
function reduceLoads(
  body: readonly Stmt[],
  inReduce = false,
  out: { buf: number; index: Idx }[] = [],
): { buf: number; index: Idx }[] {
  for (const s of body) {
    if (s.kind === "loop") reduceLoads(s.body, inReduce || s.var.startsWith("r"), out);
    else if (s.kind === "def" && s.expr.op === "LOAD" && inReduce) out.push({ buf: s.expr.buf, index: s.expr.index });
  }
  return out;
}

/** Whether `e` steps by one element as variable `name` does. */
export const hasUnitTerm = (e: Idx, name: string): boolean =>
  e.kind === "var" ? e.name === name : e.kind === "sum" && e.terms.some((t) => t.kind === "var" && t.name === name);

/**
 * Whether `e` steps by one element as `name` does within runs whose length `fits` (`name % 16`: a packed panel's
 * lanes); by default runs of 16 or more.
 */
const hasRunTerm = (e: Idx, name: string, fits = (run: number): boolean => run >= 16): boolean => {
  const run = (t: Idx): boolean => t.kind === "mod" && t.a.kind === "var" && t.a.name === name && fits(t.c);
  return run(e) || (e.kind === "sum" && e.terms.some(run));
};

/** Per output axis: how upcasting it would share or vectorise loads. */
export function axisFacts(plain: KernelIR): AxisFacts[] {
  const loads = reduceLoads(plain.body).map((l) => l.index);
  return plain.outputShape.flatMap((size, axis) => {
    if (size === 1) return [];
    const name = `i${axis}`;
    const reuse = loads.filter((l) => !varsOf(l).has(name)).length;
    const contiguous = loads.filter((l) => hasUnitTerm(l, name) || hasRunTerm(l, name)).length;
    const panelled = loads.filter((l) => hasRunTerm(l, name, (run) => run === TILE_LANES)).length;
    return [{ axis, size, reuse, contiguous, panelled }];
  });
}

/** How many leading output loops to split across threads: enough chunks for every thread, when the work is big. */
function parallelLoops(loopTrips: readonly number[], work: number): number {
  if (work < PARALLEL_MIN_WORK) return 0;
  let chunks = 1;
  for (let n = 0; n < loopTrips.length; n++) {
    chunks *= loopTrips[n]!;
    if (chunks >= 64) return n + 1;
  }
  return loopTrips.length;
}

/** Whole tiles along output axis `d` under some upcasts (a ragged last tile not counted). */
export const tileTrips = (shape: readonly number[], upcast: readonly Upcast[], d: number): number =>
  Math.floor(upcast.filter((u) => u.axis === d).reduce((n, u) => n / u.amount, shape[d]!));

/**
 * The output loops' trip counts, outermost first, under some upcasts, loop order and chunks (loops of one trip vanish).
 */
export function loopTrips(
  shape: readonly number[],
  upcast: readonly Upcast[],
  outer: readonly number[] = [],
  chunk?: Chunk,
): number[] {
  const order = [...outer, ...shape.map((_, d) => d).filter((d) => !outer.includes(d))];
  const trips = (d: number): number => tileTrips(shape, upcast, d);
  const chunked = chunk && splittingChunk(chunk, trips(chunk.axis));
  const loops = order.map((d) => (d === chunked?.axis ? chunked.tiles : trips(d)));
  return (chunked ? [trips(chunked.axis) / chunked.tiles, ...loops] : loops).filter((n) => n > 1);
}

/** Options for `spec`, judged from its plain lowering (no options). */
export function heuristicOpts(spec: KernelSpec, plain: KernelIR): KernelOpts {
  const work = plain.flops + spec.value.numel;
  const upcast: Upcast[] = [];
  const splitSum = spec.host && plain.name.startsWith("r") ? splitWidth(plain) : undefined;
  const split = splitSum?.width ?? 0;
  if (splitSum) {
    // the partial sums are the vector: no output tile beside them (but a short axis of stacked sums, whole)
    upcast.push(...splitSum.upcast);
  } else if (plain.name.startsWith("r")) {
    // most shared loads first, then contiguous ones; later (inner) axes win ties
    const ranked = axisFacts(plain)
      .filter((f) => f.reuse > 0 || f.contiguous > 0)
      .sort((a, b) => 2 * b.reuse + b.contiguous - (2 * a.reuse + a.contiguous) || b.axis - a.axis);
    const maxLanes = Math.min(
      MAX_LANES,
      LOOP_BODY_BUDGET / Math.max(1, reduceBodySize(plain.body)),
      KERNEL_BUDGET / countStmts(plain.body),
    );
    const strip = spec.host && ranked.length === 1 ? stripLanes(ranked[0]!, maxLanes) : undefined;
    if (strip) upcast.push(strip);
    let lanes = 1;
    for (const f of strip ? [] : ranked.slice(0, 2)) {
      // the first (vector) axis gets the wide upcast, the second the rows of the register tile. Sizes with
      // few factors of two (a vocabulary of 30522 = 2 x 3 x 5087) take 6 or 3 rather than 2: each load then
      // feeds three times the products (BERT-tiny's MLM-head matmuls ran faster)
      let amount = (upcast.length === 0 ? [16, 8, 4, 6, 2] : [8, 6, 4, 3, 2]).find(
        (n) => f.size % n === 0 && lanes * n <= maxLanes,
      );
      if (upcast.length === 0 && spec.host && raggedLanes(f, amount) && lanes * TILE_LANES <= maxLanes)
        amount = TILE_LANES;
      if (!amount) continue;
      upcast.push({ axis: f.axis, amount });
      lanes *= amount;
    }
  } else if (spec.host) {
    upcast.push(...transposeTile(plain));
    if (upcast.length === 0) upcast.push(...panelTile(plain));
  }
  // a two-axis tile walks one axis's tiles outermost (after batch axes): that axis's panel of its operand
  // stays in cache while the tile moves along the other axis, whose operand is read again for every panel
  const order = upcast.length === 2 && !splitSum ? tileOrder(plain, upcast, spec.host === true) : undefined;
  const outer = order
    ? [
        ...spec.value.shape
          .map((_, d) => d)
          .filter((d) => d < Math.min(upcast[0]!.axis, upcast[1]!.axis) && spec.value.shape[d]! > 1),
        order.outer,
      ]
    : [];
  const chunk = order?.chunk;
  const kblock = spec.host && upcast.length === 2 && !splitSum ? blockLength(spec, plain, upcast) : 0;
  const parallel = parallelLoops(loopTrips(spec.value.shape, upcast, outer, chunk), work);
  return {
    upcast,
    unroll: 1,
    parallel,
    outer,
    ...(kblock ? { kblock } : {}),
    ...(split ? { split } : {}),
    ...(chunk ? { chunk } : {}),
  };
}

/**
 * Whether a host tile's vector axis takes TILE_LANES lanes although they do not divide it, its last tile narrower,
 * rather than `amount` (what divides it). A long axis without a factor of 8 (30522 words): 16-wide tiles of the
 * logits h @ W^T ran faster than 6-wide ones. An axis read from packed panels, at least one panel wide: the panels
 * are padded to 16 lanes, so a tile of 8 read half of each line in turn and kept half the accumulators (x @ W onto
 * 1000 outputs: 8 x 8 tiles ran at 0.4x numpy, 16 x 8 ones, the last 8 wide, at its speed).
 */
function raggedLanes(axis: AxisFacts, amount: number | undefined): boolean {
  if (amount === TILE_LANES) return false;
  return ((amount ?? 1) < 8 && axis.size >= RAGGED_MIN) || (axis.panelled > 0 && axis.size > TILE_LANES);
}

/**
 * A sum down columns on a host backend (a bias's or a LayerNorm weight's gradient, a vector times a matrix: loads
 * step along the one output axis that tiles, the sum walks rows): each trip of the output loop reads a strip of
 * lanes from every row, rows a row's length apart. With 16 lanes a strip is one cache line a row, and a row of
 * 4 KB or more puts every line on a page of its own, which the prefetchers do not follow; 128 lanes read eight
 * neighbouring lines a row (eight vector accumulators), and ran column sums much faster, in cache and
 * from memory. Undefined (the usual choice) where the axis has no such width with 4 strips or more for the threads.
 */
function stripLanes(axis: AxisFacts, maxLanes: number): Upcast | undefined {
  if (axis.contiguous === 0) return undefined;
  const amount = [128, 64, 32].find((n) => axis.size % n === 0 && axis.size / n >= 4 && n <= maxLanes);
  return amount ? { axis: axis.axis, amount } : undefined;
}

/**
 * Accumulators for a sum that walks contiguous memory (a layer norm's row statistics, a softmax's row max and
 * sum, LAMB's norm partials): each lane of a vector of partial sums takes every 16th step, so the loop body
 * vectorises along the sum, which one accumulator cannot (its additions must stay in order). Only where no
 * output axis reads neighbours (those take vector lanes instead) and more loads of the sum are each output's
 * own than shared by some outputs (a matmul's are shared across a register tile, which serves it better).
 * 0: one accumulator.
 */
function splitWidth(plain: KernelIR): { width: number; upcast: Upcast[] } | undefined {
  const sum = innermostReduceLoop(plain.body);
  if (!sum) return undefined;
  const loads = reduceLoads(plain.body)
    .map((l) => l.index)
    .filter((l) => varsOf(l).has(sum.var));
  if (loads.length === 0 || loads.some((l) => coefficientOf(l, sum.var) !== 1)) return undefined;
  // (loads the sum does not step, such as a softmax's row max, are read once a row: they do not count)
  const dims = plain.outputShape.flatMap((size, d) => (size > 1 ? [d] : []));
  if (loads.some((l) => dims.some((d) => hasUnitTerm(l, `i${d}`)))) return undefined;
  const body = reduceBodySize(plain.body);
  // a load the same for every output (the bias of the logits over a vocabulary) is shared by any order alike;
  // one that some outputs share (a matmul's operand, an attention mask shared by the heads and queries) is
  // what a register tile serves: there the mask's arithmetic done once for 32 rows beat 16 split lanes (BERT-mini's
  // softmax max over 128 keys)
  const attempt = (whole: readonly number[]): { width: number; upcast: Upcast[] } | undefined => {
    const axes = dims.filter((d) => !whole.includes(d)).map((d) => `i${d}`);
    if (axes.length === 0) return undefined;
    const own = loads.filter((l) => axes.every((v) => varsOf(l).has(v))).length;
    const shared = loads.filter(
      (l) => axes.some((v) => !varsOf(l).has(v)) && axes.some((v) => varsOf(l).has(v)),
    ).length;
    if (own <= shared) return undefined;
    const lanes = whole.reduce((n, d) => n * plain.outputShape[d]!, 1);
    // a size the split does not divide leaves its last steps to a loop of their own
    const width = [16, 8].find((n) => sum.size >= 4 * n && n * lanes * body <= LOOP_BODY_BUDGET);
    return width ? { width, upcast: whole.map((axis) => ({ axis, amount: plain.outputShape[axis]! })) } : undefined;
  };
  // a few sums stacked along a short axis (LAMB's two norms in one kernel, [2, partials]) share their loads
  // along it: that axis is upcast whole beside the split, each load then serving every sum
  return attempt([]) ?? attempt(dims.filter((d) => plain.outputShape[d]! <= 4));
}

/** The innermost reduce loop (the last one met), if the kernel has one. */
function innermostReduceLoop(body: readonly Stmt[]): { var: string; size: number } | undefined {
  let found: { var: string; size: number } | undefined;
  for (const s of body) {
    if (s.kind !== "loop") continue;
    if (s.var.startsWith("r")) found = { var: s.var, size: s.size };
    found = innermostReduceLoop(s.body) ?? found;
  }
  return found;
}

/**
 * An elementwise kernel whose loads all step by one along some output axis but none along the innermost one
 * (a transposing copy such as W^T's) reads a new cache line for every element it writes. A tile of 8 lanes
 * along the axis the loads step along, by 8 along the innermost, reads 8 runs of 8 neighbours and writes 8
 * runs of 8: much faster than element by element, as fast as 16 by 8 and much quicker to compile (gcc
 * is slow on each 16 x 8 transpose).
 */
function transposeTile(plain: KernelIR): Upcast[] {
  // every load (counted as inside a reduce from the top)
  const loads = reduceLoads(plain.body, true).map((l) => l.index);
  const axes = plain.outputShape.flatMap((size, d) => (size > 1 ? [d] : []));
  const inner = axes[axes.length - 1];
  if (inner === undefined || loads.length === 0 || loads.some((l) => hasUnitTerm(l, `i${inner}`))) return [];
  const along = axes.filter((d) => d !== inner && loads.every((l) => hasUnitTerm(l, `i${d}`)));
  const axis = along[along.length - 1];
  if (axis === undefined) return [];
  const lanes = [8, 4].find((n) => plain.outputShape[axis]! % n === 0);
  if (!lanes) return [];
  const rows = [8, 4].find((n) => plain.outputShape[inner]! % n === 0);
  return rows
    ? [
        { axis, amount: lanes },
        { axis: inner, amount: rows },
      ]
    : [{ axis, amount: lanes }];
}

/**
 * An elementwise kernel whose innermost axis is a short run (16 elements or fewer) that its loads continue
 * along another axis (a matmul operand's panel copy [m/8, k, 8] of A^T [k, m]: the loads read i0*8 + i2,
 * one run of m along the source's row) would read a few bytes of each cache line per step. Upcasting that
 * axis too reads whole lines: 8 runs of 8 are one 256-byte stretch of the source row.
 */
function panelTile(plain: KernelIR): Upcast[] {
  const loads = reduceLoads(plain.body, true).map((l) => l.index);
  const axes = plain.outputShape.flatMap((size, d) => (size > 1 ? [d] : []));
  const inner = axes[axes.length - 1];
  if (inner === undefined || loads.length === 0) return [];
  const run = plain.outputShape[inner]!;
  if (run > 16 || loads.some((l) => coefficientOf(l, `i${inner}`) !== 1)) return [];
  const amounts = [128, 64, 32, 16].map((n) => n / run).filter((n) => Number.isInteger(n) && n > 1);
  // the axis must not be the next one out: loads that continue the run there are contiguous in loop order already
  const along = axes.slice(0, -2).filter((d) => loads.every((l) => coefficientOf(l, `i${d}`) === run));
  const axis = along[along.length - 1];
  const amount = axis === undefined ? undefined : amounts.find((n) => plain.outputShape[axis]! % n === 0);
  if (axis !== undefined && amount)
    return [
      { axis, amount },
      { axis: inner, amount: run },
    ];
  // or along a merged axis, through a modulo: (i0 % 8)*8 + (i0 / 8)*8192 reads 8 runs of 8 in a row for
  // i0 = 8t + c, c = 0..7 (an attention head's panel copy, the heads merged with the batch)
  for (const d of axes.slice(0, -2).reverse()) {
    const n = amounts.find(
      (k) =>
        plain.outputShape[d]! % k === 0 &&
        loads.every((l) => continuesRun(l, `i${d}`, k, plain.outputShape[d]! / k, run)),
    );
    if (n)
      return [
        { axis: d, amount: n },
        { axis: inner, amount: run },
      ];
  }
  return [];
}

/** Whether `index` at `name` = n*t + c (c < n, t < trips) is its value at c = 0 plus c*run: n runs in a row. */
function continuesRun(index: Idx, name: string, n: number, trips: number, run: number): boolean {
  const t = ivar(name, trips);
  const at = (c: number): Idx => substitute(index, name, iadd(imul(t, n), iconst(c)));
  const first = at(0);
  return Array.from({ length: n }, (_, c) => c).every((c) => at(c).key === iadd(first, iconst(c * run)).key);
}

/**
 * Steps a block of a long sum should have on a host backend (0: leave the sum whole). Blocking pays when the
 * output is small enough to stay in cache between blocks while the operands are not: every output tile then
 * reads the same block of them from cache, instead of streaming the sum's whole length for itself. The block
 * is sized so that one step's loads over every output (a column of g and a row of W in g @ W) fit in cache.
 */
function blockLength(spec: KernelSpec, plain: KernelIR, upcast: readonly Upcast[]): number {
  const reduce = blockedReduce(spec);
  if (!reduce) return 0;
  // only where tiles share the sum's loads (a product's factors): otherwise each tile reads its own part of the
  // operands and blocking adds a parallel region per block for nothing (LAMB's norm partials, [2, 256] sums
  // of 2304: 144 blocks of 32 tiles where 1 would do). A scalar every tile reads is not a share.
  const tiles = (d: number): number =>
    upcast.filter((u) => u.axis === d).reduce((n, u) => n / u.amount, plain.outputShape[d]!);
  const shared = reduceLoads(plain.body).some((l) => {
    const vars = varsOf(l.index);
    return (
      [...vars].some((v) => v.startsWith("r")) && plain.outputShape.some((_, d) => tiles(d) > 1 && !vars.has(`i${d}`))
    );
  });
  if (!shared) return 0;
  const length = reduce.src[0]!.shape[(reduce.arg as ReduceArg).axes[0]!]!;
  const outputBytes = reduce.numel * reduce.dtype.itemsize;
  if (outputBytes > CACHED_BYTES) return 0;
  // bytes one step of the sum loads across all outputs: each load covers the output axes its index uses
  const stepBytes = reduceLoads(plain.body).reduce((n, l) => {
    const vars = varsOf(l.index);
    const extent = plain.outputShape.reduce((e, size, d) => (vars.has(`i${d}`) ? e * size : e), 1);
    return n + extent * plain.buffers[l.buf]!.dtype.itemsize;
  }, 0);
  let size = 64;
  while (size * 2 * stepBytes <= CACHED_BYTES) size *= 2;
  // worth it only when the sum is several blocks long and the operands are well beyond the cache
  return length >= 4 * size && length * stepBytes > 4 * CACHED_BYTES ? size : 0;
}

/**
 * How to walk a register tile's two axes: which one outermost, and whether the inner one goes in chunks (host
 * backends). Each order is costed by the bytes it streams: walking axis a outermost reads the operand along the
 * other axis once per tile of a, unless that operand fits in cache (BERT's tied-weight gradient g^T @ h: the
 * vector axis outermost read the 19.5 MB g eight times; the rows outermost read it once and the 80 KB h from
 * cache). An inner operand beyond the cache goes in chunks that fit, the chunk loop outermost, and the outer
 * operand streams once per chunk (BERT-base's 30522 x 768 gradient, h 480 KB: g read twice in chunks of 24
 * tiles instead of 48 times, and much faster). Ties keep the vector axis (upcast[0]) outermost, unchunked.
 */
function tileOrder(plain: KernelIR, upcast: readonly Upcast[], host: boolean): { outer: number; chunk?: Chunk } {
  const [vector, rows] = [upcast[0]!, upcast[1]!];
  // a batched product (other output axes) keeps the vector axis: its buffers hold every batch's operand
  if (plain.outputShape.some((size, d) => size > 1 && d !== vector.axis && d !== rows.axis))
    return { outer: vector.axis };
  const loads = reduceLoads(plain.body);
  const bytesAlong = (axis: number, other: number): number => {
    const bufs = new Set(
      loads.filter((l) => varsOf(l.index).has(`i${axis}`) && !varsOf(l.index).has(`i${other}`)).map((l) => l.buf),
    );
    return [...bufs].reduce((n, b) => n + plain.buffers[b]!.size * plain.buffers[b]!.dtype.itemsize, 0);
  };
  const trips = (u: Upcast): number => Math.floor(plain.outputShape[u.axis]! / u.amount);
  // bytes from memory of reading `bytes` once and then `times - 1` more times (a GPU's loop order only maps
  // axes to the grid: there the plain model of one cache level stays)
  const rereadCost = (bytes: number): number =>
    bytes <= CACHED_BYTES ? 0 : host && bytes <= LAST_LEVEL_BYTES ? LLC_REREAD_COST : 1;
  const reads = (bytes: number, times: number): number => bytes * (1 + (times - 1) * rereadCost(bytes));
  const options = [vector, rows].flatMap((first): { outer: number; chunk?: Chunk; cost: number }[] => {
    const second = first === vector ? rows : vector;
    const [mine, theirs] = [bytesAlong(first.axis, second.axis), bytesAlong(second.axis, first.axis)];
    const unchunked = { outer: first.axis, cost: mine + reads(theirs, trips(first)) };
    if (!host || theirs <= CACHED_BYTES) return [unchunked];
    // the most tiles of the second axis whose operand panel fits in cache, dividing its tiles evenly
    const perTile = theirs / trips(second);
    let tiles = Math.min(trips(second) - 1, Math.floor(CACHED_BYTES / perTile));
    while (tiles > 1 && trips(second) % tiles !== 0) tiles--;
    if (tiles < 2) return [unchunked];
    return [
      unchunked,
      { outer: first.axis, chunk: { axis: second.axis, tiles }, cost: reads(mine, trips(second) / tiles) + theirs },
    ];
  });
  const cheapest = (list: typeof options) => list.reduce((a, b) => (b.cost < a.cost ? b : a));
  const [chunked, unchunked] = [cheapest(options), cheapest(options.filter((o) => !o.chunk))];
  // chunks where they at least halve the bytes: the estimate is rough, and chunks split the loops further
  return chunked.chunk && 2 * chunked.cost <= unchunked.cost
    ? { outer: chunked.outer, chunk: chunked.chunk }
    : { outer: unchunked.outer };
}
