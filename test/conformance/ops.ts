// tsgrad's side of each op the PyTorch conformance cases name (PyTorch's side: scripts/conformance/generate.py).
import { type IndexSpec, Tensor, nn } from "../../src/index.ts";
import type { InterpolateMode } from "../../src/tensor/index.ts";
import type { DTypeName } from "../../src/index.ts";

/** A case's arguments, as the generator writes them (JSON: absent or null where PyTorch's default applies). */
export interface Args {
  axis?: number | number[] | null;
  keepdim?: boolean;
  correction?: number;
  ord?: 1 | 2;
  scalar?: number;
  a?: number;
  b?: number;
  approximate?: "none" | "tanh";
  slope?: number;
  min?: number;
  max?: number;
  alpha?: number;
  beta?: number;
  dtype?: DTypeName;
  bits?: number;
  k?: number;
  largest?: boolean;
  descending?: boolean;
  shape?: number[];
  order?: number[];
  dim0?: number;
  dim1?: number;
  pads?: ([number, number] | null)[];
  value?: number | boolean;
  mode?: string;
  bounds?: ([number, number] | null)[];
  spec?: IndexSpec[];
  sizes?: number | number[];
  chunks?: number;
  start?: number;
  end?: number;
  stop?: number;
  step?: number;
  steps?: number;
  n?: number;
  m?: number;
  reps?: number[];
  diagonal?: number;
  eps?: number;
  formula?: string;
  numClasses?: number;
  reduction?: "mean" | "sum" | "none";
  ignoreIndex?: number;
  labelSmoothing?: number;
  posWeight?: number;
  groups?: number;
  momentum?: number;
  stride?: number | number[];
  padding?: number | number[];
  dilation?: number | number[];
  outputPadding?: number | number[];
  kernel?: number | number[];
  size?: number | number[];
  scaleFactor?: number | number[];
  alignCorners?: boolean;
}

export type Op = (xs: Tensor[], a: Args, device: string) => Tensor | Tensor[];

const reduceOptions = (a: Args) => ({ axis: a.axis ?? undefined, keepdim: a.keepdim ?? false });

const unary =
  (fn: (x: Tensor) => Tensor): Op =>
  (xs) =>
    fn(xs[0]!);

/** A binary op between two tensors, or a tensor and `a.scalar`. */
const binary =
  (fn: (x: Tensor, y: Tensor | number) => Tensor): Op =>
  (xs, a) =>
    fn(xs[0]!, a.scalar ?? xs[1]!);

const UNARY: Record<string, (x: Tensor) => Tensor> = {
  neg: (x) => x.neg(),
  reciprocal: (x) => x.reciprocal(),
  sqrt: (x) => x.sqrt(),
  rsqrt: (x) => x.rsqrt(),
  exp: (x) => x.exp(),
  exp2: (x) => x.exp2(),
  log: (x) => x.log(),
  log2: (x) => x.log2(),
  sin: (x) => x.sin(),
  cos: (x) => x.cos(),
  tanh: (x) => x.tanh(),
  sigmoid: (x) => x.sigmoid(),
  relu: (x) => x.relu(),
  abs: (x) => x.abs(),
  sign: (x) => x.sign(),
  erf: (x) => x.erf(),
  erfinv: (x) => x.erfinv(),
  square: (x) => x.square(),
  trunc: (x) => x.trunc(),
  floor: (x) => x.floor(),
  ceil: (x) => x.ceil(),
  round: (x) => x.round(),
  log1p: (x) => x.log1p(),
  expm1: (x) => x.expm1(),
  silu: (x) => x.silu(),
  relu6: (x) => x.relu6(),
  hardsigmoid: (x) => x.hardsigmoid(),
  hardswish: (x) => x.hardswish(),
  selu: (x) => x.selu(),
  mish: (x) => x.mish(),
  logsigmoid: (x) => x.logsigmoid(),
  logicalNot: (x) => x.logicalNot(),
  contiguous: (x) => x.contiguous(),
};

