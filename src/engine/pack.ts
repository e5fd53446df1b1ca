// Host backends read a matmul's operands from copies laid out the way its register tile walks them (packed
// panels, as BLAS libraries pack theirs). The tile (heuristics.ts) holds 16 vector lanes along the output's
// last axis by 8 rows along another, and steps through the sum one k at a time: each step reads 16 lane
// values of one operand and 8 row values of the other. Read in place those sit one row of the operand
// apart per step (a weight gradient g^T @ x reads both operands k-major: every step touches two new 4 KB
// pages) and, for some widths, in the same few L1 sets. A panel keeps one tile's values for consecutive
// steps next to each other: [n/16, k, 16] for the lanes, [m/8, k, 8] for the rows, so a tile reads one
// sequential stream per operand. Only the product reads the copy; other kernels keep reading the operand.
import { backendOf } from "./backend.ts";
import { CACHED_BYTES, TILE_LANES } from "../codegen/heuristics.ts";
import { moveIndex } from "../codegen/one_hot.ts";
import { type Idx, coefficientOf, flatIndex, ivar, varsOf } from "../shape/symbolic.ts";
import { MOVEMENT_OPS, type Pads, type ReduceArg, type UOp, isMatmul, skipCasts } from "../uop.ts";

/** An operand a product reads from a stored copy: `reader` gives `view`'s values from `copy`. */
export interface PackedOperand {
  /** The node in the product's graph that the copy replaces (same shape as `reader`). */
  readonly view: UOp;
  /** What is stored: the operand's values in the order the tile reads them. */
  readonly copy: UOp;
  /** A view of `copy` with `view`'s shape and values. */
  readonly reader: UOp;
}

/** Lanes and rows of the register tile the host heuristics give a matmul (16 float lanes by 8 rows). */
const PANEL_LANES = TILE_LANES;
const PANEL_ROWS = 8;
/** Reads of each element below which a copy costs more than it saves (a matrix-vector product). */
const PACK_MIN_REUSE = 32;
/** Steps of the sum below which the walk along it is too short to be worth a copy. */
const PACK_MIN_LENGTH = 32;
/** Sums this long with an output that fits the cache are K-blocked on host backends (heuristics.ts `blockLength`). */
const BLOCKED_MIN_LENGTH = 4096;

/** One operand of a product: the views above what it reads, and which of the product's axes it uses. */
interface Operand {
  /** The operand below its casts: a chain of views (a broadcast among them). */
  readonly node: UOp;
  /** The product's axes (of more than one element) the operand's index reads. */
  readonly used: ReadonlySet<number>;
  /** The index of what the chain reads at the bottom. */
  readonly bottom: { node: UOp; idx: readonly Idx[] };
  /** Whether that index (or a bound of a pad on the way) divides: a convolution's windows, costly to read in place. */
  readonly divides: boolean;
}

/** Whether an index expression has a division or a modulo in it. */
function hasDivision(e: Idx): boolean {
  switch (e.kind) {
    case "div":
    case "mod":
      return true;
    case "sum":
      return e.terms.some(hasDivision);
    case "mul":
      return hasDivision(e.a);
    default:
      return false;
  }
}

/**
 * For each matmul on a host backend, the operands it reads from copies. `stored` and `isLeaf` say where a
 * chain of views ends (a copy is made of views and of what the kernel would compute inline anyway).
 */
