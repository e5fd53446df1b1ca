// Upsampling from existing ops: a transposed convolution is a convolution over the input with zeros inserted
// between its elements (a view), and interpolation gathers each output's one or two source elements along each
// spatial axis and weighs them (or, for nearest by a whole factor, an expand). Autograd needs no rule of its own.
import { Tensor } from "./tensor.ts";
import { dtypes, isFloat } from "../dtype.ts";
import { TsgradError, fmtShape, range } from "../helpers.ts";
import { conv, perAxis } from "./windows.ts";

export interface ConvTransposeOptions {
  bias?: Tensor;
  stride?: number | readonly number[];
  /** dilation*(kernel-1) - padding zeros are added before and after each spatial axis of the zero-stuffed input. */
  padding?: number | readonly number[];
  /** Extra elements at the end of each spatial axis (to pick among the input sizes a strided conv maps to one size). */
  outputPadding?: number | readonly number[];
  dilation?: number | readonly number[];
  groups?: number;
}

/**
 * stride-1 zeros between the elements of `axis`: a view (each element gets a zero-padded axis of `stride`, merged in).
 */
function insertZeros(x: Tensor, axis: number, stride: number): Tensor {
  if (stride === 1) return x;
  const length = x.shape[axis]!;
  const spread = x.unsqueeze(axis + 1).pad(range(x.ndim + 1).map((d) => (d === axis + 1 ? [0, stride - 1] : null)));
  const merged = spread.reshape([...x.shape.slice(0, axis), length * stride, ...x.shape.slice(axis + 1)]);
  return merged.shrink(range(x.ndim).map((d) => (d === axis ? [0, (length - 1) * stride + 1] : null)));
}

/**
 * PyTorch's conv_transposeNd, the adjoint (input gradient) of convNd: x [batch, in, ...spatial], weight
 * [in, out / groups, ...kernel] -> [batch, out, ...(L-1)*stride - 2*padding + dilation*(kernel-1) + outputPadding + 1].
 */
export function convTranspose(
  x: Tensor,
  weight: Tensor,
  { bias, stride = 1, padding = 0, outputPadding = 0, dilation = 1, groups = 1 }: ConvTransposeOptions = {},
): Tensor {
  const spatial = weight.ndim - 2;
  const what = `convTranspose: input ${fmtShape(x.shape)}, weight ${fmtShape(weight.shape)}`;
  if (spatial < 1 || x.ndim !== spatial + 2)
    throw new TsgradError(
      `${what}: the input needs a batch and a channel axis before the weight's ${Math.max(spatial, 0)} spatial axes`,
    );
  const channels = x.shape[1]!;
  const [inputs, perGroup] = weight.shape as [number, number];
  if (inputs !== channels)
    throw new TsgradError(`${what}: the weight's first axis must be the input's ${channels} channels`);
  if (!Number.isInteger(groups) || groups < 1 || channels % groups !== 0)
    throw new TsgradError(`${what}: ${groups} groups must divide the ${channels} channels`);
  const filters = perGroup * groups;
  if (bias && (bias.ndim !== 1 || bias.shape[0] !== filters))
    throw new TsgradError(`${what}: bias ${fmtShape(bias.shape)} must be [${filters}]`);
  const strides = perAxis("convTranspose stride", stride, spatial, 1);
  const pads = perAxis("convTranspose padding", padding, spatial, 0);
  const extras = perAxis("convTranspose outputPadding", outputPadding, spatial, 0);
  const dilations = perAxis("convTranspose dilation", dilation, spatial, 1);
  const kernel = weight.shape.slice(2);
  const reach = kernel.map((k, d) => dilations[d]! * (k - 1));
  extras.forEach((e, d) => {
    // as PyTorch requires
    if (e >= Math.max(strides[d]!, dilations[d]!))
      throw new TsgradError(
        `${what}: outputPadding ${e} must be smaller than the stride ${strides[d]} or the dilation ${dilations[d]} (spatial axis ${d})`,
      );
  });
  const out = x.shape.slice(2).map((l, d) => (l - 1) * strides[d]! - 2 * pads[d]! + reach[d]! + extras[d]! + 1);
  if (out.some((o) => o < 1))
    throw new TsgradError(
      `${what}: the output would be ${fmtShape(out)}; padding ${JSON.stringify(padding)} is too large`,
    );
  // every input element reaches `reach` outputs either side of its zero-stuffed position: pad to that, then shrink
  // where padding exceeds it (after the padding, so a shrink can reach into outputPadding's zeros)
  let stuffed = x;
  for (let d = 0; d < spatial; d++) stuffed = insertZeros(stuffed, 2 + d, strides[d]!);
  const edges = reach.map((r, d) => [r - pads[d]!, r - pads[d]! + extras[d]!] as const);
  const padded = stuffed
    .pad([null, null, ...edges.map(([b, a]) => [Math.max(b, 0), Math.max(a, 0)] as [number, number])])
    .shrink([
      null,
      null,
      ...edges.map(([b, a], d) => [Math.max(-b, 0), stuffed.shape[2 + d]! + Math.max(b, 0) + a] as [number, number]),
    ]);
  // [in, out/groups, ...kernel] -> [out, in/groups, ...kernel], flipped: a correlation with the flipped kernel is the
  // scatter
  const filtersFlipped = weight
    .reshape([groups, channels / groups, perGroup, ...kernel])
    .transpose(1, 2)
    .reshape([filters, channels / groups, ...kernel])
    .flip(range(spatial).map((d) => 2 + d));
  return conv(padded, filtersFlipped, { bias, dilation: dilations, groups });
}

