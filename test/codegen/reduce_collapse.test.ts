// A one-hot sum over a large axis (embedding, gather) lowers to one guarded load per element, not a loop.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GlobalCounters, Tensor, dtypes } from "../../src/index.ts";
import { testDevices } from "../devices.ts";

const VOCAB = 3000;
const DIM = 8;

/** Realizes `build(inputs)` (inputs realized first) and returns its values and the operations its kernels performed. */
function measure(inputs: Tensor[], build: (...inputs: Tensor[]) => Tensor): { values: number[]; flops: number } {
  Tensor.realizeAll(inputs);
  GlobalCounters.reset();
  const out = build(...inputs).realize();
  const flops = GlobalCounters.globalOps;
  return { values: Array.from(out.toArray() as Float32Array), flops };
}

for (const device of testDevices()) {
  test(`embedding picks rows without looping over the vocabulary (${device})`, () => {
    const weight = Tensor.arange(0, VOCAB * DIM, 1, { device })
      .cast(dtypes.float32)
      .mul(0.5)
      .reshape([VOCAB, DIM])
      .contiguous();
    const ids = new Tensor(
      [
        [5, 2999],
        [0, 1234],
      ],
      { dtype: dtypes.int32, device },
    );
    const { values, flops } = measure([ids, weight], Tensor.embedding);
    const expected = [5, 2999, 0, 1234].flatMap((id) => Array.from({ length: DIM }, (_, j) => (id * DIM + j) * 0.5));
    assert.deepEqual(values, expected);
    assert.ok(flops < 4 * DIM * 10, `expected a handful of operations per element, got ${flops}`);
  });

  test(`ids outside the vocabulary give zero rows (${device})`, () => {
    const weight = Tensor.ones([VOCAB, DIM], { device }).contiguous();
    const ids = new Tensor([-1, VOCAB, 7], { dtype: dtypes.int32, device });
    const { values } = measure([ids, weight], Tensor.embedding);
    assert.deepEqual(values, [...new Array(2 * DIM).fill(0), ...new Array(DIM).fill(1)]);
  });

  test(`gather along the last axis collapses too (${device})`, () => {
    const source = Tensor.arange(0, 2 * VOCAB, 1, { device })
      .cast(dtypes.float32)
      .reshape([2, VOCAB])
      .contiguous();
    const index = new Tensor(
      [
        [7, 2500],
        [2999, 0],
      ],
      { dtype: dtypes.int32, device },
    );
    const { values, flops } = measure([source, index], (s, i) => s!.gather(1, i!));
    assert.deepEqual(values, [7, 2500, VOCAB + 2999, VOCAB]);
    assert.ok(flops < 4 * 10, `expected no loop over the gathered axis, got ${flops} operations`);
  });

  test(`a negated one-hot sum (a loss gradient's -(one-hot x weight) over the vocabulary) collapses too (${device})`, () => {
    const labels = new Tensor([7, 2999, -1, 0], { dtype: dtypes.int32, device });
    const weights = new Tensor([0.5, 2, 3, -1.5], { device });
    const { values, flops } = measure([labels, weights], (l, w) =>
      l!
        .unsqueeze(1)
        .eq(Tensor.arange(0, VOCAB, 1, { device }).unsqueeze(0))
        .where(w!.unsqueeze(1), 0)
        .neg()
        .sum({ axis: 1 }),
    );
    // the label outside the vocabulary adds nothing
    assert.deepEqual(values, [-0.5, -2, 0, 1.5]);
    assert.ok(flops < 4 * 10, `expected no loop over the vocabulary, got ${flops} operations`);
  });
}

test("a sum that is not one-hot still loops", () => {
  const x = Tensor.ones([4, VOCAB], { device: "JS" }).contiguous();
  const { values, flops } = measure([x], (t) => t!.sum({ axis: 1 }));
  assert.deepEqual(values, [VOCAB, VOCAB, VOCAB, VOCAB]);
  assert.ok(flops >= 4 * VOCAB);
});
