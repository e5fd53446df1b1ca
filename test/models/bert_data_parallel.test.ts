// Issue 7's acceptance: a BERT train step on 1, 2 and 3 (virtual) devices gives the same loss and weights.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, TsgradError } from "../../src/index.ts";
import { jit } from "../../src/tensor/index.ts";
import { replicateParameters } from "../../src/nn/parallel.ts";
import { getStateDict } from "../../src/nn/state.ts";
import { BERT_PRESETS, BertForPretraining, type BertBatch, type BertConfig } from "../../models/bert.ts";
import { bertBatchTensors, createBertOptimizer, makeBertTrainStep } from "../../models/bert_train_step.ts";
import { assertClose } from "../close.ts";

// BERT tiny's structure (post-LN encoder layers, tied MLM head, NSP head) at a size the JS backend runs quickly
const CONFIG: BertConfig = {
  ...BERT_PRESETS.tiny,
  numHiddenLayers: 1,
  vocabSize: 64,
  hiddenSize: 32,
  numAttentionHeads: 2,
  intermediateSize: 64,
  maxPositionEmbeddings: 16,
};
const [BATCH, SEQ, STEPS] = [6, 16, 3];

function batch(step: number, devices: string[]): BertBatch {
  const rows = Array.from({ length: BATCH }, (_, r) => r);
  const int = (data: number[][]) => {
    const t = new Tensor(data, { dtype: "int32", device: "JS" });
    return devices.length === 1 ? t.to(devices[0]!) : t.shard(devices, 0);
  };
  const length = (r: number) => 10 + ((r + step) % 6);
  return {
    inputIds: int(
      rows.map((r) =>
        Array.from({ length: SEQ }, (_, i) => (i < length(r) ? (i * 7 + r * 13 + step * 5 + 5) % CONFIG.vocabSize : 0)),
      ),
    ),
    segmentIds: int(rows.map((r) => Array.from({ length: SEQ }, (_, i) => (i >= 6 && i < length(r) ? 1 : 0)))),
    inputMask: int(rows.map((r) => Array.from({ length: SEQ }, (_, i) => (i < length(r) ? 1 : 0)))),
    maskedLmPositions: int(rows.map((r) => [1, 3, 5 + (r % 3), 8])),
    maskedLmIds: int(rows.map((r) => [r + 1, r + 7, (r * 3 + step) % CONFIG.vocabSize, 9])),
    maskedLmWeights: (() => {
      const t = new Tensor(
        rows.map((r) => [1, 1, 1, r % 2]),
        { dtype: "float32", device: "JS" },
      );
      return devices.length === 1 ? t.to(devices[0]!) : t.shard(devices, 0);
    })(),
    nextSentenceLabels: int(rows.map((r) => [(r + step) % 2])),
  };
}

function train(devices: string[], useJit: boolean): { losses: number[]; weights: Record<string, number[]> } {
  Tensor.manualSeed(11);
  const model = new BertForPretraining(CONFIG); // dropout on: replicas must draw the same masks as one device
  if (devices.length > 1) replicateParameters(model, devices);
  else for (const p of Object.values(getStateDict(model))) p.node = p.to(devices[0]!).realize().node;
  const state = { model, ...createBertOptimizer(model, { lr: 0.05, totalSteps: 10, warmupSteps: 0 }) };
  const plain = makeBertTrainStep(state, { lossScale: 1, gradientAccSteps: 1, maxGradNorm: 1 });
  const step = useJit ? jit(plain) : plain;
  const losses: number[] = [];
  for (let s = 0; s < STEPS; s++) losses.push(step(...bertBatchTensors(batch(s, devices))).item());
  const weights = Object.fromEntries(
    Object.entries(getStateDict(model)).map(([name, t]) => [name, Array.from(t.toArray() as Float32Array)]),
  );
  return { losses, weights };
}

/** Run `b` against the reference run `a`: each loss to 1e-5 of the reference's, each weight to 2e-5. */
function assertSame(a: ReturnType<typeof train>, b: ReturnType<typeof train>, what: string): void {
  assertClose(b.losses, a.losses, { atol: 0, rtol: 1e-5, what: `${what}: loss per step` });
  for (const [name, w] of Object.entries(a.weights))
    assertClose(b.weights[name]!, w, { atol: 2e-5, rtol: 0, what: `${what}: ${name}` });
}

test("a BERT train step on 1, 2 and 3 devices gives the same losses and weights after several steps", () => {
  const one = train(["JS"], false);
  assert.ok(one.losses.every(Number.isFinite));
  assertSame(one, train(["JS", "JS:1"], false), "2 devices");
  assertSame(one, train(["JS", "JS:1", "JS:2"], false), "3 devices");
});

test("the jitted BERT step on 2 devices matches one device", () => {
  assertSame(train(["JS"], false), train(["JS", "JS:1"], true), "jitted on 2 devices");
});

test("a batch that does not split evenly over the devices is refused, naming both", () => {
  assert.throws(
    () =>
      new Tensor(
        Array.from({ length: 5 }, () => [1, 2]),
        { device: "JS" },
      ).shard(["JS", "JS:1"], 0),
    (e: unknown) => e instanceof TsgradError && /5 is not a multiple of 2/.test(e.message),
  );
});
