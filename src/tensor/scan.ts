// Running sums and maxima, top-k and categorical sampling, from existing Tensor ops alone: a scan is a reduce
// over a sliding-windows view (no gather, no loop over the axis), so autograd needs no rule of its own.
import { Tensor } from "./tensor.ts";
import { type DType, dtypes } from "../dtype.ts";
import { TsgradError, axisFor, fmtShape } from "../helpers.ts";
import { slidingWindows } from "./windows.ts";

type Combine = "sum" | "max";

/** Up to this length an axis is scanned in one windowed reduce (n^2 work); longer ones in blocks. */
const WINDOW_LIMIT = 512;

/** The smallest value of a dtype: what a running max starts from, and what topk fills elements it has passed with. */
function lowest(dtype: DType): number {
  if (dtype.kind === "float") return -Infinity;
  return dtype.kind === "int" ? -(2 ** (8 * dtype.itemsize - 1)) : 0;
}

const identity = (combine: Combine, dtype: DType): number => (combine === "sum" ? 0 : lowest(dtype));

const reduce = (x: Tensor, combine: Combine, axis: number, keepdim = false): Tensor =>
  combine === "sum" ? x.sum({ axis, keepdim }) : x.max({ axis, keepdim });

/** A pad or shrink argument that touches axis `a` only. */
const onAxis = (ndim: number, a: number, pair: [number, number]): ([number, number] | null)[] =>
  Array.from({ length: ndim }, (_, i) => (i === a ? pair : null));

/** Element i reduces x[0..i]: the axis padded with n-1 identities in front, windows of n, each reduced. */
function windowScan(x: Tensor, a: number, combine: Combine): Tensor {
  const n = x.shape[a]!;
  const padded = x.pad(onAxis(x.ndim, a, [n - 1, 0]), identity(combine, x.dtype));
  return reduce(slidingWindows(padded, a, n), combine, -1);
}

/**
 * The inclusive scan along axis `a`. A long axis is cut into about sqrt(n) blocks of about sqrt(n): each block
 * scanned on its own, plus the scan of the blocks' totals before it, so the work is n^1.5, not n^2.
 */
function scan(x: Tensor, a: number, combine: Combine): Tensor {
  const n = x.shape[a]!;
  // nothing to combine, only the dtype to match; no windows either: the gradient of windows over an empty tensor
  // sends the scheduler's one-hot matcher into a division by a 0 size (issue 36)
  if (x.numel === 0) return combine === "sum" ? x.cast(x.sum({ axis: a }).dtype) : x;
  if (n <= WINDOW_LIMIT) return windowScan(x, a, combine);
  const block = Math.ceil(Math.sqrt(n)),
    blocks = Math.ceil(n / block);
  // identities at the end fill the last block; only the cut-off tail reads them
  const padded = x.pad(onAxis(x.ndim, a, [0, blocks * block - n]), identity(combine, x.dtype));
  const split = padded.reshape([...x.shape.slice(0, a), blocks, block, ...x.shape.slice(a + 1)]);
  const within = windowScan(split, a + 1, combine);
  // what comes before each block: the scan of the block totals (blocked again when they are many), shifted
  // on by one block
  const totals = scan(reduce(split, combine, a + 1, true), a, combine);
  const before = totals
    .shrink(onAxis(x.ndim + 1, a, [0, blocks - 1]))
    .pad(onAxis(x.ndim + 1, a, [1, 0]), identity(combine, totals.dtype));
  const out = combine === "sum" ? within.add(before) : within.maximum(before);
  return out.reshape(padded.shape).shrink(onAxis(x.ndim, a, [0, n]));
}

/**
 * Inclusive cumulative sum along `axis`: `cumsum(t([1, 2, 3]), 0)` is [1, 3, 6]. The dtype is `Tensor.sum`'s:
 * int32 stays int32; bool and small ints accumulate in int32 (small uints in uint32), as numpy and torch widen
 * them; 16-bit floats accumulate in float32 and come back in their own dtype.
 */
export function cumsum(x: Tensor, axis: number): Tensor {
  return scanAlong("cumsum", x, axis, "sum");
}