const BINARY: Record<string, (x: Tensor, y: Tensor | number) => Tensor> = {
  add: (x, y) => x.add(y),
  sub: (x, y) => x.sub(y),
  mul: (x, y) => x.mul(y),
  div: (x, y) => x.div(y),
  idiv: (x, y) => x.idiv(y),
  mod: (x, y) => x.mod(y),
  maximum: (x, y) => x.maximum(y),
  minimum: (x, y) => x.minimum(y),
  pow: (x, y) => x.pow(y),
  lt: (x, y) => x.lt(y),
  le: (x, y) => x.le(y),
  gt: (x, y) => x.gt(y),
  ge: (x, y) => x.ge(y),
  eq: (x, y) => x.eq(y),
  ne: (x, y) => x.ne(y),
  logicalAnd: (x, y) => x.logicalAnd(y as Tensor),
  logicalOr: (x, y) => x.logicalOr(y as Tensor),
  bitwiseAnd: (x, y) => x.bitwiseAnd(y),
  bitwiseOr: (x, y) => x.bitwiseOr(y),
  bitwiseXor: (x, y) => x.bitwiseXor(y),
};

/** A layer whose parameters are the case's inputs after the first (set in place of its initial ones). */
function withParameters<L extends object>(layer: L, names: (keyof L)[], params: Tensor[]): L {
  names.forEach((name, i) => {
    if (params[i]) (layer as Record<keyof L, unknown>)[name] = params[i];
  });
  return layer;
}

