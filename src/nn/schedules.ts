// Learning-rate schedules. The step count and the rate are tensors that a step assigns to, so a
// jitted train step that reads `optimizer.lr` sees every change without being rebuilt.
import { dtypes } from "../dtype.ts";
import { TsgradError } from "../helpers.ts";
import { Tensor } from "../tensor/index.ts";
import type { Optimizer } from "./optim.ts";
import type { HasStateDict, StateDict } from "./state.ts";
import { realizeInitial } from "./together.ts";

/** Sets an optimizer's learning rate from a function of the number of steps taken. */
export abstract class LRScheduler implements HasStateDict {
  /** float32 [1]: how many times `step` ran. */
  readonly stepCount: Tensor;

  constructor(readonly optimizer: Optimizer) {
    this.stepCount = new Tensor([0], { dtype: dtypes.float32, device: optimizer.lr.device });
  }

  /** The learning rate after `steps` steps (a float32 tensor shaped like `steps`). */
  abstract lrAt(steps: Tensor): Tensor;

  /** Counts a step and sets the new rate, lazily; returns what to realize. */
  scheduleStep(): Tensor[] {
    this.stepCount.assign(this.stepCount.add(1));
    return [this.stepCount, this.optimizer.lr.assign(this.lrAt(this.stepCount))];
  }

  step(): void {
    Tensor.realizeAll(this.scheduleStep());
  }

  stateDict(): StateDict {
    return { step: this.stepCount };
  }

  /**
   * Sets the rate for the current step count, so the first step already runs with the scheduled rate (inside
   * `initialisedTogether`, with the rest of the initial state).
   */
  protected applyCurrent(): void {
    realizeInitial([this.optimizer.lr.assign(this.lrAt(this.stepCount))]);
  }
}

/** What both warmup schedules are given: a linear warmup from 0, then a decay from `initialLr` to `endLr`. */
interface WarmupOptions {
  initialLr: number;
  endLr?: number;
  totalSteps: number;
  warmupSteps?: number;
}

/**
 * Linear warmup from 0 to `initialLr` over `warmupSteps` (step s <= warmup: initialLr * s / warmup), then the
 * subclass's decay. Subclasses call `applyCurrent()` once their own settings are in place.
 */
abstract class WarmupThenDecay extends LRScheduler {
  readonly initialLr: number;
  readonly endLr: number;
  readonly totalSteps: number;
  readonly warmupSteps: number;

  constructor(
    optimizer: Optimizer,
    name: string,
    { initialLr, endLr = 0, totalSteps, warmupSteps = 0 }: WarmupOptions,
  ) {
    super(optimizer);
    if (!(totalSteps > 0) || !(warmupSteps >= 0))
      throw new TsgradError(`${name}: totalSteps ${totalSteps} must be > 0 and warmupSteps ${warmupSteps} >= 0`);
    this.initialLr = initialLr;
    this.endLr = endLr;
    this.totalSteps = totalSteps;
    this.warmupSteps = Math.min(warmupSteps, totalSteps);
  }

  /** The rate after the warmup, at `steps`. */
  protected abstract decayed(steps: Tensor): Tensor;

  lrAt(steps: Tensor): Tensor {
    const decayed = this.decayed(steps);
    if (this.warmupSteps === 0) return decayed;
    return steps.le(this.warmupSteps).where(steps.mul(this.initialLr / this.warmupSteps), decayed);
  }
}

export interface PolynomialDecayOptions extends WarmupOptions {
  warmupSteps: number;
  power?: number;
}

/**
 * The seed's schedule: linear warmup from 0 to `initialLr` over `warmupSteps`, then polynomial decay towards
 * `endLr`, as tinygrad's MLPerf BERT computes it for step s (ReferencePolynomialDecay is the reference's):
 *   s <= warmup: initialLr * s / warmup
 *   otherwise:   (initialLr - endLr) * (1 - (s - warmup) / (totalSteps - warmup + 1))^power + endLr
 * The first step therefore runs with LR 0.
 */
export class PolynomialDecayWithWarmup extends WarmupThenDecay {
  readonly power: number;

  constructor(optimizer: Optimizer, options: PolynomialDecayOptions) {
    super(optimizer, "PolynomialDecayWithWarmup", options);
    this.power = options.power ?? 1;
    this.applyCurrent();
  }

