// Sliding windows, convolution and pooling, from movement ops alone: the windows are a view (index arithmetic
// in whatever kernel reads them, no gather and no im2col buffer), a convolution is a matmul that reads that
// view, and autograd needs no rule of its own (a window's gradient is the movement ops' gradients: sums
// over the copies an expand made).
import { Tensor } from "./tensor.ts";
import { TsgradError, fmtShape } from "../helpers.ts";

/**
 * Windows along `axis` (size L): `size` elements `dilation` apart, one window every `stride` elements. The axis
 * becomes the windows' count, floor((L - dilation*(size-1) - 1) / stride) + 1, and a new last axis holds each
 * window: y[..., o, ..., j] = x[..., o*stride + j*dilation, ...].
 */
export function slidingWindows(x: Tensor, axis: number, size: number, stride = 1, dilation = 1): Tensor {
  const n = x.ndim;
  const a = axis < 0 ? axis + n : axis;
  const length = x.shape[a]!;
  for (const [name, v] of [
    ["size", size],
    ["stride", stride],
    ["dilation", dilation],
  ] as const) {
    if (!Number.isInteger(v) || v < 1)
      throw new TsgradError(`sliding windows: ${name} must be a positive integer, got ${v}`);
  }
  const span = dilation * (size - 1) + 1;
  if (span > length)
    throw new TsgradError(
      `sliding windows: a window spans ${span} elements, axis ${a} of ${fmtShape(x.shape)} has ${length}`,
    );
  const dense = length - span + 1; // windows at stride 1
  const count = Math.floor((dense - 1) / stride) + 1;
  // the axis last, then `size` copies of it laid end to end and read back in rows `dilation` longer: row j
  // starts j*dilation further on, so (j, o) reads element o + j*dilation
  const order = [...Array(n).keys()].filter((d) => d !== a);
  const lead = order.map((d) => x.shape[d]!);
  const keep = lead.map(() => null);
  let w = x
    .permute([...order, a])
    .unsqueeze(-2)
    .expand([...lead, size, length])
    .reshape([...lead, size * length])
    .pad([...keep, [0, size * dilation]])
    .reshape([...lead, size, length + dilation])
    .shrink([...keep, null, [0, dense]]);
  if (stride > 1) {
    // every stride-th window: rows of `stride`, the first of each
    w = w
      .pad([...keep, null, [0, count * stride - dense]])
      .reshape([...lead, size, count, stride])
      .shrink([...keep, null, null, [0, 1]])
      .reshape([...lead, size, count]);
  }
  // [...lead, size, count] -> the count where the axis was, the window last
  return w.permute(placeCount(n, a));
}

/** The permutation that takes [...lead (n-1 axes), size, count] to [...lead[0..a), count, ...lead[a..], size]. */
function placeCount(n: number, a: number): number[] {
  const lead = [...Array(n - 1).keys()];
  return [...lead.slice(0, a), n, ...lead.slice(a), n - 1];
}

/** One value per spatial axis, from a number (the same on each) or a list. */
export function perAxis(name: string, value: number | readonly number[], axes: number, min = 0): number[] {
  const values = typeof value === "number" ? Array<number>(axes).fill(value) : [...value];
  if (values.length !== axes || values.some((v) => !Number.isInteger(v) || v < min)) {
    throw new TsgradError(
      `${name}: expected ${min === 0 ? "a non-negative integer" : `an integer >= ${min}`} or ${axes} of them, got ${JSON.stringify(value)}`,
    );
  }
  return values;
}

export interface ConvOptions {
  bias?: Tensor;
  stride?: number | readonly number[];
  /** Zeros added before and after each spatial axis. */
  padding?: number | readonly number[];
  dilation?: number | readonly number[];
  /** Channels split into this many groups, each convolved with its own filters (depthwise: groups = channels). */
  groups?: number;
}

/**
 * Cross-correlation as PyTorch's convNd computes it, over as many spatial axes as the weight has beyond two:
 * x [batch, channels, ...spatial], weight [filters, channels / groups, ...kernel] -> [batch, filters, ...out].
 */
