// The small layers models are built from. Each holds its parameters as Tensor properties, so
// `getStateDict` finds them under the property names (`dense.weight`, `LayerNorm.bias`, ...).
import { type ConvOptions, type ConvTransposeOptions, Tensor } from "../tensor/index.ts";
import { TsgradError } from "../helpers.ts";
import { realizeInitial } from "./together.ts";

/** Makes a fresh initial value for a parameter of `shape`. */
export type Initializer = (shape: number[]) => Tensor;

/** PyTorch's default for Linear: uniform in ±1/sqrt(fanIn). */
export const uniformFanIn =
  (fanIn: number): Initializer =>
  (shape) => {
    const bound = 1 / Math.sqrt(fanIn);
    return Tensor.uniform(shape, -bound, bound);
  };
/** Truncated normal (±2 std), BERT's initialiser: `truncatedNormal(0.02)`. */
export const truncatedNormal =
  (std: number): Initializer =>
  (shape) =>
    Tensor.truncNormal(shape, { std });
/** Standard normal, PyTorch's default for Embedding. */
export const standardNormal: Initializer = (shape) => Tensor.randn(shape);
export const zeros: Initializer = (shape) => Tensor.zeros(shape);
export const ones: Initializer = (shape) => Tensor.ones(shape);

/**
 * A trainable parameter with its own realized buffer (requiresGrad first: equal initial values must not share
 * one). Inside `initialisedTogether` it is realized when the model is built, with the model's other parameters.
 */
export function parameter(init: Initializer, shape: number[]): Tensor {
  const t = init(shape);
  t.requiresGrad = true;
  realizeInitial([t]);
  return t;
}

/** y = x @ weight.T + bias, weight stored [out, in] as PyTorch does. */
export class Linear {
  weight: Tensor;
  bias?: Tensor;
  constructor(
    readonly inFeatures: number,
    readonly outFeatures: number,
    {
      bias = true,
      weightInit = uniformFanIn(inFeatures),
      biasInit = uniformFanIn(inFeatures),
    }: { bias?: boolean; weightInit?: Initializer; biasInit?: Initializer } = {},
  ) {
    this.weight = parameter(weightInit, [outFeatures, inFeatures]);
    if (bias) this.bias = parameter(biasInit, [outFeatures]);
  }
  forward(x: Tensor): Tensor {
    if (x.shape[x.ndim - 1] !== this.inFeatures)
      throw new TsgradError(
        `Linear(${this.inFeatures} -> ${this.outFeatures}): input has shape [${x.shape.join(", ")}]`,
      );
    return x.linear(this.weight, this.bias);
  }
}

/**
 * A 2-D convolution layer's weight and bias [outChannels], uniform in +-1/sqrt(fan in) with PyTorch's fan in, the
 * weight's second axis times the kernel: Conv2d's weight is [out, in / groups, kh, kw], a transposed one's
 * [in, out / groups, kh, kw].
 */
function convParameters(
  layer: string,
  inChannels: number,
  outChannels: number,
  kernel: number | readonly [number, number],
  groups: number,
  bias: boolean,
  transposed: boolean,
): [Tensor, Tensor | undefined] {
  if (inChannels % groups !== 0 || outChannels % groups !== 0)
    throw new TsgradError(`${layer}(${inChannels} -> ${outChannels}): ${groups} groups must divide both`);
  const [kh, kw] = typeof kernel === "number" ? [kernel, kernel] : kernel;
  const [first, second] = transposed ? [inChannels, outChannels / groups] : [outChannels, inChannels / groups];
  const fanIn = second * kh * kw;
  return [
    parameter(uniformFanIn(fanIn), [first, second, kh, kw]),
    bias ? parameter(uniformFanIn(fanIn), [outChannels]) : undefined,
  ];
}

/** A convolution over 2 spatial axes (PyTorch's Conv2d: weight [out, in / groups, kh, kw], its initialisation). */
export class Conv2d {
  weight: Tensor;
  bias?: Tensor;
  readonly options: Omit<ConvOptions, "bias">;
  constructor(
    readonly inChannels: number,
    readonly outChannels: number,
    kernel: number | readonly [number, number],
    {
      stride = 1,
      padding = 0,
      dilation = 1,
      groups = 1,
      bias = true,
    }: Omit<ConvOptions, "bias"> & { bias?: boolean } = {},
  ) {
    [this.weight, this.bias] = convParameters("Conv2d", inChannels, outChannels, kernel, groups, bias, false);
    this.options = { stride, padding, dilation, groups };
  }
  forward(x: Tensor): Tensor {
    return x.conv2d(this.weight, { ...this.options, bias: this.bias });
  }
}

/**
 * A transposed convolution over 2 spatial axes (PyTorch's ConvTranspose2d: weight [in, out / groups, kh, kw], its
 * initialisation).
 */
export class ConvTranspose2d {
  weight: Tensor;
  bias?: Tensor;
  readonly options: Omit<ConvTransposeOptions, "bias">;
  constructor(
    readonly inChannels: number,
    readonly outChannels: number,
    kernel: number | readonly [number, number],
    {
      stride = 1,
      padding = 0,
      outputPadding = 0,
      dilation = 1,
      groups = 1,
      bias = true,
    }: Omit<ConvTransposeOptions, "bias"> & { bias?: boolean } = {},
  ) {
    [this.weight, this.bias] = convParameters("ConvTranspose2d", inChannels, outChannels, kernel, groups, bias, true);
    this.options = { stride, padding, outputPadding, dilation, groups };
  }
  forward(x: Tensor): Tensor {
    return x.convTranspose2d(this.weight, { ...this.options, bias: this.bias });
  }
}

