// Core bugs found while building on the core, one test each, named for the behaviour that broke.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, TsgradError } from "../../src/index.ts";
import { testDevices } from "../devices.ts";

for (const device of testDevices()) {
  test(`tensors realized from equal lazy values stay independent when both are assigned in one realize (${device})`, () => {
    // zeros(...).contiguous() twice is one deduplicated node: the second realize found it stored and
    // did not count its tensor as a co-owner, so both assigns wrote into the one shared buffer
    const first = Tensor.zeros([3], { device }).contiguous().realize();
    const second = Tensor.zeros([3], { device }).contiguous().realize();
    first.assign(first.add(1));
    second.assign(second.add(2));
    Tensor.realizeAll([first, second]);
    assert.deepEqual(first.tolist(), [1, 1, 1]);
    assert.deepEqual(second.tolist(), [2, 2, 2]);
  });
}

for (const device of testDevices()) {
  test(`parameters realized from equal values before requiring grad get separate gradients (${device})`, () => {
    // once the realize fix above made both tensors views of the one shared buffer, they were one
    // graph node, and backward gave each the sum of both gradients
    const first = Tensor.zeros([3], { device }).contiguous().realize();
    const second = Tensor.zeros([3], { device }).contiguous().realize();
    first.requiresGrad = true;
    second.requiresGrad = true;
    first
      .mul(new Tensor([1, 2, 3], { device }))
      .add(second.mul(new Tensor([10, 20, 30], { device })))
      .sum()
      .backward();
    assert.deepEqual(first.grad!.tolist(), [1, 2, 3]);
    assert.deepEqual(second.grad!.tolist(), [10, 20, 30]);
  });
}

test("one LAMB step on a weight replicated over two devices matches the step on one device", async () => {
  // found wiring GPUS>1 into the BERT trainer; forward, gradients, norms, where and assigns on
  // replicated tensors each match one device, the whole LAMB update does not
  const { LAMB } = await import("../../src/nn/optim.ts");
  const step = (devices: string[]): number[] => {
    const place = (t: Tensor) => (devices.length > 1 ? t.to(devices) : t);
    const w = place(
      new Tensor(
        [
          [0.5, -1, 2],
          [1, 0.25, -0.5],
        ],
        { device: "JS" },
      ),
    );
    w.requiresGrad = true;
    const optimizer = new LAMB([w], { lr: 0.1 });
    w.grad = place(
      new Tensor(
        [
          [1, 2, 3],
          [4, 5, 6],
        ],
        { device: "JS" },
      ),
    );
    optimizer.step();
    return Array.from(w.toArray() as Float32Array);
  };
  const one = step(["JS"]);
  step(["JS", "JS:1"]).forEach((value, i) =>
    assert.ok(Math.abs(value - one[i]!) < 1e-6, `element ${i}: ${value} vs ${one[i]}`),
  );
});

test("a BERT train step on 2 devices with the loader's fake batch keeps every weight finite", async () => {
  // the cause: LAMB's m and v (equal zeros) shared one buffer per device; realize did not count a
  // multi-device tensor as a co-owner, so copy-on-write never split them
  // found running the trainer with GPUS=2; test/models/bert_data_parallel.test.ts's hand-made batch
  // does not show it, the fake batch (random lengths, 1 to 3 predictions a row) does
  const { BertForPretraining, BERT_PRESETS } = await import("../../models/bert.ts");
  const { bertTrainStep, createBertOptimizer } = await import("../../models/bert_train_step.ts");
  const { replicateParameters } = await import("../../src/nn/parallel.ts");
  const { getStateDict } = await import("../../src/nn/state.ts");
  const { fakeBatch } = await import("../../mlperf/bert/data/loader.ts");
  const devices = ["JS", "JS:1"];
  const samples = fakeBatch(8, 16, 3, 1, 1200);
  const shard = (data: Int32Array | Float32Array, shape: number[]) =>
    new Tensor(data, { device: "JS" }).reshape(shape).shard(devices, 0);
  Tensor.manualSeed(1);
  const model = new BertForPretraining(
    {
      ...BERT_PRESETS.tiny,
      vocabSize: 1200,
      hiddenSize: 16,
      numAttentionHeads: 2,
      intermediateSize: 32,
      maxPositionEmbeddings: 16,
      numHiddenLayers: 1,
    },
    { disableDropout: true },
  );
  replicateParameters(model, devices);
  const state = { model, ...createBertOptimizer(model, { lr: 0.01, totalSteps: 100, warmupSteps: 1 }) };
  bertTrainStep(
    state,
    {
      inputIds: shard(samples.input_ids, [8, 16]),
      segmentIds: shard(samples.segment_ids, [8, 16]),
      inputMask: shard(samples.input_mask, [8, 16]),
      maskedLmPositions: shard(samples.masked_lm_positions, [8, 3]),
      maskedLmIds: shard(samples.masked_lm_ids, [8, 3]),
      maskedLmWeights: shard(samples.masked_lm_weights, [8, 3]),
      nextSentenceLabels: shard(samples.next_sentence_labels, [8]),
    },
    { lossScale: 1, gradientAccSteps: 1, maxGradNorm: 1 },
  );
  for (const [name, t] of Object.entries(getStateDict(model)))
    assert.ok(Array.from(t.toArray() as Float32Array).every(Number.isFinite), `${name} is not finite`);
});

for (const device of testDevices()) {
  test(`a concatenation stored twice (cat(...).contiguous(), read again through contiguous) (${device})`, () => {
    const [x, y] = [new Tensor([1, 2], { device }), new Tensor([3], { device })];
    // reading a lazy contiguous() wraps it once more: the outer kernel copies the stored concatenation
    assert.deepEqual(Tensor.cat([x, y]).contiguous().tolist(), [1, 2, 3]);
    assert.deepEqual(Tensor.stack([x, x]).contiguous().contiguous().tolist(), [
      [1, 2],
      [1, 2],
    ]);
  });
}

for (const device of testDevices()) {
  test(`a gather's gradient through a transpose of an expanded axis (the one-hot sum read its value at the sum's index, not the value's) (${device})`, () => {
    const x = new Tensor([1, 2], { device, dtype: "float32", requiresGrad: true });
    const out = x
      .reshape([2, 1])
      .expand([2, 2])
      .transpose()
      .gather(0, new Tensor([[0, 0]], { device }));
    assert.deepEqual(out.tolist(), [[1, 2]]);
    out
      .mul(new Tensor([[10, 20]], { device, dtype: "float32" }))
      .sum()
      .backward();
    assert.deepEqual(x.grad!.tolist(), [10, 20]);
  });
}

test("backward of a tensor realized first (no graph left) is refused by name, not silent", () => {
  const w = new Tensor([1.5, 2], { device: "JS", requiresGrad: true });
  const loss = w.mul(w).sum();
  loss.realize();
  assert.throws(
    () => loss.backward(),
    (e: Error) =>
      e instanceof TsgradError && /backward: this \[\] tensor depends on no tensor that requires grad/.test(e.message),
  );
  assert.equal(w.grad, null);
  // the lazy one differentiates
  w.mul(w).sum().backward();
  assert.deepEqual(w.grad!.tolist(), [3, 4]);
});
