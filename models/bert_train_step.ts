// One BERT training step and one eval step as plain functions of tensors, so that a JIT can wrap
// them: the train step is forward, backward of loss*scale, unscale, clip by global norm 1.0,
// LAMB step and LR schedule step; the eval step gives the four MLPerf metrics.
import { Tensor, TsgradError, dist, dtypes, fmtShape, getenv, jit, nn, type DType } from "../src/index.ts";
import {
  type BertBatch,
  type BertForPretraining,
  type BertMetrics,
  bertPretrainingLosses,
  bertPretrainingMetrics,
} from "./bert.ts";

/**
 * Where the MLPerf reference (its TensorFlow BERT) and the seed's code (tinygrad's train_bert) part:
 * "reference" follows the reference, "seed" the seed (docs/mlperf.md#numerics).
 */
export type TrainingRule = "reference" | "seed";

export interface BertOptimizerOptions {
  lr: number;
  totalSteps: number;
  warmupSteps: number;
  power?: number;
  weightDecay?: number;
  eps?: number;
  b1?: number;
  b2?: number;
  /** reference (default): no trust ratio for biases and LayerNorm; seed: a trust ratio for every tensor. */
  lambRule?: TrainingRule;
  /** reference (default): ReferencePolynomialDecay; seed: PolynomialDecayWithWarmup. */
  lrSchedule?: TrainingRule;
  /** The step the reference's warmup counts from (its start_warmup_step). */
  startWarmupStep?: number;
}

/** True for parameters LAMB must not decay: biases and LayerNorm weights, as the reference excludes them. */
export const isNoDecayParameter = (name: string): boolean => name.endsWith("bias") || name.includes("LayerNorm");

/**
 * The reference's optimisation: LAMB with weight decay on all but biases and LayerNorm parameters (two LAMBs
 * joined by an OptimizerGroup; under the reference rule the second also has no trust ratio), each with its
 * polynomial-decay schedule (the reference's or the seed's).
 */
export function createBertOptimizer(
  model: BertForPretraining,
  {
    lr,
    totalSteps,
    warmupSteps,
    power = 1,
    weightDecay = 0.01,
    eps = 1e-6,
    b1 = 0.9,
    b2 = 0.999,
    lambRule = "reference",
    lrSchedule = "reference",
    startWarmupStep = 0,
  }: BertOptimizerOptions,
): { optimizer: nn.OptimizerGroup; scheduler: nn.LRSchedulerGroup } {
  const named = Object.entries(nn.getStateDict(model));
  const decayed = named.filter(([name]) => !isNoDecayParameter(name)).map(([, t]) => t);
  const notDecayed = named.filter(([name]) => isNoDecayParameter(name)).map(([, t]) => t);
  const schedule = { initialLr: lr, endLr: 0, totalSteps, warmupSteps, power };
  const scheduleOf = (o: nn.Optimizer): nn.LRScheduler =>
    lrSchedule === "seed"
      ? new nn.PolynomialDecayWithWarmup(o, schedule)
      : new nn.ReferencePolynomialDecay(o, { ...schedule, startWarmupStep });
  // both LAMBs' moments and both schedules' first rates in one schedule (one round of compiler runs on the CPU)
  return nn.initialisedTogether(() => {
    const optimizers = [
      new nn.LAMB(decayed, { lr, b1, b2, eps, weightDecay }),
      new nn.LAMB(notDecayed, { lr, b1, b2, eps, weightDecay: 0, layerAdaptation: lambRule === "seed" }),
    ];
    return {
      optimizer: new nn.OptimizerGroup(...optimizers),
      scheduler: new nn.LRSchedulerGroup(...optimizers.map(scheduleOf)),
    };
  });
}

/** What the reference adds to the masked-LM loss's denominator (the sum of masked_lm_weights). */
export const REFERENCE_MASKED_LM_EPSILON = 1e-5;

export interface TrainStepOptions {
  /** The loss is multiplied by this before backward and the gradients divided after (fp16 loss scaling). */
  lossScale: number;
  /** The batch is split into this many micro-batches whose gradients add up before one update. */
  gradientAccSteps: number;
  /** Gradients are scaled down so that their global L2 norm is at most this. */
  maxGradNorm: number;
  /** reference (default): the masked-LM loss divides by the weights' sum + 1e-5; seed: by the sum. */
  lossRule?: TrainingRule;
}

