// Host backends copy a matmul operand read with a cache-aliasing stride along the output's vector lanes
// (x @ W^T with W [n, 512 or more]) into the layout that makes the lanes contiguous, for that product only;
// and store a matmul before a heavy epilogue instead of narrowing its register tile.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, UOp } from "../../src/index.ts";
import { type ExecItem, createSchedule, storedBuffer } from "../../src/engine/schedule.ts";
import { assertClose, values } from "./harness.ts";

const device = "JS";
function input(shape: number[], seed: number, requiresGrad = false): Tensor {
  const t = new Tensor(Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(i * 0.37 + seed)), { device }).reshape(shape).realize();
  t.requiresGrad = requiresGrad;
  return t;
}

type Kernel = Extract<ExecItem, { kind: "kernel" }>;
const kernels = (...ts: Tensor[]): Kernel[] =>
  createSchedule(ts.map((t) => t.node as UOp)).items.flatMap((item) => (item.kind === "kernel" ? [item] : []));
const bufferOf = (t: Tensor) => storedBuffer(t.node as UOp)!;

/** x @ w^T in float64, x [m, k], w [n, k]. */
function reference(x: Tensor, w: Tensor): number[] {
  const [m, k] = x.shape as [number, number];
  const n = w.shape[0]!;
  const [xs, ws] = [values(x), values(w)];
  return Array.from({ length: m * n }, (_, i) => {
    let sum = 0;
    for (let j = 0; j < k; j++) sum += xs[Math.floor(i / n) * k + j]! * ws[(i % n) * k + j]!;
    return sum;
  });
}

test("x @ W^T with W's rows 2 KB apart reads a transposed copy of W, contiguous along the lanes", () => {
  const [x, w] = [input([64, 512], 1), input([48, 512], 2)];
  const y = x.matmul(w.T);
  const [copy, product] = kernels(y);
  assert.equal(kernels(y).length, 2);
  // the copy: W^T [512, 48], read from W's buffer
  assert.deepEqual(copy!.kernel.outputShape, [512, 48]);
  assert.ok(copy!.buffers.includes(bufferOf(w)));
  // the product reads the copy, not W
  assert.ok(product!.buffers.includes(copy!.buffers[0]!));
  assert.ok(!product!.buffers.includes(bufferOf(w)));
  assertClose(values(y), reference(x, w), { atol: 1e-3, rtol: 1e-5, what: "x @ W^T" });
});

test("no copy where the lanes' stride does not alias, the lanes are contiguous already, or the product reads W once", () => {
  // rows 1.5 KB apart
  assert.equal(kernels(input([64, 384], 1).matmul(input([48, 384], 2).T)).length, 1);
  // x @ W with W [k, n]: the lanes read neighbours
  assert.equal(kernels(input([64, 512], 1).matmul(input([512, 48], 2))).length, 1);
  // four rows: each element of W is read four times, a copy would cost as much as the product
  assert.equal(kernels(input([4, 512], 1).matmul(input([48, 512], 2).T)).length, 1);
});

test("the backward's dY @ W reads W itself, not the forward's transposed copy", () => {
  const [x, w] = [input([64, 512], 1, true), input([48, 512], 2, true)];
  const y = x.matmul(w.T);
  y.square().sum().backward();
  const items = kernels(y, x.grad!, w.grad!);
  const copies = items.filter((k) => k.kernel.outputShape.join() === "512,48");
  assert.equal(copies.length, 1);
  // dX [64, 512] = dY [64, 48] @ W [48, 512]: reads W's buffer
  const dx = items.find((k) => k.kernel.name.startsWith("r") && k.kernel.outputShape.filter((s) => s > 1).join() === "64,512");
  assert.ok(dx, "a kernel computes dX");
  assert.ok(dx.buffers.includes(bufferOf(w)) && !dx.buffers.includes(copies[0]!.buffers[0]!));
  // and the gradients are right: dX = 2 y @ W
  const expected = (() => {
    const [ys, ws] = [reference(x, w), values(w)];
    return Array.from({ length: 64 * 512 }, (_, i) => {
      let sum = 0;
      for (let j = 0; j < 48; j++) sum += 2 * ys[Math.floor(i / 512) * 48 + j]! * ws[j * 512 + (i % 512)]!;
      return sum;
    });
  })();
  assertClose(values(x.grad!), expected, { atol: 1e-2, rtol: 1e-4, what: "dX" });
});

test("a matmul before a heavy epilogue (a GELU) is stored with its full tile; a light one stays fused", () => {
  const [x, w] = [input([32, 64], 1), input([64, 48], 2)];
  const heavy = kernels(x.matmul(w).gelu());
  assert.deepEqual(heavy.map((k) => k.kernel.name[0]), ["r", "E"]);
  assert.ok(heavy[1]!.buffers.includes(heavy[0]!.buffers[0]!));
  assert.equal(kernels(x.matmul(w).mul(2).add(1)).length, 1);
});

test("a bias's gradient under a GELU is one reduce of the stored gradient, not one reduce per contribution", () => {
  const [x, w, b] = [input([64, 32], 1), input([48, 32], 2, true), input([48], 3, true)];
  const h = x.matmul(w.T).add(b);
  h.gelu().square().sum().backward();
  const items = kernels(w.grad!, b.grad!);
  const bias = items.find((k) => k.kernel.outputShape.filter((s) => s > 1).join() === "48");
  assert.ok(bias, "a kernel computes the bias's gradient");
  // one input: the gradient at h, which dW's matmul reads too
  assert.equal(bias.buffers.length, 2);
  const dw = items.find((k) => k.kernel.outputShape.filter((s) => s > 1).join() === "48,32")!;
  assert.ok(dw.buffers.includes(bias.buffers[1]!));
});
