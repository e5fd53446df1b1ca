// Long reduces to few outputs run in two kernels (tensor.ts splitReduce): many partial results, then their
// total. Same values as one reduce (to float32 rounding), same gradients, same shapes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GlobalCounters, Tensor, dtypes } from "../../src/index.ts";
import { splitReduce } from "../../src/tensor/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { testDevices } from "../devices.ts";
import { assertClose } from "../close.ts";

test("only long reduces to few outputs are split, at the reduced axis with the largest factor up to 256", () => {
  assert.deepEqual(splitReduce([1 << 16], [0]), { axis: 0, factor: 256 });
  assert.deepEqual(splitReduce([8, 512, 1024], [0, 1, 2]), { axis: 1, factor: 256 });
  assert.deepEqual(splitReduce([4, 8, 4096], [1, 2]), { axis: 2, factor: 256 });
  assert.equal(splitReduce([1024, 4096], [1]), undefined, "rows 4096 long: one kernel");
  // column sums (a bias's gradient) from 2048 long: each output's elements lie a row apart
  assert.deepEqual(splitReduce([4096, 1024], [0]), { axis: 0, factor: 256 });
  assert.deepEqual(splitReduce([8, 512, 1024], [0, 1]), { axis: 1, factor: 256 });
  assert.equal(splitReduce([1024, 1024], [0]), undefined, "a column 1024 long: one kernel");
  assert.equal(
    splitReduce([4096, 32, 32], [0]),
    undefined,
    "two kept axes (a weight gradient's shape): not a column sum",
  );
  assert.equal(splitReduce([1 << 15, 1 << 14], [0]), undefined, "2^14 outputs keep every core busy");
  assert.equal(splitReduce([32771], [0]), undefined, "a prime length has no factor");
});

for (const device of testDevices()) {
  const values = Array.from({ length: 3 * 40000 }, (_, i) => Math.sin(i * 0.37) * 4 + (i % 7));
  const x = () => new Tensor(values, { device }).reshape([3, 40000]);

  test(`a long sum and max give the one-kernel results, in two kernels (${device})`, () => {
    const t = x().realize();
    GlobalCounters.reset();
    const total = t.sum().item();
    assert.equal(GlobalCounters.kernelCount, 2);
    const expected = values.reduce((a, b) => a + b, 0);
    assertClose(total, expected, { atol: 1e-5 * values.reduce((a, b) => a + Math.abs(b), 0), rtol: 0, what: "sum" });
    assert.equal(t.max().item(), Math.fround(Math.max(...values)));
    const rows = t.sum({ axis: 1, keepdim: true });
    assert.deepEqual(rows.shape, [3, 1]);
    const rowSums = [0, 1, 2].map((r) => values.slice(r * 40000, (r + 1) * 40000).reduce((a, b) => a + b, 0));
    (rows.toArray() as Float32Array).forEach((v, r) =>
      assert.ok(Math.abs(v - rowSums[r]!) < 1e-6 * 40000 * 10, `row ${r}: ${v} vs ${rowSums[r]}`),
    );
  });

  test(`gradients flow through a split sum and a split max (${device})`, () => {
    const leaf = new Tensor(values, { device, requiresGrad: true });
    leaf.reshape([3, 40000]).square().sum().backward();
    const grad = leaf.grad!.toArray() as Float32Array;
    values.forEach((v, i) => {
      if (i % 9973 === 0) assert.ok(Math.abs(grad[i]! - 2 * Math.fround(v)) < 1e-4, `d/dx ${i}`);
    });
    const m = new Tensor(values, { device, requiresGrad: true });
    m.reshape([3, 40000]).max().backward();
    const mgrad = Array.from(m.grad!.toArray() as Float32Array);
    // the maximum is reached twice (float32 ties): each place gets half, split or not
    const top = Math.max(...values.map(Math.fround));
    const places = values.flatMap((v, i) => (Math.fround(v) === top ? [i] : []));
    assert.equal(places.length, 2);
    for (const i of places) assert.equal(mgrad[i], 0.5);
    assert.equal(
      mgrad.reduce((a, b) => a + b, 0),
      1,
    );
  });
}

/** Whether a stored partial (CONTIGUOUS) feeds a reduce somewhere in the graph of `t`. */
function hasStoredPartial(t: Tensor): boolean {
  const seen = new Set<unknown>();
  const visit = (u: { op: string; src: readonly unknown[] }): boolean => {
    if (seen.has(u)) return false;
    seen.add(u);
    if (u.op === "REDUCE" && (u.src[0] as { op: string }).op === "CONTIGUOUS") return true;
    return u.src.some((s) => visit(s as { op: string; src: readonly unknown[] }));
  };
  return visit(t.node as unknown as { op: string; src: readonly unknown[] });
}

for (const device of testDevices()) {
  for (const dtype of [dtypes.float32, dtypes.float16]) {
    test(`a bias's gradient over many rows (a column sum) runs in two kernels with the one-kernel values (${device}, ${dtype.name})`, () => {
      const [rows, cols] = [4096, 48];
      const xs = Array.from({ length: rows * cols }, (_, i) => Math.cos(i * 0.11) * 2);
      const bs = Array.from({ length: cols }, (_, j) => (j % 5) * 0.25 - 0.5);
      const bias = new Tensor(bs, { device, dtype, requiresGrad: true });
      // d/d(bias) of sum((x + bias) * c): the column sums of c, one product (as after a dropout mask)
      const c = new Tensor(xs, { device, dtype }).reshape([rows, cols]).realize();
      new Tensor(xs, { device, dtype }).reshape([rows, cols]).flip([0]).add(bias).mul(c).sum().backward();
      assert.ok(hasStoredPartial(bias.grad!), "the gradient is one reduce");
      const grad = Array.from(bias.grad!.cast(dtypes.float32).toArray() as Float32Array);
      for (let j = 0; j < cols; j++) {
        let expected = 0,
          magnitude = 0;
        for (let i = 0; i < rows; i++) {
          expected += xs[i * cols + j]!;
          magnitude += Math.abs(xs[i * cols + j]!);
        }
        // float32 sums in another order; float16 inputs and sums rounded to 11 bits, the total once more
        const tolerance = dtype === dtypes.float16 ? magnitude * 2 ** -10 + 0.25 : magnitude * 1e-6;
        assertClose(grad[j]!, expected, { atol: tolerance, rtol: 0, what: `column ${j}` });
      }
    });
  }
}

test("neighbouring reduced axes are cut as one: a norm over [1021, 256] is 256 partials of 1021 neighbours", () => {
  // cut per axis, 1021 (prime) has no factor, so 256 would give 128 partials of two columns each, strided
  const values = Array.from({ length: 1021 * 256 }, (_, i) => Math.cos(i * 0.11) * 3);
  const t = new Tensor(values, { device: "JS" }).reshape([1021, 256]).realize();
  const items = recordItems(() => t.square().sum().realize()).items.filter((i) => i.kind === "kernel");
  assert.deepEqual(
    items.map((i) => (i.kind === "kernel" ? i.kernel.outputShape : [])),
    [[256, 1], []],
  );
  const expected = values.reduce((a, b) => a + b * b, 0);
  const total = t.square().sum().item();
  assertClose(total, expected, { atol: 0, rtol: 1e-5, what: "sum of squares" });
});