/** `LOSS_SCALER` (default 2^10 for float16, 1 otherwise) and `GRADIENT_ACC_STEPS` (default 1). */
export function trainStepOptionsFromEnv(paramDtype: DType): TrainStepOptions {
  return {
    lossScale: getenv("LOSS_SCALER", paramDtype === dtypes.float16 ? 2 ** 10 : 1),
    gradientAccSteps: getenv("GRADIENT_ACC_STEPS", 1),
    maxGradNorm: 1.0,
  };
}

export interface BertTrainState {
  model: BertForPretraining;
  optimizer: nn.OptimizerGroup;
  scheduler: nn.LRSchedulerGroup;
}

/** Runs `fn` with `Tensor.training` set to `on`, restoring it afterwards. */
function withTraining<T>(on: boolean, fn: () => T): T {
  const before = Tensor.training;
  Tensor.training = on;
  try {
    return fn();
  } finally {
    Tensor.training = before;
  }
}

/** One optimisation step on `batch`; returns the (realized) mean training loss. */
export function bertTrainStep(state: BertTrainState, batch: BertBatch, options: TrainStepOptions): Tensor {
  return withTraining(true, () => {
    // packed micro-batches hold different numbers of predictions and samples: each divides by the whole step's
    const loss = bertGradients(
      state,
      batch,
      options,
      batch.nextSentenceWeights && options.gradientAccSteps > 1 ? batchLossDenominators(batch, options) : {},
    );
    // the loss, the update, the next rate and the dropout draws' counters in one schedule (the update reads the
    // rate before the schedule's assign writes it: a schedule orders an assign after its target's readers)
    Tensor.realizeAll([loss, ...bertUpdate(state, options), ...state.scheduler.scheduleStep(), ...Tensor.rngState()]);
    return loss;
  });
}

/** What a step's losses divide by, the whole step's: its masked-LM weight (+ the reference's 1e-5) and samples. */
export interface LossDenominators {
  maskedLm?: Tensor;
  nextSentence?: Tensor;
}

/** A batch's own denominators, computed with the step: the sums of its masked-LM and NSP weights. */
export function batchLossDenominators(
  batch: BertBatch,
  { lossRule = "reference" }: TrainStepOptions,
): LossDenominators {
  const epsilon = lossRule === "reference" ? REFERENCE_MASKED_LM_EPSILON : 0;
  const weightSum = batch.maskedLmWeights.cast(dtypes.float32).sum();
  return {
    maskedLm: (epsilon > 0 ? weightSum.add(epsilon) : weightSum).maximum(1e-12),
    nextSentence: batch.nextSentenceWeights!.cast(dtypes.float32).sum().maximum(1e-12),
  };
}

/**
 * Forward and backward of loss * lossScale on `batch` (in GRADIENT_ACC_STEPS micro-batches): every
 * parameter's `grad` set (still scaled), the mean loss returned lazily. With `denominators.maskedLm` the
 * masked-LM loss is the batch's weighted sum divided by it (data-parallel ranks pass the whole global
 * batch's weight over the rank count, so that the ranks' mean is the global batch's loss and gradient);
 * `denominators.nextSentence` does the same for the NSP loss (packed batches, whose sample count varies).
 * Without one, that loss is each micro-batch's mean, averaged over the micro-batches.
 */
export function bertGradients(
  { model, optimizer }: BertTrainState,
  batch: BertBatch,
  { lossScale, gradientAccSteps, lossRule = "reference" }: TrainStepOptions,
  denominators: LossDenominators = {},
): Tensor {
  const maskedLmEpsilon = lossRule === "reference" ? REFERENCE_MASKED_LM_EPSILON : 0;
  const { maskedLm, nextSentence } = denominators;
  return withTraining(true, () => {
    optimizer.zeroGrad();
    const params = optimizer.params;
    let loss: Tensor | undefined;
    for (const micro of splitBatch(batch, gradientAccSteps)) {
      const losses = bertPretrainingLosses(model.forward(micro), micro, {
        maskedLmDenominator: maskedLm,
        maskedLmEpsilon,
        nextSentenceDenominator: nextSentence,
      });
      // a given denominator is the whole step's already; a mean is the micro-batch's, one of gradientAccSteps
      const perStep = (part: Tensor, whole: Tensor | undefined) => (whole ? part : part.div(gradientAccSteps));
      const microLoss =
        maskedLm || nextSentence
          ? perStep(losses.maskedLmLoss, maskedLm).add(perStep(losses.nextSentenceLoss, nextSentence))
          : losses.loss.div(gradientAccSteps);
      microLoss.mul(lossScale).backward();
      loss = loss ? loss.add(microLoss) : microLoss;
      // with several micro-batches, keep only the summed gradients between them
      if (gradientAccSteps > 1) Tensor.realizeAll([loss, ...params.map((p) => p.grad!)]);
    }
    return loss!;
  });
}

