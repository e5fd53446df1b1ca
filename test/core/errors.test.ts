import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, TsgradError } from "../../src/index.ts";

const device = "JS";
const throwsNaming = (fn: () => unknown, ...parts: string[]): void => {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof TsgradError, `expected a TsgradError, got ${e}`);
    for (const p of parts) assert.ok(e.message.includes(p), `message ${JSON.stringify(e.message)} does not name ${p}`);
    return true;
  });
};

test("adding shapes that do not broadcast names both shapes and the axis", () => {
  throwsNaming(() => Tensor.zeros([2, 3], { device }).add(Tensor.zeros([4], { device })), "[2, 3]", "[4]", "axis 1");
});

test("a bad axis names the axis and the shape", () => {
  throwsNaming(() => Tensor.zeros([2, 3], { device }).sum({ axis: 2 }), "axis 2", "[2, 3]");
  throwsNaming(() => Tensor.zeros([2, 3], { device }).permute([0, 0]), "[0, 0]", "[2, 3]");
});

test("a reshape that changes the element count names both shapes", () => {
  throwsNaming(() => Tensor.zeros([2, 3], { device }).reshape([4, 2]), "[2, 3]", "[4, 2]");
});

test("matmul with mismatched inner sizes names both shapes", () => {
  throwsNaming(() => Tensor.zeros([2, 3], { device }).matmul(Tensor.zeros([4, 2], { device })), "[2, 3]", "[4, 2]");
});

test("cat of mismatched shapes names them", () => {
  throwsNaming(
    () => Tensor.cat([Tensor.zeros([2, 3], { device }), Tensor.zeros([3, 3], { device })], 1),
    "[2, 3]",
    "[3, 3]",
  );
});

test("requiresGrad on an integer tensor names the dtype", () => {
  throwsNaming(() => new Tensor([1, 2], { device, requiresGrad: true }), "int32");
});

test("an unknown dtype and an unknown device are named", () => {
  throwsNaming(() => Tensor.zeros([2], { device, dtype: "float8" as never }), "float8");
  throwsNaming(() => Tensor.zeros([2], { device: "TPU:0" }), "TPU:0");
  throwsNaming(() => Tensor.zeros([2], { device: "JS:x" }), "JS:x");
});

test("mixing devices names both", () => {
  throwsNaming(() => Tensor.zeros([2], { device: "JS:0" }).add(Tensor.zeros([2], { device: "JS:1" })), "JS", "JS:1");
});

test("ragged nested arrays name the expected shape", () => {
  throwsNaming(() => new Tensor([[1, 2], [3]], { device }), "[2, 2]");
});

test("item() on a tensor with several elements names its shape", () => {
  throwsNaming(() => Tensor.zeros([2, 2], { device }).item(), "[2, 2]");
});

test("slicing out of range names the index and axis", () => {
  throwsNaming(() => Tensor.zeros([2, 3], { device }).index(0, 5), "index 5", "axis 1");
});

test("assign with a different shape names both shapes", () => {
  throwsNaming(
    () =>
      Tensor.zeros([2], { device })
        .realize()
        .assign(Tensor.zeros([3], { device })),
    "[3]",
    "[2]",
  );
});

test("arange called with its options in the place of stop (plain JavaScript) names the argument", () => {
  throwsNaming(
    () => Tensor.arange(5, { device } as unknown as number),
    "stop is object",
    "arange(start, stop?, step?, options?)",
  );
});
