import assert from "node:assert/strict";
import { test } from "node:test";
import { Device, Tensor, jit, nn } from "../../src/index.ts";
import {
  BERT_PRESETS,
  BertForPretraining,
  bertPretrainingLosses,
  bertPretrainingMetrics,
  type BertConfig,
} from "../../models/bert.ts";
import {
  batchLossDenominators,
  bertBatchOf,
  bertGradients,
  bertTrainStep,
  createBertOptimizer,
  makePackedBertTrainStep,
  packedBertBatchOf,
  type BertTrainState,
  type LossDenominators,
  type TrainStepOptions,
} from "../../models/bert_train_step.ts";
import { packSamples, packedToTensors } from "../../mlperf/bert/data/packing.ts";
import { samplesToTensors } from "../../mlperf/bert/data/loader.ts";
import { PyRandom } from "../../mlperf/bert/data/pyrandom.ts";
import { emptySamples } from "../../mlperf/bert/data/shard.ts";
import type { SampleColumns } from "../../mlperf/bert/data/samples.ts";
import { assertClose } from "../close.ts";

Device.DEFAULT = process.env.DEVICE ?? "JS";

const SEQ = 16;
const PREDICTIONS = 4;
// weights with std 0.2 instead of 0.02, so attention is far from uniform and a leak across samples would show
const CONFIG: BertConfig = {
  ...BERT_PRESETS.tiny,
  vocabSize: 100,
  hiddenSize: 32,
  numHiddenLayers: 2,
  numAttentionHeads: 2,
  intermediateSize: 64,
  maxPositionEmbeddings: SEQ,
  initializerRange: 0.2,
};

/** `[CLS] A [SEP] B [SEP]` samples of the given lengths, random ids below 100, about 15% masked. */
function samplesOfLengths(lengths: number[], seed: number): SampleColumns {
  const random = new PyRandom(seed);
  const columns = emptySamples(lengths.length, { maxSeqLength: SEQ, maxPredictionsPerSeq: PREDICTIONS });
  lengths.forEach((length, i) => {
    const row = i * SEQ;
    const firstSep = length >= 5 ? 1 + random.randint(1, length - 4) : length - 1;
    for (let t = 0; t < length; t++) columns.input_ids[row + t] = random.randint(5, 99);
    columns.input_ids[row] = 1;
    columns.input_ids[row + firstSep] = columns.input_ids[row + length - 1] = 2;
    columns.input_mask.fill(1, row, row + length);
    columns.segment_ids.fill(1, row + firstSep + 1, row + length);
    const masked = Math.min(PREDICTIONS, Math.max(1, Math.round(length * 0.15)));
    for (let p = 0; p < masked; p++) {
      const position = 1 + p * 2; // inside A or B, ascending
      const at = i * PREDICTIONS + p;
      columns.masked_lm_positions[at] = position;
      columns.masked_lm_ids[at] = columns.input_ids[row + position]!;
      columns.masked_lm_weights[at] = 1;
      columns.input_ids[row + position] = 3;
    }
    columns.next_sentence_labels[i] = random.randint(0, 1);
  });
  return columns;
}

interface Measured {
  losses: number[];
  gradients: Map<string, Float32Array>;
}

function gradientsOf(
  state: BertTrainState,
  batch: ReturnType<typeof bertBatchOf>,
  gradientAccSteps = 1,
  denominators: LossDenominators = {},
): Measured {
  const options: TrainStepOptions = { lossScale: 1, gradientAccSteps, maxGradNorm: 1, lossRule: "reference" };
  const loss = bertGradients(state, batch, options, denominators);
  const gradients = new Map<string, Float32Array>();
  for (const [name, parameter] of Object.entries(nn.getStateDict(state.model)))
    gradients.set(name, Float32Array.from(parameter.grad!.toArray() as Float32Array));
  return { losses: [loss.item()], gradients };
}