/** Rows of a [vocabSize, dim] table picked by integer ids. */
export class Embedding {
  weight: Tensor;
  constructor(
    readonly vocabSize: number,
    readonly dim: number,
    { init = standardNormal }: { init?: Initializer } = {},
  ) {
    this.weight = parameter(init, [vocabSize, dim]);
  }
  forward(ids: Tensor): Tensor {
    return Tensor.embedding(ids, this.weight);
  }
}

/** Normalises the last axis, then scales by weight and shifts by bias. */
export class LayerNorm {
  weight: Tensor;
  bias: Tensor;
  constructor(
    readonly dim: number,
    readonly eps = 1e-5,
  ) {
    this.weight = parameter(ones, [dim]);
    this.bias = parameter(zeros, [dim]);
  }
  forward(x: Tensor): Tensor {
    if (x.shape[x.ndim - 1] !== this.dim)
      throw new TsgradError(`LayerNorm(${this.dim}): input has shape [${x.shape.join(", ")}]`);
    return x.layerNorm({ eps: this.eps }).mul(this.weight).add(this.bias);
  }
}

/** Scales the last axis by the reciprocal of its root mean square, then by weight (no centring, no bias). */
export class RMSNorm {
  weight: Tensor;
  constructor(
    readonly dim: number,
    readonly eps = 1e-6,
  ) {
    this.weight = parameter(ones, [dim]);
  }
  forward(x: Tensor): Tensor {
    if (x.shape[x.ndim - 1] !== this.dim)
      throw new TsgradError(`RMSNorm(${this.dim}): input has shape [${x.shape.join(", ")}]`);
    const xf = x.float();
    return xf
      .mul(xf.square().mean({ axis: -1, keepdim: true }).add(this.eps).rsqrt())
      .cast(x.dtype)
      .mul(this.weight);
  }
}

/**
 * Group normalisation over [batch, channels, ...]: the channels split into `groups` runs, each normalised over
 * its channels and all spatial positions of one sample, then scaled and shifted per channel (PyTorch's).
 */
export class GroupNorm {
  weight: Tensor;
  bias: Tensor;
  constructor(
    readonly groups: number,
    readonly channels: number,
    readonly eps = 1e-5,
  ) {
    if (!Number.isInteger(groups) || groups < 1 || channels % groups !== 0)
      throw new TsgradError(`GroupNorm: ${groups} groups must divide ${channels} channels`);
    this.weight = parameter(ones, [channels]);
    this.bias = parameter(zeros, [channels]);
  }
  forward(x: Tensor): Tensor {
    if (x.ndim < 2 || x.shape[1] !== this.channels)
      throw new TsgradError(
        `GroupNorm(${this.groups}, ${this.channels}): input has shape [${x.shape.join(", ")}], channels on axis 1`,
      );
    const normed = x.reshape([x.shape[0]!, this.groups, -1]).layerNorm({ eps: this.eps }).reshape(x.shape);
    const perChannel = (t: Tensor): Tensor => t.reshape(x.shape.map((s, d) => (d === 1 ? s : 1)));
    return normed.mul(perChannel(this.weight)).add(perChannel(this.bias));
  }
}

/**
 * Batch normalisation over [batch, channels, ...]: while `Tensor.training`, each channel is normalised by the
 * batch's mean and (biased) variance, and the running statistics move towards them by `momentum` (the variance
 * unbiased, as PyTorch keeps it); otherwise the running statistics normalise. Then scaled and shifted per
 * channel. The running statistics are state (saved, replicated, loaded), not parameters: no gradient.
 */
export class BatchNorm {
  weight: Tensor;
  bias: Tensor;
  runningMean: Tensor;
  runningVar: Tensor;
  constructor(
    readonly channels: number,
    readonly eps = 1e-5,
    readonly momentum = 0.1,
  ) {
    this.weight = parameter(ones, [channels]);
    this.bias = parameter(zeros, [channels]);
    this.runningMean = Tensor.zeros([channels]).contiguous().realize();
    this.runningVar = Tensor.ones([channels]).contiguous().realize();
  }
  forward(x: Tensor): Tensor {
    if (x.ndim < 2 || x.shape[1] !== this.channels)
      throw new TsgradError(`BatchNorm(${this.channels}): input has shape [${x.shape.join(", ")}], channels on axis 1`);
    const axes = x.shape.flatMap((_, d) => (d === 1 ? [] : [d]));
    const perChannel = (t: Tensor): Tensor => t.reshape(x.shape.map((s, d) => (d === 1 ? s : 1)));
    let mean: Tensor, variance: Tensor;
    if (Tensor.training) {
      mean = x.mean({ axis: axes });
      variance = x.sub(perChannel(mean)).square().mean({ axis: axes });
      const count = x.numel / this.channels;
      const [m, v] = [mean.detach(), variance.detach().mul(count / Math.max(count - 1, 1))];
      this.runningMean.assign(this.runningMean.mul(1 - this.momentum).add(m.mul(this.momentum)));
      this.runningVar.assign(this.runningVar.mul(1 - this.momentum).add(v.mul(this.momentum)));
    } else {
      [mean, variance] = [this.runningMean, this.runningVar];
    }
    const scale = variance.add(this.eps).rsqrt().mul(this.weight);
    return x.sub(perChannel(mean)).mul(perChannel(scale)).add(perChannel(this.bias));
  }
}

/** Zeroes a fraction p of the inputs while `Tensor.training`; no parameters. */
export class Dropout {
  constructor(readonly p = 0.5) {}
  forward(x: Tensor): Tensor {
    return x.dropout(this.p);
  }
}
