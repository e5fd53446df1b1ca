// BatchNorm against its definition: training statistics, running statistics (PyTorch's momentum and
// unbiased variance), evaluation, the gradient, a jitted step, and over a batch sharded on two devices.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Device, Tensor, TsgradError, jit } from "../../src/index.ts";
import { BatchNorm } from "../../src/nn/layers.ts";
import { getParameters, getStateDict } from "../../src/nn/state.ts";
import { replicateParameters } from "../../src/nn/parallel.ts";
import { assertClose } from "../close.ts";

Device.DEFAULT = "JS";

const values = (t: Tensor): number[] => Array.from(t.toArray() as Float32Array);
const shape = [4, 3, 2, 5];
const data = (seed: number): number[] =>
  Array.from({ length: 120 }, (_, i) => Math.sin(i * 0.91 + seed) * 2 + (Math.floor(i / 10) % 3));

/** Per channel of a [4, 3, 2, 5] array: its elements' flat positions. */
const channel = (c: number): number[] =>
  Array.from({ length: 120 }, (_, i) => i).filter((i) => Math.floor(i / 10) % 3 === c);

function reference(x: number[], w: number[], b: number[], eps = 1e-5) {
  const out = new Array<number>(120),
    mean: number[] = [],
    biased: number[] = [],
    unbiased: number[] = [];
  for (let c = 0; c < 3; c++) {
    const at = channel(c);
    const m = at.reduce((s, i) => s + x[i]!, 0) / at.length;
    const v = at.reduce((s, i) => s + (x[i]! - m) ** 2, 0) / at.length;
    mean.push(m);
    biased.push(v);
    unbiased.push((v * at.length) / (at.length - 1));
    for (const i of at) out[i] = ((x[i]! - m) / Math.sqrt(v + eps)) * w[c]! + b[c]!;
  }
  return { out, mean, biased, unbiased };
}

test("BatchNorm in training normalises each channel by the batch and moves its running statistics", () => {
  const bn = new BatchNorm(3, 1e-5, 0.1);
  bn.weight.assign(new Tensor([1.5, -0.5, 2])).realize();
  bn.bias.assign(new Tensor([0.1, 0.2, -0.3])).realize();
  const xs = [data(1), data(2)];
  let [rm, rv] = [
    [0, 0, 0],
    [1, 1, 1],
  ];
  Tensor.training = true;
  try {
    for (const x of xs) {
      const ref = reference(x, [1.5, -0.5, 2], [0.1, 0.2, -0.3]);
      assertClose(values(bn.forward(new Tensor(x).reshape(shape))), ref.out, { atol: 1e-4, rtol: 0, what: "output" });
      rm = rm.map((r, c) => 0.9 * r + 0.1 * ref.mean[c]!);
      rv = rv.map((r, c) => 0.9 * r + 0.1 * ref.unbiased[c]!);
      assertClose(values(bn.runningMean), rm, { atol: 1e-5, rtol: 0, what: "running mean" });
      assertClose(values(bn.runningVar), rv, { atol: 1e-5, rtol: 0, what: "running variance (unbiased)" });
    }
  } finally {
    Tensor.training = false;
  }
  // evaluation: the running statistics, and they stay as they are
  const x = data(3);
  const expected = x.map((v, i) => {
    const c = Math.floor(i / 10) % 3;
    return ((v - rm[c]!) / Math.sqrt(rv[c]! + 1e-5)) * [1.5, -0.5, 2][c]! + [0.1, 0.2, -0.3][c]!;
  });
  assertClose(values(bn.forward(new Tensor(x).reshape(shape))), expected, {
    atol: 1e-4,
    rtol: 0,
    what: "evaluation output",
  });
  assertClose(values(bn.runningMean), rm, { atol: 1e-6, rtol: 0, what: "running mean after evaluation" });
});

