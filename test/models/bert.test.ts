import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import { jit } from "../../src/tensor/index.ts";
import { getStateDict, loadStateDict, storageOf, tensorFromStorage } from "../../src/nn/state.ts";
import {
  BERT_PRESETS,
  BertForPretraining,
  bertConfigFromJson,
  bertParameterCount,
  bertParameterShapes,
  bertPretrainingLosses,
  bertPretrainingMetrics,
  type BertBatch,
  type BertConfig,
} from "../../models/bert.ts";
import { bertParameterNames } from "../../models/bert_tf_names.ts";
import {
  bertBatchTensors,
  bertEvalStep,
  createBertOptimizer,
  isNoDecayParameter,
  makeBertEvalStep,
  makeBertTrainStep,
} from "../../models/bert_train_step.ts";
import { writeTfBundle, type BundleTensor } from "../io/tf_bundle_writer.ts";
import { assertClose } from "../close.ts";

Device.DEFAULT = process.env.DEVICE ?? "JS";

const scratch = mkdtempSync(join(tmpdir(), "tsgrad-bert-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** BERT-tiny's structure with a vocabulary and width small enough for the JS backend. */
const SMALL: BertConfig = {
  ...BERT_PRESETS.tiny,
  vocabSize: 64,
  hiddenSize: 32,
  numAttentionHeads: 2,
  intermediateSize: 64,
  maxPositionEmbeddings: 16,
};
/** One layer, where the number of layers does not matter: each model costs seconds of init on JS. */
const ONE_LAYER: BertConfig = { ...SMALL, numHiddenLayers: 1 };
const [BATCH, SEQ, PREDICTIONS] = [2, 16, 4];

/** A fixed batch: real tokens then padding, masked positions with weights 1 then 0. */
function fixedBatch(): BertBatch {
  const ids = (row: number) =>
    Array.from({ length: SEQ }, (_, i) => (i < 12 + row * 2 ? (i * 7 + row * 13 + 5) % SMALL.vocabSize : 0));
  const int = (data: number[][] | number[]) => new Tensor(data, { dtype: "int32" });
  return {
    inputIds: int([ids(0), ids(1)]),
    segmentIds: int([0, 1].map((row) => Array.from({ length: SEQ }, (_, i) => (i >= 6 && i < 12 + row * 2 ? 1 : 0)))),
    inputMask: int([0, 1].map((row) => Array.from({ length: SEQ }, (_, i) => (i < 12 + row * 2 ? 1 : 0)))),
    maskedLmPositions: int([
      [1, 4, 9, 0],
      [2, 3, 8, 13],
    ]),
    maskedLmIds: int([
      [17, 40, 3, 0],
      [9, 61, 22, 30],
    ]),
    maskedLmWeights: new Tensor(
      [
        [1, 1, 1, 0],
        [1, 1, 1, 1],
      ],
      { dtype: "float32" },
    ),
    nextSentenceLabels: int([1, 0]),
  };
}

const values = (t: Tensor): number[] => Array.from(t.toArray() as Float32Array);

test("parameters carry exactly the Hugging Face names of bert_tf_names, with the shapes the config gives", () => {
  Tensor.manualSeed(0);
  const state = getStateDict(new BertForPretraining(SMALL));
  assert.deepEqual(Object.keys(state), bertParameterNames(SMALL.numHiddenLayers));
  const shapes = bertParameterShapes(SMALL);
  for (const [name, t] of Object.entries(state)) assert.deepEqual(t.shape, shapes.get(name), name);
  assert.deepEqual(state["bert.encoder.layer.1.intermediate.dense.weight"]!.shape, [64, 32]);
  assert.deepEqual(state["bert.encoder.layer.0.output.dense.weight"]!.shape, [32, 64]);
});

test("preset parameter counts come from shapes alone and match Hugging Face's BertForPreTraining", () => {
  // base 110,106,428 and large 336,226,108 are the counts PyTorch reports for HF's BertForPreTraining (decoder tied)
  assert.equal(bertParameterCount(BERT_PRESETS.base), 110_106_428);
  assert.equal(bertParameterCount(BERT_PRESETS.large), 336_226_108);
  assert.equal(bertParameterShapes(BERT_PRESETS.large).size, 5 + 16 * 24 + 2 + 4 + 1 + 2);
  const tiny =
    30522 * 128 +
    512 * 128 +
    2 * 128 +
    2 * 128 +
    2 * (4 * (128 * 128 + 128) + 2 * 256 + 128 * 512 + 512 + 512 * 128 + 128) +
    (128 * 128 + 128) +
    (128 * 128 + 128 + 256) +
    30522 +
    2 * 128 +
    2;
  assert.equal(bertParameterCount(BERT_PRESETS.tiny), tiny);
  assert.ok(
    bertParameterCount(BERT_PRESETS.mini) > tiny &&
      bertParameterCount(BERT_PRESETS.mini) < bertParameterCount(BERT_PRESETS.base),
  );
});

test("the reference's bert_config.json gives the large preset", () => {
  const json = {
    attention_probs_dropout_prob: 0.1,
    hidden_act: "gelu",
    hidden_dropout_prob: 0.1,
    hidden_size: 1024,
    initializer_range: 0.02,
    intermediate_size: 4096,
    max_position_embeddings: 512,
    num_attention_heads: 16,
    num_hidden_layers: 24,
    type_vocab_size: 2,
    vocab_size: 30522,
  };
  assert.deepEqual(bertConfigFromJson(json), BERT_PRESETS.large);
  assert.throws(
    () => bertConfigFromJson({ ...json, hidden_size: "big" }),
    /bert_config\.json: field "hidden_size" is "big"/,
  );
  assert.throws(() => bertConfigFromJson({ ...json, hidden_act: "relu" }), /hidden_act "relu" is not supported/);
});

test("MLPerf initialisation: truncated normal weights (std 0.02), zero biases, LayerNorm ones and zeros", () => {
  Tensor.manualSeed(1);
  const state = getStateDict(new BertForPretraining(SMALL));
  for (const [name, t] of Object.entries(state)) {
    const v = values(t);
    if (name.includes("LayerNorm"))
      assert.ok(
        v.every((x) => x === (name.endsWith("weight") ? 1 : 0)),
        name,
      );
    else if (name.endsWith("bias"))
      assert.ok(
        v.every((x) => x === 0),
        name,
      );
    else
      assert.ok(
        v.every((x) => Math.abs(x) <= 0.04 + 1e-7),
        name,
      );
  }
  const word = values(state["bert.embeddings.word_embeddings.weight"]!);
  const std = Math.sqrt(word.reduce((s, x) => s + x * x, 0) / word.length);
  assert.ok(Math.abs(std - 0.02 * 0.8796) < 0.0015, `std ${std}`); // a ±2σ-truncated normal has std 0.88σ
});

test("initialisation is reproducible under a seed and differs between seeds", () => {
  const init = (seed: number) => {
    Tensor.manualSeed(seed);
    return values(getStateDict(new BertForPretraining(ONE_LAYER))["bert.encoder.layer.0.attention.self.key.weight"]!);
  };
  const first = init(7);
  assert.deepEqual(init(7), first);
  assert.notDeepEqual(init(8), first);
});

test("DISABLE_DROPOUT=1 turns every dropout off", () => {
  process.env.DISABLE_DROPOUT = "1";
  try {
    const model = new BertForPretraining(ONE_LAYER);
    assert.equal(model.bert.embeddings.dropout.p, 0);
    assert.equal(model.bert.encoder.layer[0]!.attention.self.dropout, 0);
    assert.equal(model.bert.encoder.layer[0]!.output.dropout.p, 0);
  } finally {
    delete process.env.DISABLE_DROPOUT;
  }
  assert.equal(new BertForPretraining(ONE_LAYER).bert.embeddings.dropout.p, 0.1);
});

test("forward gives masked-LM logits at the masked positions and NSP logits", () => {
  Tensor.manualSeed(2);
  const { maskedLmLogits, nextSentenceLogits } = new BertForPretraining(SMALL, { disableDropout: true }).forward(
    fixedBatch(),
  );
  assert.deepEqual(maskedLmLogits.shape, [BATCH, PREDICTIONS, SMALL.vocabSize]);
  assert.deepEqual(nextSentenceLogits.shape, [BATCH, 2]);
  assert.ok(values(maskedLmLogits).every(Number.isFinite));
});

test("forward logits and both losses match a numpy reference to 1e-4 (test/fixtures/bert/generate.py)", () => {
  const golden = JSON.parse(readFileSync(new URL("../fixtures/bert/tiny_forward.json", import.meta.url), "utf8"));
  const model = new BertForPretraining(SMALL, { disableDropout: true });
  // the generator's weights: parameter k holds 0.05 * sin(1.3k + 0.7j) at flat index j (LayerNorm weights 1 + that)
  const state = Object.fromEntries(
    [...bertParameterShapes(SMALL)].map(([name, shape], k) => {
      const data = Float32Array.from(
        { length: shape.reduce((a, b) => a * b, 1) },
        (_, j) => 0.05 * Math.sin(1.3 * k + 0.7 * j) + (name.endsWith("LayerNorm.weight") ? 1 : 0),
      );
      return [name, tensorFromStorage(data, shape, dtypes.float32)];
    }),
  );
  loadStateDict(model, state);
  const b = golden.batch;
  const int = (data: number[][] | number[]) => new Tensor(data, { dtype: "int32" });
  const batch: BertBatch = {
    inputIds: int(b.input_ids),
    segmentIds: int(b.segment_ids),
    inputMask: int(b.input_mask),
    maskedLmPositions: int(b.masked_lm_positions),
    maskedLmIds: int(b.masked_lm_ids),
    maskedLmWeights: new Tensor(b.masked_lm_weights, { dtype: "float32" }),
    nextSentenceLabels: int(b.next_sentence_labels),
  };
  const outputs = model.forward(batch);
  const losses = bertPretrainingLosses(outputs, batch);
  const tolerance = { atol: 1e-5, rtol: 1e-4 };
  assertClose(values(outputs.maskedLmLogits), golden.masked_lm_logits.flat(2), {
    ...tolerance,
    what: "masked_lm_logits against numpy",
  });
  assertClose(values(outputs.nextSentenceLogits), golden.next_sentence_logits.flat(), {
    ...tolerance,
    what: "next_sentence_logits against numpy",
  });
  assertClose(
    [losses.maskedLmLoss.item(), losses.nextSentenceLoss.item()],
    [golden.masked_lm_loss, golden.next_sentence_loss],
    { ...tolerance, what: "losses against numpy" },
  );
});

/** Hand-made outputs for the loss and metric tests: 1 sample, 3 predictions over 4 words. */
const HAND = {
  outputs: {
    maskedLmLogits: new Tensor([
      [
        [2, 0, 0, 0],
        [0, 1, 3, 0],
        [0, 0, 0, 5],
      ],
    ]),
    nextSentenceLogits: new Tensor([[0.5, -0.5]]),
  },
  labels: {
    maskedLmIds: new Tensor([[0, 1, 2]], { dtype: "int32" }),
    maskedLmWeights: new Tensor([[1, 1, 0]]),
    nextSentenceLabels: new Tensor([1], { dtype: "int32" }),
  },
};
const crossEntropy = (logits: number[], label: number): number =>
  Math.log(logits.reduce((s, x) => s + Math.exp(x), 0)) - logits[label]!;

test("the loss is the weighted mean masked-LM cross-entropy plus the NSP cross-entropy", () => {
  const { loss, maskedLmLoss, nextSentenceLoss } = bertPretrainingLosses(HAND.outputs, HAND.labels);
  const lm = (crossEntropy([2, 0, 0, 0], 0) + crossEntropy([0, 1, 3, 0], 1)) / 2; // the third prediction has weight 0
  const nsp = crossEntropy([0.5, -0.5], 1);
  assert.ok(Math.abs(maskedLmLoss.item() - lm) < 1e-5);
  assert.ok(Math.abs(nextSentenceLoss.item() - nsp) < 1e-5);
  assert.ok(Math.abs(loss.item() - (lm + nsp)) < 1e-5);
});

test("masked-LM accuracy counts only weighted predictions; NSP accuracy is over the batch", () => {
  const metrics = bertPretrainingMetrics(HAND.outputs, HAND.labels);
  assert.equal(metrics.maskedLmAccuracy.item(), 0.5); // first right, second wrong, third (right) has weight 0
  assert.equal(metrics.nextSentenceAccuracy.item(), 0);
});

test("biases and LayerNorm parameters are the ones without weight decay", () => {
  const names = bertParameterNames(2).filter(isNoDecayParameter);
  assert.ok(names.includes("cls.predictions.bias") && names.includes("bert.embeddings.LayerNorm.weight"));
  assert.ok(!names.some((name) => name.endsWith("dense.weight") || name.includes("embeddings.word")));
  assert.equal(names.length, 2 + 2 * (6 + 4) + 1 + 4 + 1); // embeddings LN; per layer 6 dense biases and 2 LNs; pooler; head dense bias, LN, output bias; NSP
});

test("the jitted train step lowers the loss on a fixed batch; the eval step, jitted or not, reports four metrics", () => {
  Tensor.manualSeed(3);
  const model = new BertForPretraining(SMALL, { disableDropout: true });
  const { optimizer, scheduler } = createBertOptimizer(model, { lr: 0.2, totalSteps: 50, warmupSteps: 1 });
  assert.equal(optimizer.optimizers.length, 2);
  const step = jit(
    makeBertTrainStep({ model, optimizer, scheduler }, { lossScale: 1, gradientAccSteps: 1, maxGradNorm: 1 }),
  );
  const batch = fixedBatch();
  const losses: number[] = [];
  for (let i = 0; i < 8; i++) losses.push(step(...bertBatchTensors(batch)).item());
  assert.equal(losses[1], losses[0]); // the first step runs with LR 0 (warmup from 0)
  assert.ok(
    losses.slice(2).every((loss, i) => loss < losses[i + 1]!),
    `losses ${losses.join(", ")}`,
  );
  assert.ok(losses[7]! < losses[0]! / 2, `loss ${losses[0]} -> ${losses[7]}: not halved in 8 steps`);
  const metrics = bertEvalStep(model, batch);
  assert.deepEqual(Object.keys(metrics), [
    "maskedLmAccuracy",
    "nextSentenceAccuracy",
    "maskedLmLoss",
    "nextSentenceLoss",
  ]);
  assert.ok(metrics.maskedLmAccuracy.item() >= 0 && metrics.maskedLmAccuracy.item() <= 1);
  assert.ok(
    Math.abs(metrics.maskedLmLoss.item() + metrics.nextSentenceLoss.item() - losses[7]!) < losses[0]! - losses[7]!,
    "eval sees the trained weights",
  );
  const evalStep = jit(makeBertEvalStep(model));
  for (let i = 0; i < 3; i++) {
    const replayed = evalStep(...bertBatchTensors(batch));
    for (const key of Object.keys(metrics) as (keyof typeof metrics)[])
      assert.equal(replayed[key].item(), metrics[key].item(), `${key}, call ${i + 1}`);
  }
  assert.ok(evalStep.jit.isCaptured);
});

/** Our parameter's TF name and TF shape (kernels [in, out]), the inverse of bert_tf_names' mapping. */
function tfVariable(name: string, shape: number[]): [string, number[]] {
  const special: Record<string, string> = {
    "bert.embeddings.word_embeddings.weight": "bert/embeddings/word_embeddings",
    "bert.embeddings.position_embeddings.weight": "bert/embeddings/position_embeddings",
    "bert.embeddings.token_type_embeddings.weight": "bert/embeddings/token_type_embeddings",
    "cls.predictions.bias": "cls/predictions/output_bias",
    "cls.seq_relationship.weight": "cls/seq_relationship/output_weights",
    "cls.seq_relationship.bias": "cls/seq_relationship/output_bias",
  };
  if (special[name]) return [special[name]!, shape];
  const path = name.replace(/\.layer\.(\d+)\./, ".layer_$1.").split(".");
  const leaf = path.pop()!;
  const isNorm = path.at(-1) === "LayerNorm";
  const tfLeaf = isNorm ? (leaf === "weight" ? "gamma" : "beta") : leaf === "weight" ? "kernel" : "bias";
  return [[...path, tfLeaf].join("/"), tfLeaf === "kernel" ? [shape[1]!, shape[0]!] : shape];
}

test("a TF1 checkpoint loads into the model with kernels transposed and Adam slots skipped", async () => {
  const tensors: BundleTensor[] = [];
  [...bertParameterShapes(SMALL)].forEach(([name, shape], k) => {
    const [tfName, tfShape] = tfVariable(name, shape);
    const data = Float32Array.from({ length: tfShape.reduce((a, b) => a * b, 1) }, (_, j) => k + j / 4096);
    tensors.push(
      { name: tfName, dtypeEnum: 1, shape: tfShape, data },
      { name: `${tfName}/adam_m`, dtypeEnum: 1, shape: tfShape, data },
    );
  });
  tensors.push({ name: "global_step", dtypeEnum: 9, shape: [], data: BigInt64Array.of(28252n) });
  const prefix = join(scratch, "model.ckpt-28252");
  writeTfBundle(prefix, tensors);

  Tensor.manualSeed(4);
  const model = new BertForPretraining(SMALL);
  const { skipped, unmapped } = await model.loadFromTfCheckpoint(prefix);
  assert.equal(skipped.length, bertParameterShapes(SMALL).size + 1);
  assert.deepEqual(unmapped, []);
  const state = getStateDict(model);
  const kernel = tensors.find((t) => t.name === "bert/encoder/layer_1/intermediate/dense/kernel")!.data as Float32Array; // [32, 64]
  const weight = storageOf(state["bert.encoder.layer.1.intermediate.dense.weight"]!) as Float32Array; // [64, 32]
  for (let i = 0; i < 32; i++) for (let o = 0; o < 64; o++) assert.equal(weight[o * 32 + i], kernel[i * 64 + o]);
  const gamma = tensors.find((t) => t.name === "bert/encoder/layer_0/output/LayerNorm/gamma")!.data as Float32Array;
  assert.deepEqual(storageOf(state["bert.encoder.layer.0.output.LayerNorm.weight"]!), gamma);
  assert.equal(state["bert.embeddings.word_embeddings.weight"]!.dtype, dtypes.float32);
});

test("a checkpoint that lacks parameters is refused with their names", async () => {
  const prefix = join(scratch, "partial.ckpt");
  writeTfBundle(prefix, [{ name: "bert/pooler/dense/bias", dtypeEnum: 1, shape: [32], data: new Float32Array(32) }]);
  await assert.rejects(
    new BertForPretraining(ONE_LAYER).loadFromTfCheckpoint(prefix),
    /lacks \d+ BERT parameters: bert\.embeddings\.word_embeddings\.weight/,
  );
});
