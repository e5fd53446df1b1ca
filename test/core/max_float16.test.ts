// A max over a computed 16-bit value: such values are computed in float32 and rounded only when stored,
// so the max reads a stored copy (tensor.ts maxSource) and its gradient and argmax, which find the
// maximum by equality, see the same numbers. Before, BERT-large in float16 lost its gradients to 0/0.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor } from "../../src/index.ts";
import { testDevices } from "../devices.ts";

for (const device of testDevices()) {
  test(`a max of a computed float16 value finds its maximum again: finite gradients, argmax in range (${device})`, () => {
    // a + b is computed in float32 and rounded only when stored: 1.0009765625 + 0.00048828 is not a float16
    const a = new Tensor(
      [
        [1.0009765625, 3.001953125, 2],
        [0.5, 0.25, 0.125],
      ],
      { device, dtype: "float16", requiresGrad: true },
    );
    const b = new Tensor(
      [
        [0.00048828125, 0.0009765625, 1],
        [0.3, 0.2, 0.1],
      ],
      { device, dtype: "float16" },
    );
    const x = a.add(b);
    x.max({ axis: 1 }).sum().backward();
    assert.deepEqual(a.grad!.float().tolist(), [
      [0, 1, 0],
      [1, 0, 0],
    ]);
    assert.deepEqual(x.argmax({ axis: 1 }).tolist(), [1, 0]);
    assert.deepEqual(x.argmin({ axis: 1 }).tolist(), [0, 2]);
  });
}
