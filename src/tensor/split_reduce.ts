// Long reduces to few outputs run as two reduces: the reduced axis with the largest factor up to 256 is
// cut in two, each part reduced on its own into a stored partial (many outputs: every core or
// multiprocessor busy, and for a column sum each thread of a warp reads a neighbouring column, so that
// its loads coalesce), then the partials. Tensor.sum/max and a broadcast's gradient (a bias's: tokens x
// features summed to features) both go through here.
import { prod } from "../helpers.ts";
import type { Lazy } from "./multi.ts";
import type { ReduceKind } from "../uop.ts";

/** Reduces at least this long are split in two (when their outputs are few): one long loop per output starves a GPU. */
const SPLIT_REDUCE_MIN = 1 << 15;
/**
 * Column sums (the reduced axes all before the one axis kept, so an output's elements lie a row apart) are
 * split from this long: one output a thread block would read them a sector per element.
 */
const SPLIT_COLUMN_MIN = 1 << 11;
/** ... unless there are this many outputs: then the outputs alone keep every core busy. */
const SPLIT_REDUCE_MAX_OUTPUTS = 1 << 14;

/**
 * Where to cut a long reduce to few outputs: the reduced axis with the largest factor in 8..256 (the outermost on
 * ties).
 */
export function splitReduce(
  shape: readonly number[],
  axes: readonly number[],
): { axis: number; factor: number } | undefined {
  const reduced = axes.reduce((n, a) => n * shape[a]!, 1);
  const outputs = prod(shape) / Math.max(1, reduced);
  const kept = shape.flatMap((s, i) => (s > 1 && !axes.includes(i) ? [i] : []));
  const column = kept.length === 1 && axes.every((a) => shape[a] === 1 || a < kept[0]!);
  if (reduced < (column ? SPLIT_COLUMN_MIN : SPLIT_REDUCE_MIN) || outputs >= SPLIT_REDUCE_MAX_OUTPUTS) return undefined;
  let best: { axis: number; factor: number } | undefined;
  for (const axis of [...axes].sort((a, b) => a - b)) {
    const factor = [256, 128, 64, 32, 16, 8].find((f) => shape[axis]! % f === 0 && shape[axis]! > f);
    if (factor && (!best || factor > best.factor)) best = { axis, factor };
  }
  return best;
}

/** `node` reduced over `axes` (dims kept as 1): in two reduces where splitReduce cuts it, else in one. */
export function reduceInTwo<T extends Lazy>(node: T, op: ReduceKind, axes: readonly number[]): T {
  // neighbouring reduced axes are cut as one: a norm over [30522, 128] is 256 partials of 15261 neighbouring
  // elements, not 64 partials of two columns each (30522 has no factor in 8..256)
  const sorted = [...axes].sort((a, b) => a - b);
  const [first, last] = [sorted[0]!, sorted[sorted.length - 1]!];
  if (sorted.length > 1 && last - first === sorted.length - 1) {
    const shape = node.shape;
    const merged = node.reshape([
      ...shape.slice(0, first),
      prod(shape.slice(first, last + 1)),
      ...shape.slice(last + 1),
    ]);
    if (splitReduce(merged.shape, [first]))
      return reduceInTwo(merged, op, [first]).reshape(shape.map((s, i) => (axes.includes(i) ? 1 : s))) as T;
  }
  const split = splitReduce(node.shape, axes);
  if (!split) return node.reduce(op, [...axes]) as T;
  const { axis, factor } = split;
  const size = node.shape[axis]!;
  const parts = node.reshape([...node.shape.slice(0, axis), factor, size / factor, ...node.shape.slice(axis + 1)]);
  const partial = parts
    .reduce(
      op,
      axes.map((a) => (a < axis ? a : a + 1)),
    )
    .contiguous();
  return partial.reduce(op, [axis]).reshape(node.shape.map((s, i) => (axes.includes(i) ? 1 : s))) as T;
}
