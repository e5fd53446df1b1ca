import assert from "node:assert/strict";
import { test } from "node:test";
import { Device, Tensor } from "../../src/index.ts";
import {
  Dropout,
  Embedding,
  GroupNorm,
  LayerNorm,
  Linear,
  RMSNorm,
  truncatedNormal,
  zeros,
} from "../../src/nn/layers.ts";
import { getParameters } from "../../src/nn/state.ts";
import { assertClose } from "../close.ts";
import { checkOp, fromNd } from "../core/harness.ts";
import { type Nd, nd, randomNd } from "../core/ref.ts";

Device.DEFAULT = process.env.DEVICE ?? "JS";

const values = (t: Tensor): number[] => Array.from(t.toArray() as Float32Array);
/** Absolute: float32 layers against plain-JS arithmetic. */
const TOLERANCE = { atol: 1e-5, rtol: 0 };

test("Linear stores its weight as [out, in] and computes x @ W.T + b", () => {
  const layer = new Linear(3, 2);
  assert.deepEqual(layer.weight.shape, [2, 3]);
  assert.deepEqual(layer.bias!.shape, [2]);
  const [w, b] = [values(layer.weight), values(layer.bias!)];
  const x = [1, -2, 0.5];
  const expected = [0, 1].map((o) => b[o]! + x.reduce((s, xi, i) => s + xi * w[o * 3 + i]!, 0));
  assertClose(values(layer.forward(new Tensor([x]))), expected, TOLERANCE);
});

test("Linear's default initialisation stays within ±1/sqrt(fan in)", () => {
  Tensor.manualSeed(3);
  const layer = new Linear(16, 8);
  const bound = 1 / 4;
  for (const v of [...values(layer.weight), ...values(layer.bias!)]) assert.ok(Math.abs(v) <= bound, `${v}`);
});

test("Linear without bias has only a weight parameter", () => {
  const layer = new Linear(4, 2, { bias: false });
  assert.equal(layer.bias, undefined);
  assert.deepEqual(getParameters(layer), [layer.weight]);
});

test("Linear names its sizes when the input does not fit", () => {
  assert.throws(() => new Linear(3, 2).forward(Tensor.ones([1, 4])), /Linear\(3 -> 2\): input has shape \[1, 4\]/);
});

test("Embedding picks the rows of its table by id", () => {
  const table = new Embedding(4, 2);
  const w = values(table.weight);
  const out = table.forward(
    new Tensor(
      [
        [3, 0],
        [1, 3],
      ],
      { dtype: "int32" },
    ),
  );
  assert.deepEqual(out.shape, [2, 2, 2]);
  assertClose(
    values(out),
    [3, 0, 1, 3].flatMap((id) => [w[id * 2]!, w[id * 2 + 1]!]),
    TOLERANCE,
  );
});

test("LayerNorm normalises the last axis, then scales and shifts", () => {
  const norm = new LayerNorm(4, 1e-12);
  assertClose(values(norm.weight), [1, 1, 1, 1], TOLERANCE);
  assertClose(values(norm.bias), [0, 0, 0, 0], TOLERANCE);
  norm.weight.assign(new Tensor([1, 2, 1, 1])).realize();
  norm.bias.assign(new Tensor([0, 0, 0, 0.5])).realize();
  // [1, 2, 3, 4]: mean 2.5, population std sqrt(1.25)
  const s = Math.sqrt(1.25);
  assertClose(
    values(norm.forward(new Tensor([[1, 2, 3, 4]]))),
    [-1.5 / s, (2 * -0.5) / s, 0.5 / s, 1.5 / s + 0.5],
    TOLERANCE,
  );
});

test("Dropout passes inputs through unless training", () => {
  const x = Tensor.ones([64]);
  Tensor.training = false;
  assert.deepEqual(values(new Dropout(0.5).forward(x)), values(x));
});

test("Dropout while training zeroes about p of the inputs and scales the rest by 1/(1-p)", () => {
  Tensor.manualSeed(5);
  Tensor.training = true;
  try {
    const out = values(new Dropout(0.25).forward(Tensor.ones([2000])));
    const kept = out.filter((v) => v !== 0);
    assert.ok(kept.every((v) => Math.abs(v - 1 / 0.75) < 1e-6));
    assert.ok(Math.abs(1 - kept.length / out.length - 0.25) < 0.04, `dropped ${1 - kept.length / out.length}`);
  } finally {
    Tensor.training = false;
  }
});

