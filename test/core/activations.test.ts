// Activations, log1p/expm1, logsumexp, any/all, repeat and the losses: forward against float64 definitions and
// gradients against finite differences (checkOp), on every test device; plus the edges each guards against
// (overflow, NaN gradients from a dropped branch, rounding of 1 + x).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, TsgradError, dtypes } from "../../src/index.ts";
import { relaxedFloat, testDevices } from "../devices.ts";
import { assertClose } from "../close.ts";
import { checkOp, fromNd, values } from "./harness.ts";
import { type Nd, erf, map, nd, randomNd, reduce, zip } from "./ref.ts";

const x = randomNd([2, 3, 4], 21, -4, 4);
const awayFromZero = map(randomNd([2, 3, 4], 22, 0.3, 3), (v) => (v > 1.6 ? v : -v)); // kinks stay out of the differences
const sigmoid = (v: number): number => 1 / (1 + Math.exp(-v));
const softplus = (v: number): number => Math.max(v, 0) + Math.log1p(Math.exp(-Math.abs(v)));
const relu6 = (v: number): number => Math.min(Math.max(v, 0), 6);
const elu = (v: number, alpha = 1): number => (v > 0 ? v : alpha * Math.expm1(v));

const unary: [string, (t: Tensor) => Tensor, (v: number) => number, Nd][] = [
  ["silu", (t) => t.silu(), (v) => v * sigmoid(v), x],
  ["leakyRelu", (t) => t.leakyRelu(0.1), (v) => (v > 0 ? v : 0.1 * v), awayFromZero],
  ["relu6", (t) => t.relu6(), relu6, map(awayFromZero, (v) => v * 2.2)],
  [
    "hardtanh",
    (t) => t.hardtanh(-0.5, 2),
    (v) => Math.min(Math.max(v, -0.5), 2),
    map(awayFromZero, (v) => (Math.abs(v + 0.5) < 0.1 ? v + 0.3 : v)),
  ],
  ["hardsigmoid", (t) => t.hardsigmoid(), (v) => relu6(v + 3) / 6, map(x, (v) => v * 1.4)],
  ["hardswish", (t) => t.hardswish(), (v) => (v * relu6(v + 3)) / 6, map(x, (v) => v * 1.4)],
  ["elu", (t) => t.elu(0.7), (v) => elu(v, 0.7), awayFromZero],
  ["selu", (t) => t.selu(), (v) => 1.0507009873554805 * elu(v, 1.6732632423543772), awayFromZero],
  ["softplus", (t) => t.softplus(), softplus, x],
  ["softplus beta 2", (t) => t.softplus(2), (v) => softplus(2 * v) / 2, x],
  ["mish", (t) => t.mish(), (v) => v * Math.tanh(softplus(v)), x],
  ["logsigmoid", (t) => t.logsigmoid(), (v) => -softplus(-v), x],
  [
    "gelu (tanh)",
    (t) => t.gelu({ approximate: "tanh" }),
    (v) => 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3))),
    x,
  ],
  ["log1p", (t) => t.log1p(), Math.log1p, randomNd([2, 3, 4], 23, -0.9, 3)],
  ["expm1", (t) => t.expm1(), Math.expm1, x],
];

/** log(sum(exp)) along the last axis (keepdim), in float64. */
const logsumexpRows = (a: Nd): Nd => {
  const m = reduce(a, [a.shape.length - 1], Math.max, -Infinity, true);
  const n = a.shape[a.shape.length - 1]!;
  return nd(
    m.shape,
    m.data.map((mv, r) => mv + Math.log(a.data.slice(r * n, (r + 1) * n).reduce((s, v) => s + Math.exp(v - mv), 0))),
  );
};