test("BatchNorm's gradients are the batch-statistics ones (the mean and variance depend on the input)", () => {
  const bn = new BatchNorm(3);
  const xv = data(4),
    dy = data(5).map((v) => v * 0.3);
  const x = new Tensor(xv).reshape(shape).realize();
  x.requiresGrad = true;
  Tensor.training = true;
  try {
    bn.forward(x).mul(new Tensor(dy).reshape(shape)).sum().backward();
  } finally {
    Tensor.training = false;
  }
  const { mean, biased } = reference(xv, [1, 1, 1], [0, 0, 0]);
  const dx = new Array<number>(120),
    dw: number[] = [],
    db: number[] = [];
  for (let c = 0; c < 3; c++) {
    const at = channel(c),
      n = at.length,
      inv = 1 / Math.sqrt(biased[c]! + 1e-5);
    const xhat = (i: number) => (xv[i]! - mean[c]!) * inv;
    const sumDy = at.reduce((s, i) => s + dy[i]!, 0),
      sumDyXhat = at.reduce((s, i) => s + dy[i]! * xhat(i), 0);
    for (const i of at) dx[i] = (inv / n) * (n * dy[i]! - sumDy - xhat(i) * sumDyXhat);
    dw.push(sumDyXhat);
    db.push(sumDy);
  }
  assertClose(values(x.grad!), dx, { atol: 1e-4, rtol: 0, what: "input gradient" });
  assertClose(values(bn.weight.grad!), dw, { atol: 1e-4, rtol: 0, what: "weight gradient" });
  assertClose(values(bn.bias.grad!), db, { atol: 1e-4, rtol: 0, what: "bias gradient" });
});

test("BatchNorm's running statistics are state, not parameters: saved, not handed to an optimizer", () => {
  const bn = new BatchNorm(3);
  assert.deepEqual(Object.keys(getStateDict(bn)), ["weight", "bias", "runningMean", "runningVar"]);
  assert.deepEqual(getParameters(bn), [bn.weight, bn.bias]);
  assert.throws(
    () => bn.forward(Tensor.zeros([2, 4, 3])),
    (e: Error) => e instanceof TsgradError && e.message.includes("BatchNorm(3): input has shape [2, 4, 3]"),
  );
});

test("a jitted training step updates the running statistics on every replay", () => {
  const bn = new BatchNorm(3);
  const step = jit((x: Tensor) => bn.forward(x).sum().realize());
  let rm = [0, 0, 0];
  Tensor.training = true;
  try {
    for (let i = 0; i < 4; i++) {
      const x = data(10 + i);
      step(new Tensor(x).reshape(shape));
      rm = rm.map((r, c) => 0.9 * r + 0.1 * reference(x, [1, 1, 1], [0, 0, 0]).mean[c]!);
    }
  } finally {
    Tensor.training = false;
  }
  assertClose(values(bn.runningMean), rm, { atol: 1e-5, rtol: 0, what: "running mean after 4 jitted steps" });
});

test("over a batch sharded on two devices, BatchNorm normalises by the whole batch (the statistics all-reduced)", () => {
  const run = (devices: string[] | null) => {
    const bn = new BatchNorm(3);
    if (devices) replicateParameters(bn, devices);
    let x = new Tensor(data(7), { device: "JS" }).reshape(shape);
    if (devices) x = x.shard(devices, 0);
    Tensor.training = true;
    try {
      const out = values(bn.forward(x));
      return { out, rm: values(bn.runningMean), rv: values(bn.runningVar) };
    } finally {
      Tensor.training = false;
    }
  };
  const one = run(null),
    two = run(["JS:0", "JS:1"]);
  assertClose(two.out, one.out, { atol: 1e-5, rtol: 0, what: "output" });
  assertClose(two.rm, one.rm, { atol: 1e-6, rtol: 0, what: "running mean" });
  assertClose(two.rv, one.rv, { atol: 1e-6, rtol: 0, what: "running variance" });
});
