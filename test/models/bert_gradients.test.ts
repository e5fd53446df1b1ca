import assert from "node:assert/strict";
import { test } from "node:test";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import { getStateDict } from "../../src/nn/state.ts";
import {
  BERT_PRESETS,
  BertForPretraining,
  bertPretrainingLosses,
  type BertBatch,
  type BertConfig,
} from "../../models/bert.ts";
import { assertClose } from "../close.ts";

Device.DEFAULT = process.env.DEVICE ?? "JS";

// weights with std ~0.5 instead of 0.02, so attention is far from uniform and every path carries gradient
const CONFIG: BertConfig = {
  ...BERT_PRESETS.tiny,
  numHiddenLayers: 1,
  vocabSize: 16,
  hiddenSize: 8,
  numAttentionHeads: 2,
  intermediateSize: 16,
  maxPositionEmbeddings: 8,
  initializerRange: 0.5,
};

function batch(): BertBatch {
  const int = (data: number[][] | number[]) => new Tensor(data, { dtype: "int32" });
  return {
    inputIds: int([
      [2, 7, 11, 3, 9, 0],
      [5, 1, 14, 6, 8, 12],
    ]),
    segmentIds: int([
      [0, 0, 0, 1, 1, 0],
      [0, 0, 1, 1, 1, 1],
    ]),
    inputMask: int([
      [1, 1, 1, 1, 1, 0],
      [1, 1, 1, 1, 1, 1],
    ]),
    maskedLmPositions: int([
      [1, 3, 0],
      [2, 4, 5],
    ]),
    maskedLmIds: int([
      [4, 13, 0],
      [15, 2, 7],
    ]),
    maskedLmWeights: new Tensor(
      [
        [1, 1, 0],
        [1, 1, 1],
      ],
      { dtype: "float64" },
    ),
    nextSentenceLabels: int([0, 1]),
  };
}

/** Where to probe: the tied word embeddings, the gathered head, attention, LayerNorm, pooler and NSP. */
const PROBES: [string, number][] = [
  ["bert.embeddings.word_embeddings.weight", 13 * 8 + 2], // a masked-LM label's row: reached by the tied decoder
  ["bert.embeddings.word_embeddings.weight", 7 * 8 + 5], // an input token's row
  ["bert.embeddings.position_embeddings.weight", 3 * 8 + 1],
  ["bert.encoder.layer.0.attention.self.query.weight", 17],
  ["bert.encoder.layer.0.attention.self.key.weight", 6],
  ["bert.encoder.layer.0.attention.self.value.bias", 6],
  ["bert.encoder.layer.0.attention.output.LayerNorm.weight", 3],
  ["bert.encoder.layer.0.intermediate.dense.bias", 9],
  ["bert.pooler.dense.weight", 21],
  ["cls.predictions.transform.LayerNorm.bias", 4],
  ["cls.predictions.bias", 15],
  ["cls.seq_relationship.weight", 10],
];

test("backward through BERT matches central finite differences of the loss (float64)", () => {
  const saved = Tensor.defaultFloat;
  Tensor.defaultFloat = dtypes.float64;
  try {
    Tensor.manualSeed(12);
    const model = new BertForPretraining(CONFIG, { disableDropout: true });
    const state = getStateDict(model);
    const data = batch();
    const loss = (): number => bertPretrainingLosses(model.forward(data), data).loss.item();
    bertPretrainingLosses(model.forward(data), data).loss.backward();
    const h = 1e-5;
    for (const [name, index] of PROBES) {
      const param = state[name]!;
      assert.equal(param.dtype, dtypes.float64);
      const analytic = (param.grad!.toArray() as Float64Array)[index]!;
      const base = Float64Array.from(param.toArray() as Float64Array);
      const at = (delta: number): number => {
        const shifted = Float64Array.from(base);
        shifted[index]! += delta;
        param.assign(new Tensor(shifted, { dtype: "float64" }).reshape(param.shape)).realize();
        return loss();
      };
      const numeric = (at(h) - at(-h)) / (2 * h);
      at(0);
      assertClose(analytic, numeric, {
        atol: 1e-8,
        rtol: 1e-6,
        what: `${name}[${index}], backward against the finite difference`,
      });
    }
  } finally {
    Tensor.defaultFloat = saved;
  }
});