for (const device of testDevices()) {
  describe(`activations and losses on ${device}`, () => {
    test(`gelu's gradient is Φ(x) + x φ(x) to float32's precision, and its value at ±inf and NaN as x Φ(x) gives (${device})`, () => {
      // (the derivative of erf's polynomial, which the gradient once was, is off by up to 4.5e-7 near x = -1.5)
      const points = [-9, -5, -3, -2, -1.5, -1, -0.7, -0.3, -1e-3, 0, 1e-3, 0.3, 0.7, 1, 1.5, 2, 3, 5, 9];
      const t = new Tensor(points, { device, requiresGrad: true });
      t.gelu().sum().backward();
      const exact = points.map(
        (v) => 0.5 * (1 + erf(v / Math.SQRT2)) + (v * Math.exp((-v * v) / 2)) / Math.sqrt(2 * Math.PI),
      );
      assertClose(t.grad!.tolist() as number[], exact, { atol: 2e-7, rtol: 0, what: "gelu's gradient at points" });
      const special = new Tensor([Infinity, -Infinity, NaN, -0], { device }).gelu().tolist() as number[];
      assert.equal(special[0], Infinity);
      assert.ok(Number.isNaN(special[1]) && Number.isNaN(special[2]));
      assert.ok(Object.is(special[3], -0));
      // integers are taken as floats (the value's factors held as integers would truncate Φ to 0 or 1)
      const ints = new Tensor([-2, -1, 0, 1, 3], { device }).gelu();
      assert.equal(ints.dtype, Tensor.defaultFloat);
      assert.deepEqual(
        ints.tolist(),
        new Tensor([-2, -1, 0, 1, 3], { device, dtype: Tensor.defaultFloat }).gelu().tolist(),
      );
    });
    for (const [name, fn, ref, input] of unary) {
      test(name, () => checkOp(device, [input], fn, (a) => map(a, ref), { atol: 2e-5, rtol: 2e-4 }));
    }

    test("log1p and expm1 keep tiny arguments' digits (1 + x rounds in float32)", {
      skip: relaxedFloat(device) && "WGSL's relaxed float math on this device (docs/devices.md)",
    }, () => {
      const tiny = [1e-10, -3e-9, 1e-7, -2.5e-6, 4e-5];
      const t = new Tensor(tiny, { device });
      assertClose(values(t.log1p()), tiny.map(Math.log1p), { atol: 0, rtol: 1e-6, what: "log1p" });
      assertClose(values(t.expm1()), tiny.map(Math.expm1), { atol: 0, rtol: 1e-6, what: "expm1" });
      // the plain forms lose them: the tests above would fail on them
      assert.notEqual(values(t.add(1).log())[0], values(t.log1p())[0]);
    });

    test("softplus, logsigmoid and elu stay finite, with finite gradients, far from zero", () => {
      const t = new Tensor([-200, -30, 30, 200], { device, dtype: dtypes.float32, requiresGrad: true });
      const out = t.softplus().add(t.logsigmoid()).add(t.elu());
      out.sum().backward();
      assertClose(values(t.softplus()), [0, Math.log1p(Math.exp(-30)), 30, 200], { rtol: 1e-6, what: "softplus" });
      assertClose(values(t.logsigmoid()), [-200, -30, -Math.log1p(Math.exp(-30)), 0], {
        rtol: 1e-6,
        atol: 1e-12,
        what: "logsigmoid",
      });
      assert.ok(values(t.grad!).every(Number.isFinite), `gradients ${values(t.grad!)}`);
    });

    test("sigmoid, tanh and silu have finite gradients far below zero (exp(-x) overflowed: -0 * inf), and sigmoid'(0) is 1/4", {
      skip: relaxedFloat(device) && "WGSL's relaxed float math on this device (docs/devices.md)",
    }, () => {
      const x = [-200, -100, -50, 0, 3, 100];
      const sigma = (v: number) => 1 / (1 + Math.exp(-v));
      for (const [name, f, df] of [
        ["sigmoid", (t: Tensor) => t.sigmoid(), (v: number) => sigma(v) * (1 - sigma(v))],
        ["tanh", (t: Tensor) => t.tanh(), (v: number) => 1 - Math.tanh(v) ** 2],
        ["silu", (t: Tensor) => t.silu(), (v: number) => sigma(v) * (1 + v * (1 - sigma(v)))],
      ] as const) {
        const t = new Tensor(x, { device, dtype: dtypes.float32, requiresGrad: true });
        f(t).sum().backward();
        assertClose(values(t.grad!), x.map(df), { rtol: 1e-5, atol: 1e-30, what: `${name}'` });
      }
      assertClose(values(new Tensor(x, { device, dtype: dtypes.float32 }).sigmoid()), x.map(sigma), {
        rtol: 1e-5,
        atol: 1e-44,
        what: "sigmoid",
      });
    });

    test("logsumexp over an axis, over all, keepdim; large values do not overflow", () => {
      checkOp(device, [x], (t) => t.logsumexp({ axis: -1, keepdim: true }), logsumexpRows);
      checkOp(
        device,
        [x],
        (t) => t.logsumexp({ axis: 1 }),
        (a) => {
          const moved = nd(
            [2, 4, 3],
            [...Array(24).keys()].map((i) => a.data[Math.floor(i / 12) * 12 + (i % 3) * 4 + (Math.floor(i / 3) % 4)]!),
          );
          return nd([2, 4], logsumexpRows(moved).data);
        },
      );
      const all = new Tensor(
        [
          [1000, 1000],
          [999, -Infinity],
        ],
        { device },
      ).logsumexp();
      assert.deepEqual(all.shape, []);
      assertClose(values(all), [1000 + Math.log(2 + Math.exp(-1))], { rtol: 1e-6 });
      const rows = new Tensor(
        [
          [-Infinity, -Infinity],
          [0, Math.log(3)],
        ],
        { device },
      ).logsumexp({ axis: 1 });
      assertClose(values(rows), [-Infinity, Math.log(4)], { rtol: 1e-6 });
    });

    test("any and all, over an axis and over everything", () => {
      const t = new Tensor(
        [
          [0, 0, 0],
          [0, 2, 0],
          [1, -1, 3],
        ],
        { device },
      );
      assert.deepEqual(t.any({ axis: 1 }).tolist(), [false, true, true]);
      assert.deepEqual(t.all({ axis: 1 }).tolist(), [false, false, true]);
      assert.deepEqual(t.any({ axis: 0, keepdim: true }).tolist(), [[true, true, true]]);
      assert.equal(t.all().tolist(), false);
      assert.equal(t.any().tolist(), true);
      assert.equal(t.any().dtype, dtypes.bool);
      const b = new Tensor([true, true], { device, dtype: dtypes.bool });
      assert.equal(b.all().tolist(), true);
      assert.equal(b.logicalNot().any().tolist(), false);
    });

    test("repeat tiles each axis and adds leading ones, with the gradient summed over the copies", () => {
      const a = randomNd([2, 3], 31);
      checkOp(
        device,
        [a],
        (t) => t.repeat([2, 1, 2]),
        (v) => {
          const out: number[] = [];
          for (let r = 0; r < 2; r++)
            for (let i = 0; i < 2; i++) for (let c = 0; c < 2; c++) out.push(...v.data.slice(i * 3, i * 3 + 3));
          // [2][2][2][3] -> [2, 2, 6]: the two copies of a row side by side
          return nd([2, 2, 6], out);
        },
      );
      assert.deepEqual(new Tensor([1, 2], { device }).repeat([0]).shape, [0]);
      assert.throws(
        () => new Tensor([1, 2], { device }).reshape([1, 2]).repeat([2]),
        (e: Error) => e instanceof TsgradError && /repeat: \[2\] must give .* 2 axes of \[1, 2\]/.test(e.message),
      );
    });

    test("norm (L2 and L1, over an axis or all) with its gradient; linspace includes both ends", () => {
      checkOp(
        device,
        [x],
        (t) => t.norm({ axis: -1 }),
        (a) =>
          nd(
            [2, 3],
            [...Array(6).keys()].map((r) => Math.hypot(...a.data.slice(r * 4, r * 4 + 4))),
          ),
      );
      checkOp(
        device,
        [awayFromZero],
        (t) => t.norm({ ord: 1 }),
        (a) => nd([], [a.data.reduce((s, v) => s + Math.abs(v), 0)]),
      );
      assertClose(values(Tensor.linspace(-1, 2, 7, { device })), [-1, -0.5, 0, 0.5, 1, 1.5, 2]);
      assert.equal(values(Tensor.linspace(0, 0.3, 4, { device }))[3], Math.fround(0.3));
      assert.deepEqual(Tensor.linspace(5, 9, 1, { device }).tolist(), [5]);
      assert.throws(
        () => Tensor.linspace(0, 1, 2.5, { device }),
        /linspace: steps must be a non-negative integer, got 2.5/,
      );
      assert.throws(() => fromNd(x, device).norm({ ord: 3 as 2 }), /norm: ord must be 1 or 2, got 3/);
    });

    test("crossEntropy with class probabilities (and smoothing), and with integer labels", () => {
      const logits = randomNd([3, 4], 41, -2, 2);
      const probs = nd([3, 4], [0.1, 0.2, 0.3, 0.4, 1, 0, 0, 0, 0.25, 0.25, 0.25, 0.25]);
      const rowLoss = (l: Nd, p: Nd, smoothing = 0): number[] =>
        [0, 1, 2].map((r) => {
          const row = l.data.slice(r * 4, r * 4 + 4);
          const lse = Math.log(row.reduce((s, v) => s + Math.exp(v), 0));
          return -row.reduce((s, v, c) => s + (p.data[r * 4 + c]! * (1 - smoothing) + smoothing / 4) * (v - lse), 0);
        });
      const target = fromNd(probs, device);
      checkOp(
        device,
        [logits],
        (t) => t.crossEntropy(target),
        (l) => nd([], [rowLoss(l, probs).reduce((s, v) => s + v, 0) / 3]),
      );
      checkOp(
        device,
        [logits],
        (t) => t.crossEntropy(target, { labelSmoothing: 0.1, reduction: "none" }),
        (l) => nd([3], rowLoss(l, probs, 0.1)),
      );
      const labels = new Tensor([3, 0, 1], { device });
      const onehot = nd([3, 4], [0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0]);
      checkOp(
        device,
        [logits],
        (t) => t.crossEntropy(labels, { reduction: "sum" }),
        (l) => nd([], [rowLoss(l, onehot).reduce((s, v) => s + v, 0)]),
      );
      assert.throws(
        () => fromNd(logits, device).crossEntropy(Tensor.zeros([3, 5], { device })),
        /crossEntropy: class probabilities \[3, 5\] must have the logits' shape \[3, 4\]/,
      );
    });

    test("binary cross-entropy of probabilities and of logits (with a positive weight), and mse / l1", () => {
      const t = nd([2, 3], [1, 0, 1, 0.3, 0, 1]);
      const target = fromNd(t, device);
      const p = randomNd([2, 3], 51, 0.05, 0.95);
      const bce = (pv: number, tv: number): number => -(tv * Math.log(pv) + (1 - tv) * Math.log(1 - pv));
      checkOp(
        device,
        [p],
        (a) => a.binaryCrossentropy(target),
        (a) => nd([], [zip(a, t, bce).data.reduce((s, v) => s + v, 0) / 6]),
      );
      const logits = randomNd([2, 3], 52, -3, 3);
      checkOp(
        device,
        [logits],
        (a) => a.binaryCrossentropyLogits(target, { posWeight: 2.5, reduction: "none" }),
        (a) =>
          zip(a, t, (x, tv) => {
            const s = sigmoid(x);
            return -(2.5 * tv * Math.log(s) + (1 - tv) * Math.log(1 - s));
          }),
      );
      checkOp(
        device,
        [logits],
        (a) => a.binaryCrossentropyLogits(target, { reduction: "sum" }),
        (a) => nd([], [zip(a, t, (x, tv) => bce(sigmoid(x), tv)).data.reduce((s, v) => s + v, 0)]),
      );
      // saturated logits: finite loss where the probability form would take log(0)
      const far = new Tensor([100, -100], { device }).binaryCrossentropyLogits(new Tensor([0, 1], { device }), {
        reduction: "none",
      });
      assertClose(values(far), [100, 100], { rtol: 1e-6 });
      // probabilities of exactly 0 and 1: the logs are clamped at -100
      assertClose(
        values(
          new Tensor([0, 1], { device }).binaryCrossentropy(new Tensor([1, 0], { device }), { reduction: "none" }),
        ),
        [100, 100],
      );
      const y = randomNd([2, 3], 53);
      checkOp(
        device,
        [logits, y],
        (a, b) => a.mseLoss(b),
        (a, b) => nd([], [zip(a, b, (u, v) => (u - v) ** 2).data.reduce((s, v) => s + v, 0) / 6]),
      );
      checkOp(
        device,
        [logits, y],
        (a, b) => a.l1Loss(b, { reduction: "sum" }),
        (a, b) => nd([], [zip(a, b, (u, v) => Math.abs(u - v)).data.reduce((s, v) => s + v, 0)]),
      );
      assert.throws(
        () => fromNd(y, device).mseLoss(target, { reduction: "avg" as "mean" }),
        /loss reduction must be "none", "mean" or "sum", got "avg"/,
      );
    });
  });
}
