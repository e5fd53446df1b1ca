// Sorting along an axis from existing Tensor ops alone: a bitonic network over the order (int32 indices), each
// compare-exchange stage one elementwise kernel that pairs the order with a flipped view of itself and reads the
// keys through a gather (one load each). Autograd needs no rule: the values are gathered from x by the final
// indices, and the gradient flows through that gather only.
import { Tensor } from "./tensor.ts";
import { dtypes } from "../dtype.ts";
import { TsgradError, axisFor, fmtShape, prod } from "../helpers.ts";

export interface SortOptions {
  axis?: number;
  /** true: largest first. Equal values keep their order (lowest index first) either way. */
  descending?: boolean;
}

/**
 * Whether element (keyA, indexA) sorts before (keyB, indexB) on an axis of n real elements padded past n (n
 * undefined: not padded): real elements before padding, whatever its key; then by key, equal keys by index,
 * lower first. Float NaN is larger than everything and equal to itself (as numpy and PyTorch sort): without
 * that order NaN sorts neither before nor after anything, and a compare-exchange stage copies one element and
 * loses another.
 */
function sortsBefore(
  keyA: Tensor,
  indexA: Tensor,
  keyB: Tensor,
  indexB: Tensor,
  n: number | undefined,
  descending: boolean,
): Tensor {
  let strictly = descending ? keyA.gt(keyB) : keyA.lt(keyB);
  let equal = keyA.eq(keyB);
  if (keyA.dtype.kind === "float") {
    const [nanA, nanB] = [keyA.ne(keyA), keyB.ne(keyB)];
    strictly = strictly.logicalOr(descending ? nanA.logicalAnd(nanB.logicalNot()) : nanB.logicalAnd(nanA.logicalNot()));
    equal = equal.logicalOr(nanA.logicalAnd(nanB));
  }
  const byKey = strictly.logicalOr(equal.logicalAnd(indexA.lt(indexB)));
  if (n === undefined) return byKey; // no padding
  const [realA, realB] = [indexA.lt(n), indexB.lt(n)];
  return realA.logicalAnd(realB.logicalNot()).logicalOr(realA.eq(realB).logicalAnd(byKey));
}

/**
 * One compare-exchange stage over blocks of `block` elements of the middle axis of [outer, size, inner]: the
 * order `index` after it, each element's key read from `keys` through its index (the axis' first n elements are
 * real, the rest padding). Each element of a block's first half is paired with one of its second half, the
 * pair's first in order going to the first half.
 * `reverse` pairs element j with block - 1 - j (the merge of two sorted halves, the second read backwards);
 * otherwise j pairs with j + block / 2 (the half-cleaner).
 */
function compareExchange(
  keys: Tensor,
  index: Tensor,
  n: number,
  block: number,
  reverse: boolean,
  descending: boolean,
): Tensor {
  const [outer, size, inner] = index.shape as [number, number, number];
  const split = [outer, size / block, 2, block / 2, inner];
  const own = index.reshape(split);
  const partner = own.flip(reverse ? [2, 3] : [2]);
  const keyOf = (i: Tensor): Tensor => keys.gather(1, i.reshape(index.shape)).reshape(split);
  const partnerFirst = sortsBefore(keyOf(partner), partner, keyOf(own), own, size > n ? n : undefined, descending);
  // the first half takes its partner when the partner sorts first, the second half when it does not
  const firstHalf = Tensor.arange(2, undefined, 1, { device: index.device }).eq(0).reshape([1, 1, 2, 1, 1]);
  const take = firstHalf.where(partnerFirst, partnerFirst.logicalNot());
  // stored: the next stage reads two elements of this one, not two whole trees of the stages before
  return take.where(partner, own).reshape(index.shape).contiguous();
}

/** The axis `axis` names in `x`, or a TsgradError naming the op, the axis and the shape. */
function sortAxis(op: string, x: Tensor, axis: number): number {
  if (x.ndim === 0) throw new TsgradError(`${op}: a 0-d tensor (shape ${fmtShape(x.shape)}) has no axis to sort`);
  return axisFor(op, x.shape, axis);
}

/**
 * The int32 indices that sort `x` along axis `a`: the axis padded to a power of two (indices past its end, which
 * sort after every real element whatever their key), ordered by the log2(n) merges of a
 * bitonic network, log2(n) * (log2(n) + 1) / 2 compare-exchange stages of one kernel each, then shrunk back.
 */
function sortedIndices(x: Tensor, a: number, descending: boolean): Tensor {
  const n = x.shape[a]!;
  // nothing to order
  if (x.numel === 0) return Tensor.zeros(x.shape, { dtype: dtypes.int32, device: x.device });
  const size = n <= 1 ? 1 : 2 ** (n - 1).toString(2).length;
  const [outer, inner] = [prod(x.shape.slice(0, a)), prod(x.shape.slice(a + 1))];
  const keys = x
    .detach()
    .reshape([outer, n, inner])
    .pad([null, [0, size - n], null]);
  let index = Tensor.arange(size, undefined, 1, { device: x.device })
    .reshape([1, size, 1])
    .expand([outer, size, inner]);
  // each merge turns sorted runs of merged / 2 into sorted runs of `merged`, in stages over ever smaller blocks
  for (let merged = 2; merged <= size; merged *= 2) {
    for (let block = merged; block >= 2; block /= 2)
      index = compareExchange(keys, index, n, block, block === merged, descending);
  }
  return index.shrink([null, [0, n], null]).reshape(x.shape);
}

/**
 * `x` sorted along `axis` (the last by default), with the int32 indices each value came from:
 * `sort(t([3, 1, 2]))` is { values: [1, 2, 3], indices: [1, 2, 0] }. Stable: equal values keep their order,
 * lowest index first, ascending and descending alike; ±inf sort as the largest and smallest values, and NaN
 * after +inf (last ascending, first descending, as numpy and PyTorch place it). Gradients reach x through the
 * values (each goes back to the element it came from).
 */
export function sort(
  x: Tensor,
  { axis = -1, descending = false }: SortOptions = {},
): { values: Tensor; indices: Tensor } {
  const a = sortAxis("sort", x, axis);
  const indices = sortedIndices(x, a, descending);
  return { values: x.gather(a, indices).cast(x.dtype), indices };
}

/** The int32 indices that sort `x` along `axis`: `sort(x, options).indices` without the values. */
export function argsort(x: Tensor, { axis = -1, descending = false }: SortOptions = {}): Tensor {
  return sortedIndices(x, sortAxis("argsort", x, axis), descending);
}

declare module "./tensor.ts" {
  interface Tensor {
    /** Sorted along an axis (a bitonic network), with the int32 indices; stable: ties keep index order. */
    sort(options?: SortOptions): { values: Tensor; indices: Tensor };
    /** The int32 indices that sort this tensor along an axis. */
    argsort(options?: SortOptions): Tensor;
  }
}

Tensor.prototype.sort = function (options = {}) {
  return sort(this, options);
};
Tensor.prototype.argsort = function (options = {}) {
  return argsort(this, options);
};