/**
 * The running maximum along `axis` (values only): `cummax(t([1, 3, 2]), 0)` is [1, 3, 3]. Its gradient goes to
 * the element each running max came from; equal candidates in one window share it evenly, as `max` does.
 */
export function cummax(x: Tensor, axis: number): Tensor {
  return scanAlong("cummax", x, axis, "max");
}

/** The scan along `axis`; a 0-d tensor scans as one element along axis 0 or -1 (as PyTorch's): itself. */
function scanAlong(name: string, x: Tensor, axis: number, combine: Combine): Tensor {
  if (x.ndim === 0) return scanAlong(name, x.reshape([1]), axis, combine).reshape([]);
  return scan(x, axisFor(name, x.shape, axis), combine);
}

/** What topk ranks by, largest first: x, or x in reverse order for the smallest (~x for integers: -x overflows). */
function selectionKey(x: Tensor, largest: boolean): Tensor {
  // NaN ranks as +inf (equal to nothing, it would never be the max that equality finds, nor ever be passed)
  const ranked = x.dtype.kind === "float" ? x.ne(x).where(Infinity, x) : x;
  if (largest) return ranked;
  return x.dtype.kind === "float" ? ranked.neg() : x.dtype.kind === "bool" ? x.logicalNot() : x.bitwiseXor(-1);
}

export interface TopkOptions {
  axis?: number;
  /** false: the k smallest, smallest first. */
  largest?: boolean;
}

/**
 * The k largest (or smallest) elements along `axis`, sorted, and their int32 indices; equal values come lowest
 * index first. `topk(t([1, 5, 3, 5]), 2)` is { values: [5, 5], indices: [1, 3] }. k rounds of a max and a
 * first-index reduce over the elements not yet taken (2k + 2 kernels: for small k); the values are gathered
 * from x, so only the chosen elements get gradients. NaN ranks as +inf (largest first, or smallest last, with
 * ties by index).
 */
export function topk(
  x: Tensor,
  k: number,
  { axis = -1, largest = true }: TopkOptions = {},
): { values: Tensor; indices: Tensor } {
  const a = axisFor("topk", x.shape, axis);
  const n = x.shape[a]!;
  if (!Number.isInteger(k) || k < 1 || k > n)
    throw new TsgradError(
      `topk: k = ${k} must be an integer from 1 to ${n}, the size of axis ${a} of ${fmtShape(x.shape)}`,
    );
  let key = selectionKey(x, largest);
  // a computed 16-bit float differs from its stored max (see Tensor.maxSource): store it so equality finds the max
  if (key.dtype === dtypes.float16 || key.dtype === dtypes.bfloat16) key = key.contiguous();
  const position = Tensor.arange(n, undefined, 1, { device: x.device }).reshape(
    x.shape.map((_s, i) => (i === a ? n : 1)),
  );
  // Round r takes the best element strictly after round r-1's pick in the order (key descending, index
  // ascending): it depends on that pick alone (two numbers a row), not on a mask of all the picks before.
  const indices: Tensor[] = [];
  let pick: { best: Tensor; index: Tensor } | undefined;
  for (let round = 0; round < k; round++) {
    const open = pick && key.lt(pick.best).logicalOr(key.eq(pick.best).logicalAnd(position.gt(pick.index)));
    const best = (open ? open.where(key, lowest(key.dtype)) : key).max({ axis: a, keepdim: true });
    // The open elements equal to best, said without `open` (read by both reduces, it would be stored): an
    // element equal to a best below the last pick's is open, and one equal to the last pick's is open after it.
    const isBest = pick ? key.eq(best).logicalAnd(best.lt(pick.best).logicalOr(position.gt(pick.index))) : key.eq(best);
    const index = isBest.where(position, n).min({ axis: a, keepdim: true });
    indices.push(index);
    pick = { best, index };
  }
  const index = Tensor.cat(indices, a).cast(dtypes.int32);
  return { values: x.gather(a, index).cast(x.dtype), indices: index };
}