/**
 * The largest absolute difference over the loss and every gradient element, and the largest of a gradient's
 * largest difference relative to its largest |value|, over gradients not zero in exact arithmetic (the key
 * biases' are: softmax ignores a shift shared by a query's scores, so theirs are rounding noise, ~1e-9).
 */
function maxDifferences(packed: Measured, unpacked: Measured): { abs: number; rel: number; worst: string } {
  let [abs, rel, worst] = [Math.abs(packed.losses[0]! - unpacked.losses[0]!), 0, ""];
  for (const [name, expected] of unpacked.gradients) {
    const actual = packed.gradients.get(name)!;
    let [scale, largest] = [0, 0];
    for (let i = 0; i < expected.length; i++) {
      scale = Math.max(scale, Math.abs(expected[i]!));
      largest = Math.max(largest, Math.abs(actual[i]! - expected[i]!));
    }
    abs = Math.max(abs, largest);
    if (scale > 1e-6 && largest / scale > rel) [rel, worst] = [largest / scale, name];
  }
  return { abs, rel, worst };
}

test("a packed batch has the unpacked batch's loss and every parameter's gradient (float32)", (t) => {
  Tensor.manualSeed(5);
  const model = new BertForPretraining(CONFIG, { disableDropout: true });
  const state = { model, ...createBertOptimizer(model, { lr: 1e-3, totalSteps: 10, warmupSteps: 0 }) };
  const samples = samplesOfLengths([12, 9, 7, 5, 4, 3, 16], 11);
  const packed = packSamples(samples, { maxPerRow: 3, seed: 2 });
  assert.equal(packed.count, 4, "7 samples in 4 rows: 16 | 12+4 | 9+7 | 5+3");

  const unpacked = gradientsOf(state, bertBatchOf(samplesToTensors(samples)));
  const inRows = gradientsOf(state, packedBertBatchOf(packedToTensors(packed)));
  const { abs, rel, worst } = maxDifferences(inRows, unpacked);
  t.diagnostic(
    `loss ${unpacked.losses[0]} unpacked, ${inRows.losses[0]} packed; max |diff| ${abs}, max relative ${rel} (${worst})`,
  );
  assertClose(inRows.losses, unpacked.losses, { atol: 1e-5, rtol: 1e-5, what: "loss" });
  for (const [name, expected] of unpacked.gradients)
    assertClose(inRows.gradients.get(name)!, expected, { atol: 1e-5, rtol: 1e-4, what: `gradient of ${name}` });
});

test("packed micro-batches (GRADIENT_ACC_STEPS=2) divide by the whole step's weights and samples", (t) => {
  Tensor.manualSeed(5);
  const model = new BertForPretraining(CONFIG, { disableDropout: true });
  const state = { model, ...createBertOptimizer(model, { lr: 1e-3, totalSteps: 10, warmupSteps: 0 }) };
  const samples = samplesOfLengths([12, 9, 7, 5, 4, 3, 16], 11);
  const packed = packSamples(samples, { maxPerRow: 3, seed: 2 });
  const batch = packedBertBatchOf(packedToTensors(packed));
  const unpacked = gradientsOf(state, bertBatchOf(samplesToTensors(samples)));
  const denominators = batchLossDenominators(batch, { lossScale: 1, gradientAccSteps: 2, maxGradNorm: 1 });
  const halves = gradientsOf(state, batch, 2, denominators);
  const { abs, rel, worst } = maxDifferences(halves, unpacked);
  t.diagnostic(`two packed micro-batches: max |diff| ${abs}, max relative ${rel} (${worst})`);
  assertClose(halves.losses, unpacked.losses, { atol: 1e-5, rtol: 1e-5, what: "loss" });
  for (const [name, expected] of unpacked.gradients)
    assertClose(halves.gradients.get(name)!, expected, { atol: 1e-5, rtol: 1e-4, what: `gradient of ${name}` });
  // each half's own means, averaged: the halves hold different numbers of samples, so not the batch's loss
  const meanOfMeans = gradientsOf(state, batch, 2);
  t.diagnostic(`mean of the halves' means: loss ${meanOfMeans.losses[0]} against ${unpacked.losses[0]}`);
  assert.ok(Math.abs(meanOfMeans.losses[0]! - unpacked.losses[0]!) > 1e-3);
});