test("truncated-normal initialisation stays within two standard deviations with the right spread", () => {
  Tensor.manualSeed(11);
  const w = values(new Linear(64, 64, { weightInit: truncatedNormal(0.02), biasInit: zeros }).weight);
  assert.ok(w.every((v) => Math.abs(v) <= 0.04 + 1e-7));
  const std = Math.sqrt(w.reduce((s, v) => s + v * v, 0) / w.length);
  // a normal truncated at ±2σ has std 0.88σ
  assert.ok(Math.abs(std - 0.02 * 0.8796) < 0.001, `std ${std}`);
});

test("parameters with equal initial values are still separate tensors", () => {
  const [a, b] = [new LayerNorm(3), new LayerNorm(3)];
  a.bias.assign(a.bias.add(1));
  b.bias.assign(b.bias.add(2));
  Tensor.realizeAll([a.bias, b.bias]);
  assert.deepEqual(values(a.bias), [1, 1, 1]);
  assert.deepEqual(values(b.bias), [2, 2, 2]);
});

test("layer parameters require gradients and receive them from backward", () => {
  const layer = new Linear(2, 1);
  layer
    .forward(new Tensor([[1, 2]]))
    .sum()
    .backward();
  assertClose(values(layer.weight.grad!), [1, 2], TOLERANCE);
  assertClose(values(layer.bias!.grad!), [1], TOLERANCE);
});

test("RMSNorm scales each row by its reciprocal root mean square, then by the weight", () => {
  const norm = new RMSNorm(4, 1e-6);
  norm.weight.assign(new Tensor([1, 2, 0.5, -1])).realize();
  const rows = [
    [1, -2, 3, 0.5],
    [0.1, 0.2, -0.3, 0.4],
  ];
  const expected = rows.flatMap((r) => {
    const rms = Math.sqrt(r.reduce((s, v) => s + v * v, 0) / 4 + 1e-6);
    return r.map((v, i) => (v / rms) * [1, 2, 0.5, -1][i]!);
  });
  assertClose(values(norm.forward(new Tensor(rows))), expected, TOLERANCE);
  assert.throws(() => norm.forward(new Tensor([[1, 2, 3]])), /RMSNorm\(4\): input has shape \[1, 3\]/);
});

test("GroupNorm normalises each group of channels over its sample's positions, with gradients", () => {
  const norm = new GroupNorm(2, 4);
  const [w, b] = [
    [1, 2, 3, 4],
    [0, 0.5, -1, 0],
  ];
  norm.weight.assign(new Tensor(w)).realize();
  norm.bias.assign(new Tensor(b)).realize();
  // [batch 2, channels 4, positions 3]: a group is 2 channels x 3 positions of one sample
  const reference = (a: Nd): Nd =>
    nd(
      a.shape,
      a.data.map((v, i) => {
        const [n, c] = [Math.floor(i / 12), Math.floor(i / 3) % 4];
        const start = n * 12 + Math.floor(c / 2) * 6;
        const group = a.data.slice(start, start + 6);
        const mean = group.reduce((s, u) => s + u, 0) / 6;
        const variance = group.reduce((s, u) => s + (u - mean) ** 2, 0) / 6;
        return ((v - mean) / Math.sqrt(variance + 1e-5)) * w[c]! + b[c]!;
      }),
    );
  checkOp("JS", [randomNd([2, 4, 3], 5, -2, 2)], (x) => norm.forward(x), reference, { atol: 1e-4, rtol: 1e-4 });
  // each group's normalised values sum to 0, so the weight gradients of a sum over the output pair up
  norm.weight.grad = null;
  norm
    .forward(fromNd(randomNd([2, 4, 3], 6), "JS"))
    .sum()
    .backward();
  const g = values(norm.weight.grad!);
  assert.ok(Math.abs(g[0]! + g[1]!) < 1e-4 && Math.abs(g[2]! + g[3]!) < 1e-4, `${g}`);
  assert.throws(() => new GroupNorm(3, 4), /GroupNorm: 3 groups must divide 4 channels/);
  assert.throws(
    () => norm.forward(Tensor.zeros([2, 3, 3])),
    /GroupNorm\(2, 4\): input has shape \[2, 3, 3\], channels on axis 1/,
  );
});