/** The update from the parameters' (scaled) gradients: unscale, clip, LAMB; the tensors to realize. */
export function bertUpdate(
  { optimizer }: BertTrainState,
  { lossScale, maxGradNorm }: Pick<TrainStepOptions, "lossScale" | "maxGradNorm">,
): Tensor[] {
  clipGradients(optimizer.params, lossScale, maxGradNorm);
  return optimizer.scheduleStep();
}

/**
 * A data-parallel train step: the batch is this rank's part of the global batch, unpacked (seven tensors) or packed
 * (eleven, with `sampleCount`, the samples its rows hold). `samples` is the global batch's count of samples.
 */
export type BertDataParallelStep = (
  batch: BertBatchTensors | PackedBertBatchTensors,
  maskedLmWeightSum: number,
  sampleCount?: number,
) => { loss: Tensor; lr: Tensor; reduceMs: number; samples: number };

/**
 * The train step of one rank among `comm.size`: a jitted forward and backward on this rank's part of the
 * global batch, the gradients (and the loss) averaged across ranks through `comm`, then a jitted update,
 * the same on every rank. `maskedLmWeightSum` is this part's sum of masked_lm_weights: the ranks add theirs
 * up first, so that every rank's masked-LM loss is divided by the global batch's weight. A packed part's
 * `sampleCount` is added up the same way for the NSP loss, the parts holding different numbers of samples.
 * With one rank (or in-process devices alone) this is the plain step split in two; the sum over ranks is
 * exact where the in-process one adds in the same order, so N ranks give the weights N devices in one
 * process give. With `nccl` (GPU ranks) the gradients are reduced on the GPUs, otherwise through host memory.
 */
export function makeBertDataParallelStep(
  state: BertTrainState,
  options: TrainStepOptions,
  comm: dist.Communicator,
  { nccl }: { nccl?: dist.NcclCommunicator } = {},
): BertDataParallelStep {
  // the batch's tensors, then the masked-LM denominator, then (packed) the NSP one
  const gradientsFor = (fields: 7 | 11) =>
    jit((...t: Tensor[]) => {
      const batch =
        fields === 11
          ? packedBertBatchOf(t.slice(0, 11) as PackedBertBatchTensors)
          : bertBatchOf(t.slice(0, 7) as BertBatchTensors);
      const loss = bertGradients(state, batch, options, { maskedLm: t[fields], nextSentence: t[fields + 1] });
      return { loss, grads: state.optimizer.params.map((p) => p.grad!) };
    });
  const gradients = { 7: gradientsFor(7), 11: gradientsFor(11) };
  const update = jit((...grads: Tensor[]) => {
    state.optimizer.params.forEach((p, i) => (p.grad = grads[i]!));
    withTraining(true, () => Tensor.realizeAll([...bertUpdate(state, options), ...state.scheduler.scheduleStep()]));
    return { lr: state.optimizer.optimizers[0]!.lr };
  });
  return (batch, maskedLmWeightSum, sampleCount) => {
    const packed = batch.length === 11;
    if (packed && sampleCount === undefined)
      throw new TsgradError("a packed batch's data-parallel step needs its sample count");
    const [weightSum, samples] = comm.allReduce(Float64Array.of(maskedLmWeightSum, sampleCount ?? 0), "sum");
    const devices = batch[0].device.split(",");
    // each rank's share of the global sums: the ranks' mean of their losses is the global batch's
    const share = (value: number) => {
      const t = new Tensor(Math.max(value / comm.size, 1e-12), { dtype: dtypes.float32, device: devices[0] });
      return devices.length > 1 ? t.to(devices) : t;
    };
    const epsilon = options.lossRule === "seed" ? 0 : REFERENCE_MASKED_LM_EPSILON;
    const denominators = [share(weightSum! + epsilon), ...(packed ? [share(samples!)] : [])];
    const { loss, grads } = gradients[packed ? 11 : 7](...batch, ...denominators);
    const start = performance.now();
    dist.allReduceTensors(comm, [...grads, loss], "mean", { nccl });
    const reduceMs = performance.now() - start;
    return { loss, ...update(...grads), reduceMs, samples: packed ? samples! : batch[0].shape[0]! * comm.size };
  };
}