test("the packed masked-LM and NSP losses equal the unpacked ones part by part", () => {
  Tensor.manualSeed(6);
  const model = new BertForPretraining(CONFIG, { disableDropout: true });
  const samples = samplesOfLengths([10, 6, 3, 14], 12);
  const packed = packSamples(samples, { maxPerRow: 2 });
  const losses = (batch: ReturnType<typeof bertBatchOf>) => {
    const outputs = model.forward(batch);
    const { maskedLmLoss, nextSentenceLoss } = bertPretrainingLosses(outputs, batch);
    return [maskedLmLoss.item(), nextSentenceLoss.item()];
  };
  assertClose(losses(packedBertBatchOf(packedToTensors(packed))), losses(bertBatchOf(samplesToTensors(samples))), {
    atol: 1e-6,
    rtol: 1e-5,
    what: "[masked-LM, NSP] loss",
  });
});

test("eval metrics of a packed batch equal the unpacked batch's", () => {
  Tensor.manualSeed(7);
  const model = new BertForPretraining(CONFIG, { disableDropout: true });
  const samples = samplesOfLengths([11, 8, 5, 4, 13, 2], 13);
  const metrics = (batch: ReturnType<typeof bertBatchOf>) =>
    Object.values(bertPretrainingMetrics(model.forward(batch), batch)).map((t) => t.item());
  assertClose(
    metrics(packedBertBatchOf(packedToTensors(packSamples(samples)))),
    metrics(bertBatchOf(samplesToTensors(samples))),
    { atol: 1e-6, rtol: 1e-5, what: "[masked-LM accuracy, NSP accuracy, masked-LM loss, NSP loss]" },
  );
});

test("a batch with some packed fields but not all is an error naming those it has", () => {
  const model = new BertForPretraining(CONFIG, { disableDropout: true });
  const [, , , , , , , positionIds] = packedToTensors(packSamples(samplesOfLengths([5, 4], 14)));
  const batch = { ...bertBatchOf(samplesToTensors(samplesOfLengths([5, 4], 14))), positionIds };
  assert.throws(
    () => model.forward(batch),
    /needs positionIds, sampleIds and nextSentencePositions together, got positionIds$/,
  );
});

test("a jitted packed train step replays new batches as the plain step runs them", () => {
  const config = { ...CONFIG, numHiddenLayers: 1 };
  const options: TrainStepOptions = { lossScale: 1, gradientAccSteps: 1, maxGradNorm: 1 };
  const newState = (): BertTrainState => {
    Tensor.manualSeed(8);
    const model = new BertForPretraining(config, { disableDropout: true });
    return { model, ...createBertOptimizer(model, { lr: 0.05, totalSteps: 10, warmupSteps: 0 }) };
  };
  // two batches of the same shape, 3 rows each, holding different samples
  const batches = [
    [9, 7, 6, 5, 16],
    [12, 4, 3, 8, 8, 2],
  ].map((lengths, i) => packSamples(samplesOfLengths(lengths, 20 + i), { seed: i }));
  assert.deepEqual(
    batches.map((b) => b.count),
    [3, 3],
  );
  const [jitted, plain] = [newState(), newState()];
  const step = jit(makePackedBertTrainStep(jitted, options));
  const order = [0, 1, 0, 1];
  const jittedLosses = order.map((i) => step(...packedToTensors(batches[i]!)).item());
  const plainLosses = order.map((i) =>
    bertTrainStep(plain, packedBertBatchOf(packedToTensors(batches[i]!)), options).item(),
  );
  assertClose(jittedLosses, plainLosses, { atol: 1e-6, rtol: 1e-5, what: "losses of 4 steps" });
});
