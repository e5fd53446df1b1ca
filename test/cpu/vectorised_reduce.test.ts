// Reductions the C compiler vectorises: gcc 12.2 (Debian 12's) vectorised a sum over interleaved columns wrongly at
// -O2 and above ([[1,2],[3,4],[5,6],[7,8]] summed over rows gave [7, 2]); the backend probes for that and
// compiles without loop vectorisation where it shows. These are the shapes a differential fuzzer found wrong.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, Tensor } from "../../src/index.ts";

const skip = Device.isAvailable("CPU") ? false : "no working C compiler";

test("column sums with an accumulator per column are right on the CPU device", { skip }, () => {
  assert.deepEqual(new Tensor([[1, 2], [3, 4], [5, 6], [7, 8]], { device: "CPU" }).sum({ axis: 0 }).add(1).tolist(), [17, 21]);
  const t = new Tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]], { device: "CPU", dtype: "float32" });
  assert.deepEqual(t.pad([[1, 0], [0, 0]]).sum({ axis: 0 }).tolist(), [28, 32, 36, 40]);
});

test("a padded copy laid out in rows keeps every element on the CPU device", { skip }, () => {
  const out = new Tensor([1, 2, 3, 4, 5, 6], { device: "CPU" }).pad([[6, 38]]).reshape([1, 10, 1, 5]).contiguous().tolist();
  assert.deepEqual((out as number[][][][]).flat(3).filter((v) => v !== 0), [1, 2, 3, 4, 5, 6]);
});
