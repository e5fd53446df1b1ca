import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  bertNameFromTf,
  bertParameterNames,
  loadBertTfCheckpoint,
  planBertTfMapping,
} from "../../models/bert_tf_names.ts";
import { listTfCheckpoint, TfCheckpointError } from "../../src/io/tf_checkpoint.ts";
import { writeTfBundle, type BundleTensor } from "../io/tf_bundle_writer.ts";

const BERT_L8 = fileURLToPath(
  new URL("../fixtures/tf-checkpoint/bert-uncased_L-8_H-512_A-8/bert_model.ckpt", import.meta.url),
);
const scratch = mkdtempSync(join(tmpdir(), "tsgrad-bert-tf-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

const TINY = { layers: 2, hidden: 4, intermediate: 8, vocab: 10, positions: 6 };

/** The reference's TF variables of a BERT-tiny, with their TF shapes. */
function tinyTfVariables(): [string, number[]][] {
  const { layers, hidden: h, intermediate: i, vocab, positions } = TINY;
  const dense = (prefix: string, inSize: number, outSize: number): [string, number[]][] => [
    [`${prefix}/kernel`, [inSize, outSize]],
    [`${prefix}/bias`, [outSize]],
  ];
  const layerNorm = (prefix: string): [string, number[]][] => [
    [`${prefix}/gamma`, [h]],
    [`${prefix}/beta`, [h]],
  ];
  const variables: [string, number[]][] = [
    ["bert/embeddings/word_embeddings", [vocab, h]],
    ["bert/embeddings/position_embeddings", [positions, h]],
    ["bert/embeddings/token_type_embeddings", [2, h]],
    ...layerNorm("bert/embeddings/LayerNorm"),
  ];
  for (let l = 0; l < layers; l++) {
    const layer = `bert/encoder/layer_${l}`;
    variables.push(
      ...dense(`${layer}/attention/self/query`, h, h),
      ...dense(`${layer}/attention/self/key`, h, h),
      ...dense(`${layer}/attention/self/value`, h, h),
      ...dense(`${layer}/attention/output/dense`, h, h),
      ...layerNorm(`${layer}/attention/output/LayerNorm`),
      ...dense(`${layer}/intermediate/dense`, h, i),
      ...dense(`${layer}/output/dense`, i, h),
      ...layerNorm(`${layer}/output/LayerNorm`),
    );
  }
  variables.push(
    ...dense("bert/pooler/dense", h, h),
    ...dense("cls/predictions/transform/dense", h, h),
    ...layerNorm("cls/predictions/transform/LayerNorm"),
    ["cls/predictions/output_bias", [vocab]],
    ["cls/seq_relationship/output_weights", [2, h]],
    ["cls/seq_relationship/output_bias", [2]],
  );
  return variables;
}

/** Distinct values per tensor: tensor k holds k*1000 + 0, 1, 2, ... */
const float = (name: string, shape: number[], k: number): BundleTensor => ({
  name,
  dtypeEnum: 1,
  shape,
  data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, (_, j) => k * 1000 + j),
});

/** A pretraining-style checkpoint: every weight with its adam_m/adam_v slots, plus global_step. */
function writeTinyCheckpoint(name: string, variables = tinyTfVariables()): { prefix: string; tensors: BundleTensor[] } {
  const prefix = join(scratch, name);
  const tensors = variables.flatMap(([tfName, shape], k) => [
    float(tfName, shape, k),
    float(`${tfName}/adam_m`, shape, k + 500),
    float(`${tfName}/adam_v`, shape, k + 900),
  ]);
  tensors.push({ name: "global_step", dtypeEnum: 9, shape: [], data: BigInt64Array.of(28252n) });
  writeTfBundle(prefix, tensors);
  return { prefix, tensors };
}

test("maps every variable of Google's 8-layer BERT index, with nothing missing or left over", async () => {
  const plan = planBertTfMapping(await listTfCheckpoint(BERT_L8), 8);
  assert.equal(plan.mapped.length, 142);
  assert.deepEqual([plan.skipped, plan.unmapped, plan.missing], [[], [], []]);
  assert.deepEqual(plan.mapped.map((tensor) => tensor.name).sort(), bertParameterNames(8).sort());
});

test("gives the 8-layer BERT's kernels transposed shapes and keeps the others", async () => {
  const shapes = new Map(
    planBertTfMapping(await listTfCheckpoint(BERT_L8), 8).mapped.map((tensor) => [tensor.name, tensor.shape]),
  );
  assert.deepEqual(shapes.get("bert.encoder.layer.7.intermediate.dense.weight"), [2048, 512]); // TF [512, 2048]
  assert.deepEqual(shapes.get("bert.encoder.layer.0.output.dense.weight"), [512, 2048]); // TF [2048, 512]
  assert.deepEqual(shapes.get("bert.embeddings.word_embeddings.weight"), [30522, 512]);
  assert.deepEqual(shapes.get("cls.seq_relationship.weight"), [2, 512]);
  assert.deepEqual(shapes.get("cls.predictions.bias"), [30522]);
  assert.deepEqual(shapes.get("bert.encoder.layer.3.attention.output.LayerNorm.weight"), [512]);
});

test("translates TF names to tsgrad's, transposing only kernels", () => {
  assert.deepEqual(bertNameFromTf("bert/encoder/layer_11/attention/self/key/kernel"), {
    name: "bert.encoder.layer.11.attention.self.key.weight",
    transpose: true,
  });
  assert.deepEqual(bertNameFromTf("bert/encoder/layer_0/output/LayerNorm/gamma"), {
    name: "bert.encoder.layer.0.output.LayerNorm.weight",
    transpose: false,
  });
  assert.deepEqual(bertNameFromTf("cls/predictions/transform/LayerNorm/beta"), {
    name: "cls.predictions.transform.LayerNorm.bias",
    transpose: false,
  });
  assert.deepEqual(bertNameFromTf("cls/predictions/output_bias"), { name: "cls.predictions.bias", transpose: false });
  assert.deepEqual(bertNameFromTf("cls/seq_relationship/output_weights"), {
    name: "cls.seq_relationship.weight",
    transpose: false,
  });
  assert.equal(bertNameFromTf("bert/encoder/layer_0/attention/self/query/weights"), undefined);
});

test("loads a BERT-tiny pretraining checkpoint with kernels transposed to [out, in]", async () => {
  const { prefix, tensors } = writeTinyCheckpoint("tiny");
  const { weights, missing, unmapped } = await loadBertTfCheckpoint(prefix, TINY.layers);
  assert.deepEqual([missing, unmapped], [[], []]);
  assert.equal(weights.size, bertParameterNames(TINY.layers).length);
  const kernel = tensors.find((tensor) => tensor.name === "bert/encoder/layer_1/intermediate/dense/kernel")!
    .data as Float32Array;
  const weight = weights.get("bert.encoder.layer.1.intermediate.dense.weight")!;
  assert.deepEqual(weight.shape, [TINY.intermediate, TINY.hidden]);
  for (let inIndex = 0; inIndex < TINY.hidden; inIndex++) {
    for (let outIndex = 0; outIndex < TINY.intermediate; outIndex++) {
      assert.equal(weight.data[outIndex * TINY.hidden + inIndex], kernel[inIndex * TINY.intermediate + outIndex]);
    }
  }
});

test("passes LayerNorm, bias and NSP weights through untransposed", async () => {
  const { prefix, tensors } = writeTinyCheckpoint("tiny-untransposed");
  const { weights } = await loadBertTfCheckpoint(prefix, TINY.layers);
  const tfData = (name: string) => tensors.find((tensor) => tensor.name === name)!.data;
  assert.deepEqual(weights.get("cls.seq_relationship.weight"), {
    shape: [2, TINY.hidden],
    data: tfData("cls/seq_relationship/output_weights"),
  });
  assert.deepEqual(weights.get("cls.predictions.bias"), {
    shape: [TINY.vocab],
    data: tfData("cls/predictions/output_bias"),
  });
  assert.deepEqual(weights.get("bert.embeddings.LayerNorm.weight"), {
    shape: [TINY.hidden],
    data: tfData("bert/embeddings/LayerNorm/gamma"),
  });
});

test("skips adam_m, adam_v and global_step without reading their bytes", async () => {
  const { prefix } = writeTinyCheckpoint("tiny-skip");
  const stepEntry = (await listTfCheckpoint(prefix)).find((entry) => entry.name === "global_step")!;
  const dataFile = `${prefix}.data-00000-of-00001`;
  const bytes = readFileSync(dataFile);
  bytes[stepEntry.offset]! ^= 0xff; // a corrupt slot would fail its CRC if it were read
  writeFileSync(dataFile, bytes);
  const { skipped } = await loadBertTfCheckpoint(prefix, TINY.layers);
  assert.equal(skipped.length, 2 * tinyTfVariables().length + 1);
  assert.ok(skipped.includes("global_step"));
  assert.ok(skipped.includes("bert/encoder/layer_0/attention/self/query/kernel/adam_m"));
  assert.ok(skipped.includes("cls/predictions/output_bias/adam_v"));
});

test("reports unknown variables as unmapped and absent parameters as missing", async () => {
  const variables = tinyTfVariables().filter(([name]) => !name.startsWith("bert/pooler/"));
  variables.push(
    ["bert/encoder/layer_2/output/dense/bias", [TINY.hidden]],
    ["cls/squad/output_weights", [2, TINY.hidden]],
  );
  const { prefix } = writeTinyCheckpoint("tiny-gaps", variables);
  const { weights, unmapped, missing } = await loadBertTfCheckpoint(prefix, TINY.layers);
  assert.deepEqual(unmapped, ["bert/encoder/layer_2/output/dense/bias", "cls/squad/output_weights"]);
  assert.deepEqual(missing, ["bert.pooler.dense.weight", "bert.pooler.dense.bias"]);
  assert.equal(weights.has("bert.pooler.dense.weight"), false);
});

test("refuses a parameter stored with a dtype other than DT_FLOAT", async () => {
  const prefix = join(scratch, "half");
  writeTfBundle(prefix, [
    { name: "bert/pooler/dense/bias", dtypeEnum: 19, shape: [2], data: Uint16Array.of(0x3c00, 0) },
  ]);
  await assert.rejects(loadBertTfCheckpoint(prefix, 1), (error: unknown) => {
    assert.ok(error instanceof TfCheckpointError);
    assert.match(
      error.message,
      /"bert\/pooler\/dense\/bias" \(for bert\.pooler\.dense\.bias\): dtype DT_HALF, expected DT_FLOAT/,
    );
    return true;
  });
});
