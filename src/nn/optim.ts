// Optimizers over lazy tensors: a step assigns new values into the parameters and the optimizer's
// own state, so a whole update is one graph (and a JIT can capture it). The learning rate is a
// tensor, so a schedule changes it in place without rebuilding anything.
import { dtypes } from "../dtype.ts";
import { TsgradError, fmtShape } from "../helpers.ts";
import { Tensor } from "../tensor/index.ts";
import type { HasStateDict, StateDict } from "./state.ts";
import { realizeInitial } from "./together.ts";

/** A float32 [1] tensor in its own buffer, for state a step assigns to. */
const scalarState = (value: number, device: string): Tensor => new Tensor([value], { dtype: dtypes.float32, device });
/** float32 zeros shaped like `t` in a buffer of their own, to assign to (lazy: realize them together, one schedule). */
const zerosLike = (t: Tensor): Tensor => Tensor.zeros(t.shape, { dtype: dtypes.float32, device: t.device }).owned();

/** Common ground of every optimizer: parameters, a learning-rate tensor, zeroGrad and step. */
export abstract class Optimizer implements HasStateDict {
  readonly params: Tensor[];
  /** float32 [1]; schedules assign to it. */
  readonly lr: Tensor;

  constructor(params: readonly Tensor[], lr: number) {
    if (params.length === 0) throw new TsgradError("an optimizer needs at least one parameter");
    params.forEach((p, i) => {
      if (!p.requiresGrad)
        throw new TsgradError(`optimizer parameter ${i} (${fmtShape(p.shape)}) does not require grad`);
    });
    this.params = [...params];
    this.lr = scalarState(lr, params[0]!.device);
  }

  /** Forgets the gradients of the last backward pass. */
  zeroGrad(): void {
    for (const p of this.params) p.grad = null;
  }

  /** Builds the update lazily (assigning into parameters and state) and returns what to realize. */
  scheduleStep(): Tensor[] {
    const grads = this.params.map((p, i) => {
      if (!p.grad)
        throw new TsgradError(`optimizer parameter ${i} (${fmtShape(p.shape)}) has no gradient; run backward() first`);
      return p.grad;
    });
    return this.update(grads);
  }

  /** One update, computed now. */
  step(): void {
    Tensor.realizeAll(this.scheduleStep());
  }

  abstract stateDict(): StateDict;
  protected abstract update(grads: Tensor[]): Tensor[];
}

/**
 * Scales the parameters' gradients so that their global L2 norm is at most `maxNorm` (PyTorch's
 * clip_grad_norm_), lazily: it replaces each `grad` with the scaled one, so a jitted step captures it. Returns
 * the norm before clipping (float32 scalar). Parameters without a gradient are skipped.
 */
export function clipGradNorm(
  params: readonly Tensor[],
  maxNorm: number,
  { eps = 1e-6 }: { eps?: number } = {},
): Tensor {
  if (!(maxNorm > 0)) throw new TsgradError(`clipGradNorm: maxNorm must be positive, got ${maxNorm}`);
  const withGrad = params.filter((p) => p.grad);
  if (withGrad.length === 0) throw new TsgradError("clipGradNorm: no parameter has a gradient; run backward() first");
  const norm = withGrad
    .map((p) => p.grad!.float().square().sum())
    .reduce((a, b) => a.add(b))
    .sqrt();
  const scale = norm.add(eps).reciprocal().mul(maxNorm).minimum(1);
  for (const p of withGrad) p.grad = p.grad!.mul(scale).cast(p.grad!.dtype);
  return norm;
}

/** Stochastic gradient descent with optional (Nesterov) momentum and L2 weight decay, as PyTorch's SGD. */
export class SGD extends Optimizer {
  readonly momentumBuffers: Tensor[];
  readonly momentum: number;
  readonly weightDecay: number;
  readonly nesterov: boolean;

  constructor(
    params: readonly Tensor[],
    {
      lr = 0.001,
      momentum = 0,
      weightDecay = 0,
      nesterov = false,
    }: { lr?: number; momentum?: number; weightDecay?: number; nesterov?: boolean } = {},
  ) {
    super(params, lr);
    this.momentum = momentum;
    this.weightDecay = weightDecay;
    this.nesterov = nesterov;
    this.momentumBuffers = momentum ? this.params.map(zerosLike) : [];
    realizeInitial(this.momentumBuffers);
  }

  protected update(grads: Tensor[]): Tensor[] {
    return this.params.flatMap((p, i) => {
      let g = grads[i]!.cast(dtypes.float32);
      if (this.weightDecay) g = g.add(p.cast(dtypes.float32).mul(this.weightDecay));
      const written: Tensor[] = [];
      if (this.momentum) {
        const buffer = this.momentumBuffers[i]!.assign(this.momentumBuffers[i]!.mul(this.momentum).add(g));
        written.push(buffer);
        g = this.nesterov ? g.add(buffer.mul(this.momentum)) : buffer;
      }
      written.push(p.assign(p.cast(dtypes.float32).sub(g.mul(this.lr)).cast(p.dtype)));
      return written;
    });
  }

  stateDict(): StateDict {
    const state: StateDict = { lr: this.lr };
    this.momentumBuffers.forEach((b, i) => (state[`momentum.${i}`] = b));
    return state;
  }
}