  protected decayed(steps: Tensor): Tensor {
    const decayLength = this.totalSteps - this.warmupSteps + 1;
    const remaining = steps.sub(this.warmupSteps).div(decayLength).neg().add(1);
    return remaining
      .pow(this.power)
      .mul(this.initialLr - this.endLr)
      .add(this.endLr);
  }
}

export interface ReferencePolynomialDecayOptions {
  initialLr: number;
  endLr?: number;
  totalSteps: number;
  warmupSteps?: number;
  power?: number;
  /** The step the warmup counts from (the reference's `start_warmup_step`; 0 by default). */
  startWarmupStep?: number;
}

/**
 * The MLPerf reference's schedule (its TensorFlow `optimization.py`) for step s, the number of steps
 * taken before this one: a polynomial decay over the whole run, from step 0,
 *   (initialLr - endLr) * (1 - min(s, totalSteps) / totalSteps)^power + endLr,
 * which a linear warmup replaces while s - startWarmupStep < warmupSteps:
 *   initialLr * (s - startWarmupStep) / warmupSteps.
 * So the first step runs with LR 0 when there is a warmup, and the step after the warmup with the decayed
 * rate, not the peak (the seed's PolynomialDecayWithWarmup starts its decay at the warmup's end).
 */
export class ReferencePolynomialDecay extends LRScheduler {
  readonly initialLr: number;
  readonly endLr: number;
  readonly totalSteps: number;
  readonly warmupSteps: number;
  readonly power: number;
  readonly startWarmupStep: number;

  constructor(
    optimizer: Optimizer,
    {
      initialLr,
      endLr = 0,
      totalSteps,
      warmupSteps = 0,
      power = 1,
      startWarmupStep = 0,
    }: ReferencePolynomialDecayOptions,
  ) {
    super(optimizer);
    if (!(totalSteps > 0) || !(warmupSteps >= 0))
      throw new TsgradError(
        `ReferencePolynomialDecay: totalSteps ${totalSteps} must be > 0 and warmupSteps ${warmupSteps} >= 0`,
      );
    this.initialLr = initialLr;
    this.endLr = endLr;
    this.totalSteps = totalSteps;
    this.warmupSteps = warmupSteps;
    this.power = power;
    this.startWarmupStep = startWarmupStep;
    this.applyCurrent();
  }

  lrAt(steps: Tensor): Tensor {
    const decayed = steps
      .minimum(this.totalSteps)
      .div(this.totalSteps)
      .neg()
      .add(1)
      .pow(this.power)
      .mul(this.initialLr - this.endLr)
      .add(this.endLr);
    if (this.warmupSteps === 0) return decayed;
    const sinceStart = steps.sub(this.startWarmupStep);
    return sinceStart.lt(this.warmupSteps).where(sinceStart.mul(this.initialLr / this.warmupSteps), decayed);
  }
}

export type CosineDecayOptions = WarmupOptions;

/**
 * Linear warmup from 0 to `initialLr` over `warmupSteps`, then half a cosine down to `endLr` at `totalSteps`
 * (and `endLr` after it): for step s past the warmup, with t = (s - warmup) / (totalSteps - warmup),
 *   endLr + (initialLr - endLr) * (1 + cos(pi * min(t, 1))) / 2
 */
export class CosineDecayWithWarmup extends WarmupThenDecay {
  constructor(optimizer: Optimizer, options: CosineDecayOptions) {
    super(optimizer, "CosineDecayWithWarmup", options);
    this.applyCurrent();
  }

  protected decayed(steps: Tensor): Tensor {
    const t = steps
      .sub(this.warmupSteps)
      .div(Math.max(this.totalSteps - this.warmupSteps, 1))
      .clip(0, 1);
    return t
      .mul(Math.PI)
      .cos()
      .add(1)
      .mul((this.initialLr - this.endLr) / 2)
      .add(this.endLr);
  }
}

/** Schedulers of several optimizers (an OptimizerGroup's), stepped together. */
export class LRSchedulerGroup implements HasStateDict {
  readonly schedulers: LRScheduler[];
  constructor(...schedulers: LRScheduler[]) {
    this.schedulers = schedulers;
  }
  scheduleStep(): Tensor[] {
    return this.schedulers.flatMap((s) => s.scheduleStep());
  }
  step(): void {
    Tensor.realizeAll(this.scheduleStep());
  }
  stateDict(): StateDict {
    const state: StateDict = {};
    this.schedulers.forEach((s, i) => (state[`${i}.step`] = s.stepCount));
    return state;
  }
}
