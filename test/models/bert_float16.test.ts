import assert from "node:assert/strict";
import { test } from "node:test";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import { jit } from "../../src/tensor/index.ts";
import { getParameters } from "../../src/nn/state.ts";
import { BERT_PRESETS, BertForPretraining, type BertBatch, type BertConfig } from "../../models/bert.ts";
import {
  bertBatchTensors,
  createBertOptimizer,
  makeBertTrainStep,
  trainStepOptionsFromEnv,
} from "../../models/bert_train_step.ts";

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

function batch(): BertBatch {
  const int = (data: number[][] | number[]) => new Tensor(data, { dtype: "int32" });
  return {
    inputIds: int([0, 1].map((r) => Array.from({ length: 16 }, (_, i) => (i * 5 + r * 11 + 3) % 64))),
    segmentIds: int([0, 1].map(() => Array.from({ length: 16 }, (_, i) => (i < 8 ? 0 : 1)))),
    inputMask: int([0, 1].map((r) => Array.from({ length: 16 }, (_, i) => (i < 12 + r ? 1 : 0)))),
    maskedLmPositions: int([
      [1, 5, 7, 10],
      [2, 5, 7, 11],
    ]),
    maskedLmIds: int([
      [0, 40, 3, 60],
      [9, 39, 4, 60],
    ]),
    maskedLmWeights: new Tensor(
      [
        [1, 1, 1, 1],
        [1, 1, 1, 0],
      ],
      { dtype: "float32" },
    ),
    nextSentenceLabels: int([1, 0]),
  };
}

test("a float16 model trains with the 2^10 loss scale: finite, falling losses and float16 weights", () => {
  const saved = Tensor.defaultFloat;
  Tensor.defaultFloat = dtypes.float16;
  try {
    Tensor.manualSeed(5);
    const model = new BertForPretraining(CONFIG, { disableDropout: true });
    const { optimizer, scheduler } = createBertOptimizer(model, { lr: 0.2, totalSteps: 50, warmupSteps: 0 });
    const step = jit(makeBertTrainStep({ model, optimizer, scheduler }, trainStepOptionsFromEnv(dtypes.float16)));
    const data = batch();
    const losses = Array.from({ length: 5 }, () => step(...bertBatchTensors(data)).item());
    assert.ok(losses.every(Number.isFinite), `losses ${losses.join(", ")}`);
    assert.ok(
      losses.slice(1).every((loss, i) => loss < losses[i]!),
      `losses ${losses.join(", ")}`,
    );
    assert.ok(getParameters(model).every((p) => p.dtype === dtypes.float16));
  } finally {
    Tensor.defaultFloat = saved;
  }
});