export type InterpolateMode = "nearest" | "linear" | "bilinear" | "trilinear";

export interface InterpolateOptions {
  /** The output's spatial sizes. Give this or scaleFactor. */
  size?: number | readonly number[];
  /** Output size = floor(input size * scaleFactor) on each spatial axis. */
  scaleFactor?: number | readonly number[];
  mode?: InterpolateMode;
  /** Linear modes only: the corner pixels' centres line up (source = i*(in-1)/(out-1)) rather than their edges. */
  alignCorners?: boolean;
}

/** How many spatial axes each linear mode interpolates (nearest: any number). */
const linearAxes: Record<InterpolateMode, number | null> = { nearest: null, linear: 1, bilinear: 2, trilinear: 3 };

/**
 * PyTorch's F.interpolate over the spatial axes of x [batch, channels, ...spatial]: `interpolate(x, { scaleFactor: 2,
 * mode: "bilinear" })`. Nearest is PyTorch's legacy "nearest" (floor of the source index).
 */
export function interpolate(
  x: Tensor,
  { size, scaleFactor, mode = "nearest", alignCorners }: InterpolateOptions = {},
): Tensor {
  const spatial = x.ndim - 2;
  const what = `interpolate (${mode}): input ${fmtShape(x.shape)}`;
  if (!Object.hasOwn(linearAxes, mode))
    throw new TsgradError(
      `${what}: unknown mode ${JSON.stringify(mode)}; expected one of ${Object.keys(linearAxes).join(", ")}`,
    );
  if (spatial < 1) throw new TsgradError(`${what}: needs [batch, channels, ...spatial]`);
  const axes = linearAxes[mode];
  if (axes !== null && axes !== spatial)
    throw new TsgradError(`${what}: ${mode} interpolates ${axes} spatial axes, the input has ${spatial}`);
  if (axes === null && alignCorners !== undefined)
    throw new TsgradError(`${what}: alignCorners is only for the linear modes`);
  if (axes !== null && !isFloat(x.dtype))
    throw new TsgradError(`${what}: ${mode} needs a float input, got ${x.dtype.name}`);
  if ((size === undefined) === (scaleFactor === undefined))
    throw new TsgradError(`${what}: give exactly one of size and scaleFactor`);
  const inSizes = x.shape.slice(2);
  const scales =
    scaleFactor === undefined
      ? null
      : typeof scaleFactor === "number"
        ? inSizes.map(() => scaleFactor)
        : [...scaleFactor];
  if (scales && (scales.length !== spatial || scales.some((s) => !(s > 0) || !Number.isFinite(s))))
    throw new TsgradError(
      `${what}: scaleFactor ${JSON.stringify(scaleFactor)} must be one positive number or ${spatial}`,
    );
  const outSizes = scales
    ? inSizes.map((n, d) => Math.floor(n * scales[d]!))
    : typeof size === "number"
      ? inSizes.map(() => size)
      : [...size!];
  if (outSizes.length !== spatial || outSizes.some((n) => !Number.isInteger(n) || n < 1)) {
    throw new TsgradError(
      `${what}: output size ${fmtShape(outSizes)} must be ${spatial} positive integer(s)${scales ? ` (from scaleFactor ${JSON.stringify(scaleFactor)})` : ""}`,
    );
  }
  let y = x;
  // the last axis first: PyTorch's bilinear and trilinear weigh the innermost pairs first (w, then h, then t),
  // so float32 results round as PyTorch's do
  for (let d = spatial - 1; d >= 0; d--) {
    const [from, to, axis] = [inSizes[d]!, outSizes[d]!, 2 + d];
    // a whole factor is an expand; PyTorch's floor(o / scaleFactor) agrees when no other factor was asked for
    if (axes === null && to % from === 0 && (!scales || scales[d] === to / from)) {
      y = repeatEach(y, axis, to / from);
      continue;
    }
    // PyTorch uses the given scale factor itself, not in/out, when one is given
    const step = scales ? 1 / scales[d]! : from / to;
    if (axes === null) {
      y = pick(y, axis, nearestSources(from, to, step));
      continue;
    }
    // each output mixes the two inputs either side of its source coordinate, reading nothing else: an inf or
    // NaN stays where PyTorch's formula puts it (a [to, from] weight matrix would spread it along the axis, 0 * inf)
    const { low, high, fraction } = linearSources(from, to, step, alignCorners ?? false);
    const weightType = x.dtype.itemsize < 4 ? dtypes.float32 : x.dtype; // 16-bit floats weigh in float32, as PyTorch does
    const weight = (w: Float32Array): Tensor =>
      new Tensor(w, { device: x.device, dtype: weightType }).reshape(y.shape.map((_, i) => (i === axis ? to : 1)));
    const mixed = pick(y, axis, low)
      .cast(weightType)
      .mul(weight(fraction.map((f) => 1 - f)))
      .add(pick(y, axis, high).cast(weightType).mul(weight(fraction)));
    y = mixed.cast(x.dtype);
  }
  return y;
}