/**
 * Draws `numSamples` category indices (int32) from each row of non-negative weights (probabilities, or any
 * non-negative scale): [n] -> [numSamples], [rows, n] -> [rows, numSamples]. Reproducible under
 * `Tensor.manualSeed`. Each row needs a positive weight (a row of zeros draws n, out of range). Without
 * replacement the samples of a row are distinct, each drawn from the categories not yet drawn in proportion to
 * their weights, as `numSamples` successive draws would be (a row with fewer positive weights than samples
 * draws n for the rest).
 */
export function multinomial(
  probs: Tensor,
  numSamples: number,
  { replacement = true }: { replacement?: boolean } = {},
): Tensor {
  const what = `multinomial of weights ${fmtShape(probs.shape)}`;
  if (probs.ndim !== 1 && probs.ndim !== 2)
    throw new TsgradError(`${what}: expected 1-D [categories] or 2-D [rows, categories] weights`);
  if (!Number.isInteger(numSamples) || numSamples < 1)
    throw new TsgradError(`${what}: numSamples must be a positive integer, got ${numSamples}`);
  const weights = (probs.ndim === 1 ? probs.unsqueeze(0) : probs).cast(dtypes.float32);
  const [rows, n] = weights.shape as [number, number];
  if (!replacement && numSamples > n)
    throw new TsgradError(`${what}: without replacement at most ${n} samples (the categories), got ${numSamples}`);
  if (!replacement && numSamples > 1) {
    // Each category's key log(v) / w for v uniform in (0, 1] is the log of an exponential race's finishing
    // time: the largest keys, in order, are successive draws without replacement (Efraimidis and Spirakis).
    // A zero weight's key is -inf: last, and drawn only once the positive ones run out, as n.
    const v = Tensor.rand([rows, n], { device: probs.device, dtype: dtypes.float32 }).neg().add(1);
    const key = weights.gt(0).where(v.log().div(weights), -Infinity);
    const { values: best, indices } = topk(key, numSamples, { axis: 1 });
    const samples = best.eq(-Infinity).where(n, indices).cast(dtypes.int32);
    return probs.ndim === 1 ? samples.reshape([numSamples]) : samples;
  }
  const cdf = cumsum(weights, 1).unsqueeze(1); // [rows, 1, n]
  const positive = weights.gt(0).unsqueeze(1);
  // Sample i is the first positive category whose cdf exceeds u, which is the count of cdf values <= u when
  // the cdf is exact. Rounding can make a summed cdf wobble by an ulp; dividing by the largest cdf of a
  // positive category keeps one at exactly 1 > u, and skipping zero weights keeps them from ever being drawn.
  const normalised = cdf.div(positive.where(cdf, 0).max({ axis: -1, keepdim: true }));
  const u = Tensor.rand([rows, numSamples, 1], { device: probs.device, dtype: dtypes.float32 });
  const category = Tensor.arange(n, undefined, 1, { device: probs.device });
  const samples = normalised.gt(u).logicalAnd(positive).where(category, n).min({ axis: -1 }).cast(dtypes.int32);
  return probs.ndim === 1 ? samples.reshape([numSamples]) : samples;
}

declare module "./tensor.ts" {
  interface Tensor {
    /** Running sum along `axis` (a sum over a windows view; long axes in blocks). */
    cumsum(axis?: number): Tensor;
    /** Running maximum along `axis`. */
    cummax(axis?: number): Tensor;
    /** The k largest (or smallest) elements along an axis, sorted, and their int32 indices (ties: lowest index). */
    topk(k: number, options?: TopkOptions): { values: Tensor; indices: Tensor };
    /** int32 category indices drawn from rows of non-negative weights ([n] or [rows, n]). */
    multinomial(numSamples?: number, options?: { replacement?: boolean }): Tensor;
  }
}

Tensor.prototype.cumsum = function (axis = 0) {
  return cumsum(this, axis);
};
Tensor.prototype.cummax = function (axis = 0) {
  return cummax(this, axis);
};
Tensor.prototype.topk = function (k, options = {}) {
  return topk(this, k, options);
};
Tensor.prototype.multinomial = function (numSamples = 1, options = {}) {
  return multinomial(this, numSamples, options);
};
