import assert from "node:assert/strict";
import { test } from "node:test";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import { OptimizerGroup, SGD } from "../../src/nn/optim.ts";
import { LRSchedulerGroup } from "../../src/nn/schedules.ts";
import { getParameters, getStateDict, loadStateDict } from "../../src/nn/state.ts";
import {
  BERT_PRESETS,
  BertForPretraining,
  bertPretrainingLosses,
  type BertBatch,
  type BertConfig,
} from "../../models/bert.ts";
import { bertTrainStep, trainStepOptionsFromEnv } from "../../models/bert_train_step.ts";
import { assertClose } from "../close.ts";

Device.DEFAULT = process.env.DEVICE ?? "JS";

const CONFIG: BertConfig = {
  ...BERT_PRESETS.tiny,
  numHiddenLayers: 1,
  vocabSize: 64,
  hiddenSize: 32,
  numAttentionHeads: 2,
  intermediateSize: 64,
  maxPositionEmbeddings: 16,
};

/** Four samples, each with four weighted predictions, so the full batch's loss is the mean of its halves'. */
function batch(): BertBatch {
  const int = (data: number[][] | number[]) => new Tensor(data, { dtype: "int32" });
  const rows = [0, 1, 2, 3];
  return {
    inputIds: int(rows.map((r) => Array.from({ length: 16 }, (_, i) => (i * 5 + r * 11 + 3) % 64))),
    segmentIds: int(rows.map(() => Array.from({ length: 16 }, (_, i) => (i < 8 ? 0 : 1)))),
    inputMask: int(rows.map((r) => Array.from({ length: 16 }, (_, i) => (i < 12 + r ? 1 : 0)))),
    maskedLmPositions: int(rows.map((r) => [1 + r, 5, 7, 10])),
    maskedLmIds: int(rows.map((r) => [r * 9, 40 - r, 3 + r, 60])),
    maskedLmWeights: new Tensor(
      rows.map(() => [1, 1, 1, 1]),
      { dtype: "float32" },
    ),
    nextSentenceLabels: int([1, 0, 0, 1]),
  };
}

/**
 * One model with plain SGD (lr 1) in place of LAMB, so that a step moves each parameter by
 * exactly its processed gradient; and the full batch's raw gradients, from a plain backward pass.
 */
function setup() {
  Tensor.manualSeed(9);
  const model = new BertForPretraining(CONFIG, { disableDropout: true });
  const params = getParameters(model);
  const initial = Object.fromEntries(
    Object.entries(getStateDict(model)).map(([name, t]) => [name, t.contiguous().realize()]),
  );
  const initialValues = Object.values(initial).map((t) => t.toArray() as Float32Array);
  const data = batch();
  bertPretrainingLosses(model.forward(data), data).loss.backward();
  const grads = params.map((p) => Array.from(p.grad!.toArray() as Float32Array));
  const norm = Math.sqrt(grads.flat().reduce((s, g) => s + g * g, 0));
  const state = { model, optimizer: new OptimizerGroup(new SGD(params, { lr: 1 })), scheduler: new LRSchedulerGroup() };
  const stepDeltas = (options: { lossScale: number; gradientAccSteps: number; maxGradNorm: number }): number[][] => {
    loadStateDict(model, initial);
    bertTrainStep(state, data, options);
    return params.map((p, i) => Array.from(p.toArray() as Float32Array, (v, j) => initialValues[i]![j]! - v));
  };
  return { grads, norm, stepDeltas };
}

const { grads, norm, stepDeltas } = setup();

test("the train step unscales loss-scaled gradients and clips them to the global norm", () => {
  const maxGradNorm = norm / 4;
  const deltas = stepDeltas({ lossScale: 2 ** 10, gradientAccSteps: 1, maxGradNorm });
  assertClose(
    deltas,
    grads.map((g) => g.map((x) => (x * maxGradNorm) / norm)),
    { rtol: 1e-3, atol: 1e-7, what: "update (parameter, element)" },
  );
});

test("gradients within the norm limit pass through the train step unchanged", () => {
  const deltas = stepDeltas({ lossScale: 1, gradientAccSteps: 1, maxGradNorm: norm * 2 });
  assertClose(deltas, grads, { rtol: 1e-3, atol: 1e-7, what: "update (parameter, element)" });
});

test("gradient accumulation over two micro-batches gives the full batch's update", () => {
  const deltas = stepDeltas({ lossScale: 1, gradientAccSteps: 2, maxGradNorm: norm * 2 });
  assertClose(deltas, grads, { rtol: 1e-3, atol: 1e-6, what: "update (parameter, element)" });
});

test("a batch that GRADIENT_ACC_STEPS does not divide is refused", () => {
  assert.throws(
    () => stepDeltas({ lossScale: 1, gradientAccSteps: 3, maxGradNorm: 1 }),
    /GRADIENT_ACC_STEPS=3 does not divide the batch of 4/,
  );
});

test("LOSS_SCALER defaults to 2^10 for float16 and 1 otherwise; the env overrides both", () => {
  assert.equal(trainStepOptionsFromEnv(dtypes.float16).lossScale, 1024);
  assert.equal(trainStepOptionsFromEnv(dtypes.float32).lossScale, 1);
  process.env.LOSS_SCALER = "2048";
  process.env.GRADIENT_ACC_STEPS = "4";
  try {
    assert.deepEqual(trainStepOptionsFromEnv(dtypes.float16), { lossScale: 2048, gradientAccSteps: 4, maxGradNorm: 1 });
  } finally {
    delete process.env.LOSS_SCALER;
    delete process.env.GRADIENT_ACC_STEPS;
  }
});