/** Unscales every gradient and divides them all by max(1, globalNorm / maxNorm); the norm is taken in float32. */
function clipGradients(params: readonly Tensor[], lossScale: number, maxNorm: number): void {
  const unscaled = params.map((p) => (lossScale === 1 ? p.grad! : p.grad!.div(lossScale)));
  const squares = unscaled.map((g) => g.cast(dtypes.float32).square().sum());
  const globalNorm = squares.reduce((a, b) => a.add(b)).sqrt();
  const divisor = globalNorm.gt(maxNorm).where(globalNorm.div(maxNorm), 1);
  params.forEach((p, i) => (p.grad = unscaled[i]!.div(divisor).cast(p.grad!.dtype)));
}

/** The batch in `parts` equal slices along the batch axis. */
function splitBatch(batch: BertBatch, parts: number): BertBatch[] {
  if (parts === 1) return [batch];
  const size = batch.inputIds.shape[0]!;
  if (!Number.isInteger(parts) || parts < 1 || size % parts !== 0)
    throw new TsgradError(
      `GRADIENT_ACC_STEPS=${parts} does not divide the batch of ${size} (input_ids ${fmtShape(batch.inputIds.shape)})`,
    );
  const entries = Object.entries(batch) as [keyof BertBatch, Tensor][];
  const pieces = entries.map(([key, t]) => [key, t.chunk(parts, 0)] as const);
  return Array.from(
    { length: parts },
    (_, i) => Object.fromEntries(pieces.map(([key, chunks]) => [key, chunks[i]!])) as unknown as BertBatch,
  );
}

/** The batch's tensors in the reference's field order, the form a jitted step takes them in. */
export const bertBatchTensors = (b: BertBatch): BertBatchTensors => [
  b.inputIds,
  b.segmentIds,
  b.inputMask,
  b.maskedLmPositions,
  b.maskedLmIds,
  b.maskedLmWeights,
  b.nextSentenceLabels,
];
export type BertBatchTensors = [Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor];
/** The seven batch tensors as a BertBatch. */
export const bertBatchOf = ([
  inputIds,
  segmentIds,
  inputMask,
  maskedLmPositions,
  maskedLmIds,
  maskedLmWeights,
  nextSentenceLabels,
]: BertBatchTensors): BertBatch => ({
  inputIds,
  segmentIds,
  inputMask,
  maskedLmPositions,
  maskedLmIds,
  maskedLmWeights,
  nextSentenceLabels,
});

/**
 * A packed batch's tensors (mlperf/bert/data/packing.ts's `packedToTensors`): the seven of an unpacked batch
 * (labels [B, N], one per sample slot), then position ids, sample ids, NSP positions and NSP weights.
 */
export type PackedBertBatchTensors = [...BertBatchTensors, Tensor, Tensor, Tensor, Tensor];
/** The eleven packed batch tensors as a BertBatch. */
export const packedBertBatchOf = (tensors: PackedBertBatchTensors): BertBatch => {
  const [positionIds, sampleIds, nextSentencePositions, nextSentenceWeights] = tensors.slice(7) as Tensor[];
  return {
    ...bertBatchOf(tensors.slice(0, 7) as BertBatchTensors),
    positionIds,
    sampleIds,
    nextSentencePositions,
    nextSentenceWeights,
  };
};

/**
 * The train step as a function of the batch tensors alone, ready for `jit`:
 *   const step = jit(makeBertTrainStep(state, options)); const loss = step(...bertBatchTensors(batch));
 */
export function makeBertTrainStep(
  state: BertTrainState,
  options: TrainStepOptions,
): (...batch: BertBatchTensors) => Tensor {
  return (...tensors) => bertTrainStep(state, bertBatchOf(tensors), options);
}

/** The train step on packed batches, ready for `jit`: `jit(makePackedBertTrainStep(state, options))(...packedToTensors(packed))`. */
export function makePackedBertTrainStep(
  state: BertTrainState,
  options: TrainStepOptions,
): (...batch: PackedBertBatchTensors) => Tensor {
  return (...tensors) => bertTrainStep(state, packedBertBatchOf(tensors), options);
}

/** The eval step as a function of the batch tensors alone, ready for `jit`. */
export function makeBertEvalStep(model: BertForPretraining): (...batch: BertBatchTensors) => BertMetrics {
  return (...tensors) => bertEvalStep(model, bertBatchOf(tensors));
}

/** The four metrics on `batch`, dropout off; every tensor realized. */
export function bertEvalStep(model: BertForPretraining, batch: BertBatch): BertMetrics {
  return withTraining(false, () => {
    const metrics = bertPretrainingMetrics(model.forward(batch), batch);
    Tensor.realizeAll(Object.values(metrics));
    return metrics;
  });
}
