import { test } from "node:test";
import assert from "node:assert/strict";
import { GlobalCounters, Tensor, type UOp } from "../../src/index.ts";
import { testDevices } from "../devices.ts";

for (const device of testDevices()) {
  test(`a 2-layer MLP trained with SGD fits a toy regression (${device})`, () => {
    // y = sin(2x) on [-1, 1]; 32 hidden tanh units; plain SGD via assign
    Tensor.manualSeed(0);
    const xs = Tensor.arange(-1, 1, 1 / 32, { device }).reshape([64, 1]);
    const ys = xs.mul(2).sin();
    const w1 = Tensor.normal([1, 32], 0, 1, { device, requiresGrad: true });
    const b1 = Tensor.zeros([32], { device, requiresGrad: true });
    const w2 = Tensor.normal([32, 1], 0, 0.2, { device, requiresGrad: true });
    const b2 = Tensor.zeros([1], { device, requiresGrad: true });
    const params = [w1, b1, w2, b2];
    Tensor.realizeAll(params);
    let loss = Infinity;
    for (let step = 0; step < 300; step++) {
      const pred = xs.matmul(w1).add(b1).tanh().matmul(w2).add(b2);
      const l = pred.sub(ys).square().mean();
      for (const p of params) p.grad = null;
      l.backward();
      for (const p of params) p.assign(p.sub(p.grad!.mul(0.2)));
      Tensor.realizeAll([l, ...params]);
      loss = l.item();
    }
    assert.ok(loss < 0.01, `final loss ${loss}`);
  });
}

test("gradients accumulate across backward calls until cleared", () => {
  const x = new Tensor([2], { device: "JS", dtype: "float32", requiresGrad: true });
  x.mul(3).sum().backward();
  x.mul(x).sum().backward();
  assert.deepEqual(x.grad!.tolist(), [3 + 4]);
});

test("a tensor used twice gets the sum of both gradient paths", () => {
  const x = new Tensor([1.5], { device: "JS", requiresGrad: true });
  x.mul(x).add(x.exp()).sum().backward();
  assert.ok(Math.abs(x.grad!.item() - (3 + Math.exp(1.5))) < 1e-5);
});

test("detach() stops gradients and nothing else: same values, no copy kernel, a view of a realized buffer", () => {
  const x = new Tensor([1.5, 2, 3], { device: "JS", requiresGrad: true });
  // d/dx (stop(x) * x) = stop(x); without the stop it would be 2x
  x.detach().mul(x).sum().backward();
  assert.deepEqual(x.grad!.tolist(), [1.5, 2, 3]);
  const y = x.mul(2).realize();
  GlobalCounters.reset();
  const detached = y.detach();
  assert.deepEqual(detached.add(1).tolist(), [4, 5, 7]);
  assert.equal(GlobalCounters.kernelCount, 1);
  // a lazy value detached fuses into its reader
  GlobalCounters.reset();
  x.exp().detach().mul(3).realize();
  assert.equal(GlobalCounters.kernelCount, 1);
});

test("two equal lazy parameters keep separate gradients", () => {
  const a = Tensor.zeros([2], { device: "JS", requiresGrad: true });
  const b = Tensor.zeros([2], { device: "JS", requiresGrad: true });
  a.mul(2).add(b.mul(5)).sum().backward();
  assert.deepEqual(a.grad!.tolist(), [2, 2]);
  assert.deepEqual(b.grad!.tolist(), [5, 5]);
});

test("assign writes in place and keeps the buffer", () => {
  const w = new Tensor([1, 2, 3], { device: "JS", dtype: "float32" }).realize();
  const before = (w.node as UOp).baseBuffer;
  w.assign(w.mul(2)).realize();
  assert.deepEqual(w.tolist(), [2, 4, 6]);
  assert.equal((w.node as UOp).baseBuffer, before);
});

test("assigning a reordering of itself does not read clobbered values", () => {
  const w = new Tensor([1, 2, 3, 4], { device: "JS", dtype: "float32" }).realize();
  w.assign(w.flip(0)).realize();
  assert.deepEqual(w.tolist(), [4, 3, 2, 1]);
});

test("a read scheduled together with an assign sees the old value", () => {
  const w = new Tensor([1, 2], { device: "JS", dtype: "float32" }).realize();
  const doubled = w.mul(2);
  w.assign(w.add(10));
  Tensor.realizeAll([w, doubled]);
  assert.deepEqual(doubled.tolist(), [2, 4]);
  assert.deepEqual(w.tolist(), [11, 12]);
});

test("to() copies between devices", () => {
  const a = new Tensor([1, 2, 3], { device: "JS:0" });
  const b = a.to("JS:1");
  assert.equal(b.device, "JS:1");
  assert.deepEqual(b.mul(2).tolist(), [2, 4, 6]);
});

test("gradients flow back through a device copy", () => {
  const a = new Tensor([1, 2], { device: "JS:0", dtype: "float32", requiresGrad: true });
  a.to("JS:1").mul(3).sum().backward();
  assert.equal(a.grad!.device, "JS");
  assert.deepEqual(a.grad!.tolist(), [3, 3]);
});
