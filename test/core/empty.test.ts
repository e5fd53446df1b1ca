// Tensors with no elements: realizing, reading and computing with them runs no kernel of no elements (one has no
// loop to index with), sums of nothing are 0, and a max of nothing is refused.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, TsgradError } from "../../src/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { testDevices } from "../devices.ts";

for (const device of testDevices()) {
  describe(`empty tensors on ${device}`, () => {
    test("realize and read back, elementwise ops and views", () => {
      const e = Tensor.zeros([0, 5], { device });
      assert.equal(e.contiguous().toArray().length, 0);
      assert.deepEqual(e.add(1).tolist(), []);
      assert.deepEqual(e.add(1).shape, [0, 5]);
      assert.deepEqual(
        Tensor.ones([4, 5], { device })
          .shrink([[2, 2], null])
          .tolist(),
        [],
      );
      assert.deepEqual(Tensor.zeros([1, 5], { device }).expand([0, 5]).tolist(), []);
      const { items } = recordItems(() => e.mul(2).realize());
      assert.equal(items.length, 0, "no kernel for no elements");
    });

    test("sums over an empty axis are 0; products with an empty axis are empty or 0", () => {
      const e = Tensor.zeros([0, 5], { device });
      assert.deepEqual(e.sum({ axis: 0 }).tolist(), [0, 0, 0, 0, 0]);
      assert.deepEqual(e.sum({ axis: 1 }).tolist(), []);
      assert.deepEqual(e.matmul(Tensor.ones([5, 3], { device })).shape, [0, 3]);
      assert.deepEqual(e.matmul(Tensor.ones([5, 3], { device })).tolist(), []);
      assert.deepEqual(
        Tensor.zeros([2, 0], { device })
          .matmul(Tensor.ones([0, 3], { device }))
          .tolist(),
        [
          [0, 0, 0],
          [0, 0, 0],
        ],
      );
    });

    test("padding, concatenating and gathering with empty pieces", () => {
      assert.deepEqual(
        Tensor.zeros([0, 2], { device })
          .pad([[1, 1], null], 7)
          .tolist(),
        [
          [7, 7],
          [7, 7],
        ],
      );
      assert.deepEqual(Tensor.cat([Tensor.zeros([0, 2], { device }), Tensor.ones([1, 2], { device })]).tolist(), [
        [1, 1],
      ]);
      assert.deepEqual(
        Tensor.zeros([0, 5], { device })
          .gather(1, Tensor.zeros([0, 2], { device, dtype: "int32" }))
          .tolist(),
        [],
      );
    });

    test("a max or min over an empty axis is refused by name", () => {
      const e = Tensor.zeros([3, 0], { device });
      assert.throws(
        () => e.max({ axis: 1 }),
        (err: Error) => err instanceof TsgradError && /max\(\): axis 1 of \[3, 0\] has no elements/.test(err.message),
      );
      assert.throws(() => e.argmax({ axis: 1 }), TsgradError);
      assert.deepEqual(e.max({ axis: 0 }).tolist(), []);
    });
  });
}