export function conv(
  x: Tensor,
  weight: Tensor,
  { bias, stride = 1, padding = 0, dilation = 1, groups = 1 }: ConvOptions = {},
): Tensor {
  const spatial = weight.ndim - 2;
  const what = `conv: input ${fmtShape(x.shape)}, weight ${fmtShape(weight.shape)}`;
  if (spatial < 1 || x.ndim !== spatial + 2)
    throw new TsgradError(
      `${what}: the input needs a batch and a channel axis before the weight's ${Math.max(spatial, 0)} spatial axes`,
    );
  const [batch, channels] = x.shape as [number, number];
  const [filters, perGroup] = weight.shape as [number, number];
  if (!Number.isInteger(groups) || groups < 1 || channels % groups !== 0 || filters % groups !== 0)
    throw new TsgradError(`${what}: ${groups} groups must divide the ${channels} channels and ${filters} filters`);
  if (perGroup * groups !== channels)
    throw new TsgradError(`${what}: ${groups} group(s) of ${perGroup} channels, the input has ${channels}`);
  if (bias && (bias.ndim !== 1 || bias.shape[0] !== filters))
    throw new TsgradError(`${what}: bias ${fmtShape(bias.shape)} must be [${filters}]`);
  const [strides, pads, dilations] = [
    perAxis("conv stride", stride, spatial),
    perAxis("conv padding", padding, spatial),
    perAxis("conv dilation", dilation, spatial),
  ];
  const kernel = weight.shape.slice(2);
  let windows = x.pad([null, null, ...pads.map((p) => [p, p] as [number, number])]);
  for (let d = 0; d < spatial; d++) windows = slidingWindows(windows, 2 + d, kernel[d]!, strides[d]!, dilations[d]!);
  // [batch, channels, ...out, ...kernel] -> [batch, groups, positions, channels/groups * kernel]
  const out = windows.shape.slice(2, 2 + spatial);
  const positions = out.reduce((p, s) => p * s, 1),
    taps = perGroup * kernel.reduce((p, s) => p * s, 1);
  const axes = [...Array(spatial).keys()];
  const columns = windows
    .reshape([batch, groups, perGroup, ...out, ...kernel])
    .permute([0, 1, ...axes.map((d) => 3 + d), 2, ...axes.map((d) => 3 + spatial + d)])
    .reshape([batch, groups, positions, taps]);
  const filtersT = weight.reshape([groups, filters / groups, taps]).transpose(-1, -2);
  const result = columns
    .matmul(filtersT)
    .permute([0, 1, 3, 2])
    .reshape([batch, filters, ...out]);
  return bias ? result.add(bias.reshape([1, filters, ...out.map(() => 1)])) : result;
}

export interface PoolOptions {
  kernel: number | readonly number[];
  /** Default: the kernel (windows side by side). */
  stride?: number | readonly number[];
  padding?: number | readonly number[];
  dilation?: number | readonly number[];
}

/** The windows of x's last `axes` axes (padded with `fill`): [...x's other axes, ...out, ...kernel]. */
function poolWindows(
  x: Tensor,
  axes: number,
  { kernel, stride, padding = 0, dilation = 1 }: PoolOptions,
  fill: number,
  name: string,
): Tensor {
  if (x.ndim < axes) throw new TsgradError(`${name}: input ${fmtShape(x.shape)} has fewer than ${axes} axes`);
  const kernels = perAxis(`${name} kernel`, kernel, axes);
  const [strides, pads, dilations] = [
    perAxis(`${name} stride`, stride ?? kernels, axes),
    perAxis(`${name} padding`, padding, axes),
    perAxis(`${name} dilation`, dilation, axes),
  ];
  if (kernels.some((k) => k < 1))
    throw new TsgradError(`${name}: the kernel must be at least 1, got ${JSON.stringify(kernel)}`);
  const first = x.ndim - axes;
  let w = x.pad([...Array<null>(first).fill(null), ...pads.map((p) => [p, p] as [number, number])], fill);
  for (let d = 0; d < axes; d++) w = slidingWindows(w, first + d, kernels[d]!, strides[d]!, dilations[d]!);
  return w;
}

/** The largest element of each window of the last two axes (padding counts as -infinity). */
export function maxPool2d(x: Tensor, options: PoolOptions): Tensor {
  const w = poolWindows(x, 2, options, -Infinity, "maxPool2d");
  return w.max({ axis: [-2, -1] });
}

/** The mean of each window of the last two axes; padding counts as zeros, as PyTorch's default. */
export function avgPool2d(x: Tensor, options: PoolOptions): Tensor {
  const w = poolWindows(x, 2, options, 0, "avgPool2d");
  return w.mean({ axis: [-2, -1] });
}

declare module "./tensor.ts" {
  interface Tensor {
    /**
     * Convolution (cross-correlation, as PyTorch's conv1d/2d/3d) over the weight's spatial axes: this [batch,
     * channels, ...spatial], weight [filters, channels / groups, ...kernel] -> [batch, filters, ...out]. A matmul
     * that reads a view of the input's windows: no im2col buffer.
     */
    conv2d(weight: Tensor, options?: ConvOptions): Tensor;
    /** The largest element of each window of the last two axes (stride: the kernel unless given). */
    maxPool2d(options: PoolOptions): Tensor;
    /** The mean of each window of the last two axes (padding counts as zeros). */
    avgPool2d(options: PoolOptions): Tensor;
  }
}

Tensor.prototype.conv2d = function (weight, options = {}) {
  return conv(this, weight, options);
};
Tensor.prototype.maxPool2d = function (options) {
  return maxPool2d(this, options);
};
Tensor.prototype.avgPool2d = function (options) {
  return avgPool2d(this, options);
};