export function packOperands(
  nodes: readonly UOp[],
  stored: ReadonlySet<UOp>,
  isLeaf: (u: UOp) => boolean,
): Map<UOp, PackedOperand[]> {
  const packs = new Map<UOp, PackedOperand[]>();
  for (const reduce of nodes) {
    if (reduce.op !== "REDUCE" || isLeaf(reduce) || !isMatmul(reduce) || backendOf(reduce.device).hostForms !== true)
      continue;
    const product = skipCasts(reduce.src[0]!);
    const { shape } = product;
    const axes = (reduce.arg as ReduceArg).axes;
    const length = axes.reduce((n, d) => n * shape[d]!, 1);
    const outputAxes = shape.flatMap((size, d) => (size > 1 && !axes.includes(d) ? [d] : []));
    const lane = outputAxes[outputAxes.length - 1];
    if (lane === undefined || length < PACK_MIN_LENGTH) continue;
    // an output that stays in cache with a long sum runs K-blocked (heuristics' blockLength), each block of
    // both operands read from cache by every tile already: a copy adds only its cost (jitted g @ W over the
    // vocabulary ran slower with W packed)
    // (unless an operand's index divides: a convolution's weight gradient read its windows in place slowly,
    // one division a load; its panel copies them once)
    const operands = product.src.map((src) => operandOf(skipCasts(src), stored, isLeaf));
    if (
      reduce.numel * reduce.dtype.itemsize <= CACHED_BYTES &&
      length >= BLOCKED_MIN_LENGTH &&
      !operands.some((o) => o.divides)
    )
      continue;
    // each element of an operand is read once for every output element along the axes it does not use
    const reuse = (o: Operand): number => outputAxes.reduce((n, d) => (o.used.has(d) ? n : n * shape[d]!), 1);
    const found: PackedOperand[] = [];
    const swapped = lanesAcross(operands, shape, outputAxes, lane, axes);
    if (swapped) {
      packs.set(reduce, [panelOf(swapped.operand, swapped.axis, PANEL_LANES, axes)]);
      continue;
    }
    for (const operand of operands) {
      if (reuse(operand) < PACK_MIN_REUSE) continue;
      const other = operands.find((o) => o !== operand)!;
      if (operand.used.has(lane)) {
        if (other.used.has(lane)) continue;
        // lanes read in place walk a row of the operand a step (x @ W: rows a page or more apart) or 16 rows
        // at once (x @ W^T: 16 streams, which alias in L1 for some widths); a panel is one sequential stream,
        // faster even with the copy included. Lanes 16 does not divide take a padded panel (x @ W^T over BERT's
        // vocabulary, x @ W onto a classifier's 1000 outputs)
        found.push(panelOf(operand, lane, PANEL_LANES, axes));
      } else {
        // rows read along the sum (x in x @ W) are 8 sequential streams already; rows read across it (g in the
        // weight gradient g^T @ x: 8 neighbours, then a row further on) take a panel, where 8 divides them
        // (padded, the tied-weight gradient 30522x160x128 ran slower)
        const { node, idx } = operand.bottom;
        if (coefficientOf(flatIndex(idx, node.shape), `a${axes[axes.length - 1]!}`) === 1 && !operand.divides) continue;
        // the rows: the last output axis this operand reads and the other does not (where the heuristics put them)
        const rows = outputAxes.filter((d) => operand.used.has(d) && !other.used.has(d));
        const axis = rows[rows.length - 1];
        if (axis !== undefined && shape[axis]! % PANEL_ROWS === 0) found.push(panelOf(operand, axis, PANEL_ROWS, axes));
      }
    }
    if (found.length > 0) packs.set(reduce, found);
  }
  return packs;
}

/** An operand this many times the size of the other, read across its rows, moves the tile's lanes to the other. */
const LANES_ACROSS_RATIO = 16;

/**
 * Where the register tile's lanes go across the other operand instead (x @ W^T with W many times x: the logits
 * h @ E^T of a masked-LM head, 160 rows of h against 30522 of E): the small operand, packed as panels along its
 * own output axis, and that axis. Lanes along W^T's output axis read 16 rows of W a step, so W (15.6-125 MB) was
 * copied into panels on every call, a transposing copy that cost a third of the product; lanes along x's axis
 * read W along its rows, in place (each tile's rows are W's rows: broadcasts), and copy only x.
 */