/** x's elements at `sources` along `axis` (a gather: it selects, so no other element's value reaches the result). */
function pick(x: Tensor, axis: number, sources: Int32Array): Tensor {
  const shape = x.shape.map((s, i) => (i === axis ? sources.length : s));
  const index = new Tensor(sources, { device: x.device, dtype: dtypes.int32 })
    .reshape(shape.map((s, i) => (i === axis ? s : 1)))
    .expand(shape);
  return x.gather(axis, index);
}

/** Each element of `axis` `times` times in a row: a view (an expand of a new axis, merged in). */
function repeatEach(x: Tensor, axis: number, times: number): Tensor {
  if (times === 1) return x;
  const shape = x.shape;
  return x
    .unsqueeze(axis + 1)
    .expand([...shape.slice(0, axis + 1), times, ...shape.slice(axis + 1)])
    .reshape([...shape.slice(0, axis), shape[axis]! * times, ...shape.slice(axis + 1)]);
}

/** Output o reads input floor(o * step), the product rounded to float32 as PyTorch computes it. */
function nearestSources(from: number, to: number, step: number): Int32Array {
  const scale = Math.fround(step);
  return Int32Array.from({ length: to }, (_, o) => Math.min(Math.floor(Math.fround(o * scale)), from - 1));
}

/** Output o mixes inputs low and high (the next one, clamped to the end) by `fraction`, PyTorch's source-index rule. */
function linearSources(
  from: number,
  to: number,
  step: number,
  alignCorners: boolean,
): { low: Int32Array; high: Int32Array; fraction: Float32Array } {
  const low = new Int32Array(to),
    high = new Int32Array(to),
    fraction = new Float32Array(to);
  // in float32 arithmetic, as PyTorch computes the source coordinate
  const f = Math.fround;
  const scale = f(alignCorners ? (to > 1 ? (from - 1) / (to - 1) : 0) : step);
  for (let o = 0; o < to; o++) {
    const source = alignCorners ? f(scale * o) : Math.max(f(f(scale * (o + 0.5)) - 0.5), 0);
    low[o] = Math.min(Math.floor(source), from - 1);
    high[o] = Math.min(low[o]! + 1, from - 1);
    fraction[o] = source - low[o]!;
  }
  return { low, high, fraction };
}

declare module "./tensor.ts" {
  interface Tensor {
    /**
     * Transposed convolution (PyTorch's conv_transposeNd, weight [in, out / groups, ...kernel]): a convolution
     * over the input with zeros between its elements, a view.
     */
    convTranspose2d(weight: Tensor, options?: ConvTransposeOptions): Tensor;
    /**
     * Resizes the spatial axes of [batch, channels, ...spatial]: nearest, linear, bilinear, trilinear (PyTorch's
     * F.interpolate).
     */
    interpolate(options: InterpolateOptions): Tensor;
  }
}

Tensor.prototype.convTranspose2d = function (weight, options = {}) {
  return convTranspose(this, weight, options);
};
Tensor.prototype.interpolate = function (options) {
  return interpolate(this, options);
};