export const OPS: Record<string, Op> = {
  ...Object.fromEntries(Object.entries(UNARY).map(([name, fn]) => [name, unary(fn)])),
  ...Object.fromEntries(Object.entries(BINARY).map(([name, fn]) => [name, binary(fn)])),
  gelu: (xs, a) => xs[0]!.gelu({ approximate: a.approximate ?? "none" }),
  leakyRelu: (xs, a) => xs[0]!.leakyRelu(a.slope),
  hardtanh: (xs, a) => xs[0]!.hardtanh(a.min, a.max),
  elu: (xs, a) => xs[0]!.elu(a.alpha),
  softplus: (xs, a) => xs[0]!.softplus(a.beta),
  clip: (xs, a) => xs[0]!.clip(a.min!, a.max!),
  cast: (xs, a) => xs[0]!.cast(a.dtype!),
  bitcast: (xs, a) => xs[0]!.bitcast(a.dtype!),
  shl: (xs, a) => xs[0]!.shl(a.bits!),
  shr: (xs, a) => xs[0]!.shr(a.bits!),
  where: (xs, a) => {
    const rest = xs.slice(1);
    const x = a.a ?? rest.shift()!;
    const y = a.b ?? rest.shift()!;
    return xs[0]!.where(x, y);
  },

  sum: (xs, a) => xs[0]!.sum(reduceOptions(a)),
  mean: (xs, a) => xs[0]!.mean(reduceOptions(a)),
  max: (xs, a) => xs[0]!.max(reduceOptions(a)),
  min: (xs, a) => xs[0]!.min(reduceOptions(a)),
  prod: (xs, a) => xs[0]!.prod(reduceOptions(a)),
  logsumexp: (xs, a) => xs[0]!.logsumexp(reduceOptions(a)),
  any: (xs, a) => xs[0]!.any(reduceOptions(a)),
  all: (xs, a) => xs[0]!.all(reduceOptions(a)),
  var: (xs, a) => xs[0]!.var({ ...reduceOptions(a), correction: a.correction }),
  std: (xs, a) => xs[0]!.std({ ...reduceOptions(a), correction: a.correction }),
  norm: (xs, a) => xs[0]!.norm({ ...reduceOptions(a), ord: a.ord }),
  argmax: (xs, a) => xs[0]!.argmax({ axis: (a.axis as number | null) ?? undefined, keepdim: a.keepdim }),
  argmin: (xs, a) => xs[0]!.argmin({ axis: (a.axis as number | null) ?? undefined, keepdim: a.keepdim }),
  cumsum: (xs, a) => xs[0]!.cumsum(a.axis as number),
  cummax: (xs, a) => xs[0]!.cummax(a.axis as number),
  topk: (xs, a) => {
    const { values, indices } = xs[0]!.topk(a.k!, { axis: (a.axis as number) ?? -1, largest: a.largest ?? true });
    return [values, indices];
  },
  sort: (xs, a) => {
    const { values, indices } = xs[0]!.sort({ axis: (a.axis as number) ?? -1, descending: a.descending });
    return [values, indices];
  },
  argsort: (xs, a) => xs[0]!.argsort({ axis: (a.axis as number) ?? -1, descending: a.descending }),

  reshape: (xs, a) => xs[0]!.reshape(a.shape!),
  permute: (xs, a) => xs[0]!.permute(a.order!),
  transpose: (xs, a) => xs[0]!.transpose(a.dim0, a.dim1),
  expand: (xs, a) => xs[0]!.expand(a.shape!),
  pad: (xs, a) => xs[0]!.pad(a.pads!, (a.value as number) ?? 0, (a.mode ?? "constant") as "constant"),
  shrink: (xs, a) => xs[0]!.shrink(a.bounds!),
  flip: (xs, a) => xs[0]!.flip(a.axis!),
  index: (xs, a) => xs[0]!.index(...a.spec!),
  cat: (xs, a) => Tensor.cat(xs, (a.axis as number) ?? 0),
  stack: (xs, a) => Tensor.stack(xs, (a.axis as number) ?? 0),
  split: (xs, a) => xs[0]!.split(a.sizes!, (a.axis as number) ?? 0),
  chunk: (xs, a) => xs[0]!.chunk(a.chunks!, (a.axis as number) ?? 0),
  squeeze: (xs, a) => xs[0]!.squeeze((a.axis as number) ?? undefined),
  unsqueeze: (xs, a) => xs[0]!.unsqueeze(a.axis as number),
  flatten: (xs, a) => xs[0]!.flatten(a.start, a.end),
  repeat: (xs, a) => xs[0]!.repeat(a.reps!),
  tril: (xs, a) => xs[0]!.tril(a.diagonal),
  triu: (xs, a) => xs[0]!.triu(a.diagonal),
  gather: (xs, a) => xs[0]!.gather(a.axis as number, xs[1]!),

  matmul: (xs) => xs[0]!.matmul(xs[1]!),
  dot: (xs) => xs[0]!.dot(xs[1]!),
  linear: (xs) => xs[0]!.linear(xs[1]!, xs[2]),
  softmax: (xs, a) => xs[0]!.softmax((a.axis as number) ?? -1),
  logSoftmax: (xs, a) => xs[0]!.logSoftmax((a.axis as number) ?? -1),
  layerNorm: (xs, a) => xs[0]!.layerNorm({ axis: a.axis ?? -1, eps: a.eps }),
  einsum: (xs, a) => Tensor.einsum(a.formula!, ...xs),
  oneHot: (xs, a) => xs[0]!.oneHot(a.numClasses!),
  embedding: (xs) => Tensor.embedding(xs[0]!, xs[1]!),
  sparseCategoricalCrossentropy: (xs, a) =>
    xs[0]!.sparseCategoricalCrossentropy(xs[1]!, {
      ignoreIndex: a.ignoreIndex,
      weights: xs[2],
      reduction: a.reduction,
      labelSmoothing: a.labelSmoothing,
    }),
  crossEntropy: (xs, a) => xs[0]!.crossEntropy(xs[1]!, { reduction: a.reduction, labelSmoothing: a.labelSmoothing }),
  binaryCrossentropy: (xs, a) => xs[0]!.binaryCrossentropy(xs[1]!, { reduction: a.reduction }),
  binaryCrossentropyLogits: (xs, a) =>
    xs[0]!.binaryCrossentropyLogits(xs[1]!, { reduction: a.reduction, posWeight: xs[2] ?? a.posWeight }),
  mseLoss: (xs, a) => xs[0]!.mseLoss(xs[1]!, { reduction: a.reduction }),
  l1Loss: (xs, a) => xs[0]!.l1Loss(xs[1]!, { reduction: a.reduction }),
  scaledDotProductAttention: (xs) => xs[0]!.scaledDotProductAttention(xs[1]!, xs[2]!, { mask: xs[3] }),
  conv2d: (xs, a) =>
    xs[0]!.conv2d(xs[1]!, {
      bias: xs[2],
      stride: a.stride,
      padding: a.padding,
      dilation: a.dilation,
      groups: a.groups,
    }),
  convTranspose2d: (xs, a) =>
    xs[0]!.convTranspose2d(xs[1]!, {
      bias: xs[2],
      stride: a.stride,
      padding: a.padding,
      outputPadding: a.outputPadding,
      dilation: a.dilation,
      groups: a.groups,
    }),
  maxPool2d: (xs, a) =>
    xs[0]!.maxPool2d({
      kernel: a.kernel!,
      stride: a.stride ?? undefined,
      padding: a.padding,
      dilation: a.dilation,
    }),
  avgPool2d: (xs, a) => xs[0]!.avgPool2d({ kernel: a.kernel!, stride: a.stride ?? undefined, padding: a.padding }),
  interpolate: (xs, a) =>
    xs[0]!.interpolate({
      size: a.size ?? undefined,
      scaleFactor: a.scaleFactor ?? undefined,
      mode: a.mode as InterpolateMode,
      alignCorners: a.alignCorners ?? undefined,
    }),

  "nn.Linear": (xs) => {
    const [outFeatures, inFeatures] = xs[1]!.shape as [number, number];
    return withParameters(new nn.Linear(inFeatures, outFeatures), ["weight", "bias"], xs.slice(1)).forward(xs[0]!);
  },
  "nn.Embedding": (xs) => {
    const [vocab, dim] = xs[1]!.shape as [number, number];
    return withParameters(new nn.Embedding(vocab, dim), ["weight"], xs.slice(1)).forward(xs[0]!);
  },
  "nn.Conv2d": (xs, a) => {
    const [filters, channels, kernel] = xs[1]!.shape as [number, number, number];
    const layer = new nn.Conv2d(channels, filters, kernel, { padding: a.padding as number });
    return withParameters(layer, ["weight", "bias"], xs.slice(1)).forward(xs[0]!);
  },
  "nn.LayerNorm": (xs, a) =>
    withParameters(new nn.LayerNorm(xs[0]!.shape.at(-1)!, a.eps), ["weight", "bias"], xs.slice(1)).forward(xs[0]!),
  "nn.RMSNorm": (xs, a) =>
    withParameters(new nn.RMSNorm(xs[0]!.shape.at(-1)!, a.eps), ["weight"], xs.slice(1)).forward(xs[0]!),
  "nn.GroupNorm": (xs, a) =>
    withParameters(new nn.GroupNorm(a.groups!, xs[0]!.shape[1]!, a.eps), ["weight", "bias"], xs.slice(1)).forward(
      xs[0]!,
    ),
  "nn.BatchNorm": (xs, a, device) => {
    const channels = xs[0]!.shape[1]!;
    const layer = withParameters(new nn.BatchNorm(channels, a.eps, a.momentum), ["weight", "bias"], xs.slice(1));
    // the running statistics start as the layer's (zeros and ones), on the case's device
    layer.runningMean = Tensor.zeros([channels], { device }).contiguous();
    layer.runningVar = Tensor.ones([channels], { device }).contiguous();
    const training = Tensor.training;
    Tensor.training = true;
    try {
      return [layer.forward(xs[0]!), layer.runningMean, layer.runningVar];
    } finally {
      Tensor.training = training;
    }
  },

  arange: (_, a, device) => Tensor.arange(a.start!, a.stop, a.step, { device }),
  linspace: (_, a, device) => Tensor.linspace(a.start!, a.end!, a.steps!, { device }),
  eye: (_, a, device) => Tensor.eye(a.n!, a.m, { device }),
  full: (_, a, device) => Tensor.full(a.shape!, a.value!, { device }),
  zeros: (_, a, device) => Tensor.zeros(a.shape!, { device }),
  ones: (_, a, device) => Tensor.ones(a.shape!, { device }),
};