function lanesAcross(
  operands: readonly Operand[],
  shape: readonly number[],
  outputAxes: readonly number[],
  lane: number,
  summed: readonly number[],
): { operand: Operand; axis: number } | undefined {
  const wide = operands.find((o) => o.used.has(lane));
  const other = operands.find((o) => !o.used.has(lane));
  if (!wide || !other || wide.divides || other.divides) return undefined;
  // the wide operand read across its rows: its lane axis is not its contiguous one
  const { node, idx } = wide.bottom;
  if (coefficientOf(flatIndex(idx, node.shape), `a${lane}`) === 1) return undefined;
  const size = (o: Operand): number => [...o.used].reduce((n, d) => n * shape[d]!, 1);
  if (size(wide) < LANES_ACROSS_RATIO * size(other)) return undefined;
  const rows = outputAxes.filter((d) => other.used.has(d) && !wide.used.has(d));
  const axis = rows[rows.length - 1];
  if (axis === undefined || rows.length !== 1 || shape[axis]! < PANEL_LANES) return undefined;
  // the summed axis the other operand steps along must be its contiguous one (x's rows read in place otherwise)
  if (!summed.every((d) => other.used.has(d))) return undefined;
  return { operand: other, axis };
}

/** Walks an operand's views down to what they read (a stored node, a leaf, or computed work). */
function operandOf(top: UOp, stored: ReadonlySet<UOp>, isLeaf: (u: UOp) => boolean): Operand {
  let node = top;
  let idx: readonly Idx[] = top.shape.map((size, d) => ivar(`a${d}`, size));
  const vars = new Set<string>();
  let divides = false;
  for (let first = true; MOVEMENT_OPS.has(node.op) && (first || !(stored.has(node) || isLeaf(node))); first = false) {
    const moved = moveIndex(node, idx);
    for (const bound of moved.inside ?? []) {
      varsOf(bound.expr, vars);
      divides ||= hasDivision(bound.expr);
    }
    idx = moved.srcIdx;
    node = node.src[0]!;
  }
  for (const i of idx) varsOf(i, vars);
  const used = new Set(top.shape.flatMap((size, d) => (size > 1 && vars.has(`a${d}`) ? [d] : [])));
  return { node: top, used, bottom: { node, idx }, divides: divides || idx.some(hasDivision) };
}

/**
 * The operand stored as panels of `width` along `axis`: the axes it uses, in the product's order, with
 * `axis` split in two, laid out as [other output axes, axis / width, summed axes, width].
 */
function panelOf(operand: Operand, axis: number, width: number, summed: readonly number[]): PackedOperand {
  const view = operand.node;
  const used = view.shape.flatMap((_, d) => (operand.used.has(d) ? [d] : []));
  // the operand without its broadcast axes (one element of each: the same values), the axis split in two (one
  // reshape each way: every reshape is a division per lane when the product's lowering walks the chain)
  const dense = view.shrink(view.shape.map((size, d): [number, number] => [0, operand.used.has(d) ? size : 1]) as Pads);
  // an axis `width` does not divide is padded to a multiple (the last panel's extra lanes are never read)
  const extra = (width - (view.shape[axis]! % width)) % width;
  const padded =
    extra === 0 ? dense : dense.pad(dense.shape.map((_, d): [number, number] => [0, d === axis ? extra : 0]) as Pads);
  const split = used.flatMap((d) => (d === axis ? [padded.shape[d]! / width, width] : [padded.shape[d]!]));
  // positions in `split`: the axis's outer part sits at its own place, its inner part right after
  const at = (d: number): number => used.indexOf(d) + (used.indexOf(d) > used.indexOf(axis) ? 1 : 0);
  const outer = used.filter((d) => d !== axis && !summed.includes(d)).map(at);
  const order = [...outer, at(axis), ...used.filter((d) => summed.includes(d)).map(at), at(axis) + 1];
  const copy = padded.reshape(split).permute(order).contiguous();
  const inverse = order.map((_, p) => order.indexOf(p));
  const unpadded = copy.permute(inverse).reshape(padded.shape);
  const reader = (
    extra === 0 ? unpadded : unpadded.shrink(dense.shape.map((size): [number, number] => [0, size]) as Pads)
  ).expand(view.shape);
  return { view, copy, reader };
}