export interface LambOptions {
  lr?: number;
  b1?: number;
  b2?: number;
  eps?: number;
  weightDecay?: number;
  /** true: plain Adam(W) steps, no trust ratio. */
  adam?: boolean;
  /**
   * false: no trust ratio for these tensors (r = 1), as the MLPerf reference treats the ones it does not decay
   * (biases, LayerNorm); true by default.
   */
  layerAdaptation?: boolean;
}

/**
 * LAMB (You et al.), as the MLPerf BERT reference runs it: Adam moments with bias correction,
 * update u = m̂ / (sqrt(v̂) + eps) + weightDecay * w, then w -= lr * r * u with the trust ratio
 * r = ||w|| / ||u|| per tensor (1 where either norm is 0, or with `layerAdaptation: false`). Moments are
 * kept in float32.
 */
export class LAMB extends Optimizer {
  readonly m: Tensor[];
  readonly v: Tensor[];
  /** b1^t and b2^t after t steps, for the bias correction. */
  readonly b1Power: Tensor;
  readonly b2Power: Tensor;
  readonly b1: number;
  readonly b2: number;
  readonly eps: number;
  readonly weightDecay: number;
  readonly adam: boolean;
  readonly layerAdaptation: boolean;

  constructor(
    params: readonly Tensor[],
    {
      lr = 0.001,
      b1 = 0.9,
      b2 = 0.999,
      eps = 1e-6,
      weightDecay = 0,
      adam = false,
      layerAdaptation = true,
    }: LambOptions = {},
  ) {
    super(params, lr);
    this.b1 = b1;
    this.b2 = b2;
    this.eps = eps;
    this.weightDecay = weightDecay;
    this.adam = adam;
    this.layerAdaptation = layerAdaptation;
    this.m = this.params.map(zerosLike);
    this.v = this.params.map(zerosLike);
    realizeInitial([...this.m, ...this.v]);
    this.b1Power = scalarState(1, this.lr.device);
    this.b2Power = scalarState(1, this.lr.device);
  }

  protected update(grads: Tensor[]): Tensor[] {
    const b1Power = this.b1Power.assign(this.b1Power.mul(this.b1));
    const b2Power = this.b2Power.assign(this.b2Power.mul(this.b2));
    const updated = this.params.flatMap((p, i) => {
      const g = grads[i]!.cast(dtypes.float32);
      const w = p.cast(dtypes.float32);
      const m = this.m[i]!.assign(this.m[i]!.mul(this.b1).add(g.mul(1 - this.b1)));
      const v = this.v[i]!.assign(this.v[i]!.mul(this.b2).add(g.square().mul(1 - this.b2)));
      const mHat = m.div(b1Power.neg().add(1));
      const vHat = v.div(b2Power.neg().add(1));
      const adamStep = mHat.div(vHat.sqrt().add(this.eps));
      const step = this.weightDecay ? adamStep.add(w.mul(this.weightDecay)) : adamStep;
      const ratio = this.adam || !this.layerAdaptation ? 1 : trustRatio(w, step);
      return [m, v, p.assign(w.sub(step.mul(this.lr).mul(ratio)).cast(p.dtype))];
    });
    return [b1Power, b2Power, ...updated];
  }

  stateDict(): StateDict {
    const state: StateDict = { lr: this.lr, b1Power: this.b1Power, b2Power: this.b2Power };
    this.m.forEach((t, i) => (state[`m.${i}`] = t));
    this.v.forEach((t, i) => (state[`v.${i}`] = t));
    return state;
  }
}

/**
 * ||w|| / ||step||, or 1 where either norm is 0 (a zero-initialised bias, a zero update). Both norms are
 * one reduce over the two stacked (one kernel, or two for a long tensor, instead of two or four a parameter).
 */
function trustRatio(w: Tensor, step: Tensor): Tensor {
  const [weightNorm, stepNorm] = Tensor.stack([w.square().reshape([-1]), step.square().reshape([-1])])
    .sum({ axis: 1 })
    .sqrt()
    .split(1);
  return weightNorm!
    .gt(0)
    .where(stepNorm!.gt(0).where(weightNorm!.div(stepNorm!), 1), 1)
    .reshape([]);
}

/** AdamW (decoupled weight decay): LAMB without the trust ratio. */
export class AdamW extends LAMB {
  constructor(
    params: readonly Tensor[],
    { lr = 0.001, b1 = 0.9, b2 = 0.999, eps = 1e-8, weightDecay = 0.01 }: Omit<LambOptions, "adam"> = {},
  ) {
    super(params, { lr, b1, b2, eps, weightDecay, adam: true });
  }
}

/** Several optimizers over disjoint parameters (e.g. with and without weight decay), stepped together. */
export class OptimizerGroup implements HasStateDict {
  readonly optimizers: Optimizer[];
  constructor(...optimizers: Optimizer[]) {
    this.optimizers = optimizers;
  }
  get params(): Tensor[] {
    return this.optimizers.flatMap((o) => o.params);
  }
  zeroGrad(): void {
    for (const o of this.optimizers) o.zeroGrad();
  }
  scheduleStep(): Tensor[] {
    return this.optimizers.flatMap((o) => o.scheduleStep());
  }
  step(): void {
    Tensor.realizeAll(this.scheduleStep());
  }
  stateDict(): StateDict {
    const state: StateDict = {};
    this.optimizers.forEach((o, i) => {
      for (const [name, t] of Object.entries(o.stateDict())) state[`${i}.${name}`] = t;
    });
    return state;
  }
}
