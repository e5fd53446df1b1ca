import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, dtypes } from "../../src/index.ts";
import { NO_64_BIT, has64BitKernels, testDevices } from "../devices.ts";
import { assertClose } from "../close.ts";
import { checkOp, values } from "./harness.ts";
import { type Nd, erf, map, randomNd, zip } from "./ref.ts";

const x = randomNd([2, 3, 4], 1, -2, 2);
const pos = randomNd([2, 3, 4], 2, 0.2, 3);
const awayFromZero = map(randomNd([2, 3, 4], 3, 0.3, 2), (v) => (v > 1.15 ? v : -v)); // |v| >= 0.3, both signs

const sigmoid = (v: number): number => 1 / (1 + Math.exp(-v));
const unary: [string, (t: Tensor) => Tensor, (v: number) => number, Nd][] = [
  ["neg", (t) => t.neg(), (v) => -v, x],
  ["exp", (t) => t.exp(), Math.exp, x],
  ["log", (t) => t.log(), Math.log, pos],
  ["exp2", (t) => t.exp2(), (v) => 2 ** v, x],
  ["log2", (t) => t.log2(), Math.log2, pos],
  ["sqrt", (t) => t.sqrt(), Math.sqrt, pos],
  ["rsqrt", (t) => t.rsqrt(), (v) => 1 / Math.sqrt(v), pos],
  ["sin", (t) => t.sin(), Math.sin, x],
  ["cos", (t) => t.cos(), Math.cos, x],
  ["tanh", (t) => t.tanh(), Math.tanh, x],
  ["sigmoid", (t) => t.sigmoid(), sigmoid, x],
  ["relu", (t) => t.relu(), (v) => Math.max(v, 0), awayFromZero],
  ["gelu (erf)", (t) => t.gelu(), (v) => 0.5 * v * (1 + erf(v / Math.SQRT2)), x],
  ["erf", (t) => t.erf(), erf, x],
  ["abs", (t) => t.abs(), Math.abs, awayFromZero],
  ["reciprocal", (t) => t.reciprocal(), (v) => 1 / v, awayFromZero],
  ["square", (t) => t.square(), (v) => v * v, x],
  ["pow 3", (t) => t.pow(3), (v) => v ** 3, x],
  ["pow 2.5", (t) => t.pow(2.5), (v) => v ** 2.5, pos],
  ["clip", (t) => t.clip(-0.5, 0.7), (v) => Math.min(0.7, Math.max(-0.5, v)), awayFromZero],
];

const a = randomNd([2, 3], 4, -2, 2);
const b = randomNd([3], 5, 0.5, 2);
const col = randomNd([2, 1], 6, -1, 1);
const binary: [string, (p: Tensor, q: Tensor) => Tensor, (p: number, q: number) => number, Nd, Nd][] = [
  ["add", (p, q) => p.add(q), (p, q) => p + q, a, b],
  ["sub", (p, q) => p.sub(q), (p, q) => p - q, a, col],
  ["mul", (p, q) => p.mul(q), (p, q) => p * q, col, b],
  ["div", (p, q) => p.div(q), (p, q) => p / q, a, b],
  ["maximum", (p, q) => p.maximum(q), Math.max, a, b],
  ["minimum", (p, q) => p.minimum(q), Math.min, a, b],
  ["pow (tensor exponent)", (p, q) => p.pow(q), (p, q) => p ** q, b, map(a, (v) => v / 2)],
];

for (const device of testDevices()) {
  describe(`elementwise on ${device}`, () => {
    for (const [name, fn, ref, input] of unary) {
      test("abs keeps bools and unsigned ints as they are", () => {
        assert.deepEqual(new Tensor([true, false], { device }).abs().tolist(), [true, false]);
        assert.equal(new Tensor([true, false], { device }).abs().dtype, dtypes.bool);
        assert.deepEqual(new Tensor([1, 200], { device, dtype: dtypes.uint8 }).abs().tolist(), [1, 200]);
        assert.deepEqual(new Tensor([-3, 2], { device, dtype: dtypes.int8 }).abs().tolist(), [3, 2]);
      });
      test("negative constants under a negation (x - (-1), min(x, -1)) render and compute", () => {
        assert.deepEqual(new Tensor([1.5, 2], { device }).sub(-1).tolist(), [2.5, 3]);
        assert.deepEqual(new Tensor([1.5, -2], { device }).minimum(-1).tolist(), [-1, -2]);
        assert.deepEqual(new Tensor([1, 2], { device }).sub(-1).tolist(), [2, 3]);
        assert.deepEqual(new Tensor([1.5, 2], { device, dtype: dtypes.float16 }).add(-1).neg().tolist(), [-0.5, -1]);
      });
      test(`${name} matches the reference and finite differences`, () =>
        checkOp(device, [input], fn, (i) => map(i, ref)));
    }
    for (const [name, fn, ref, p, q] of binary) {
      test(`${name} broadcasts ${JSON.stringify(p.shape)} with ${JSON.stringify(q.shape)}, values and gradients`, () =>
        checkOp(device, [p, q], fn, (i, j) => zip(i, j, ref)));
    }
    test("where selects and routes gradients to both branches", () => {
      const cond = new Tensor(
        [
          [true, false, true],
          [false, false, true],
        ],
        { device },
      );
      checkOp(
        device,
        [a, b],
        (p, q) => cond.where(p, q),
        (p, q) =>
          zip(p, q, (u, _v) => u).data.length
            ? {
                shape: [2, 3],
                data: [0, 1, 2, 3, 4, 5].map((i) =>
                  [true, false, true, false, false, true][i] ? p.data[i]! : q.data[i % 3]!,
                ),
              }
            : p,
      );
    });
    test("comparisons give bools", () => {
      const p = new Tensor([1, 2, 3], { device });
      assert.deepEqual(p.lt(2).tolist(), [true, false, false]);
      assert.deepEqual(p.le(2).tolist(), [true, true, false]);
      assert.deepEqual(p.gt(2).tolist(), [false, false, true]);
      assert.deepEqual(p.ge(2).tolist(), [false, true, true]);
      assert.deepEqual(p.eq(2).tolist(), [false, true, false]);
      assert.deepEqual(p.ne(2).tolist(), [true, false, true]);
      assert.equal(p.lt(2).dtype, dtypes.bool);
    });
    test("logical ops", () => {
      const p = new Tensor([true, true, false, false], { device });
      const q = new Tensor([true, false, true, false], { device });
      assert.deepEqual(p.logicalAnd(q).tolist(), [true, false, false, false]);
      assert.deepEqual(p.logicalOr(q).tolist(), [true, true, true, false]);
      assert.deepEqual(p.logicalNot().tolist(), [false, false, true, true]);
    });
    test("sign, trunc, floor, ceil", () => {
      const p = new Tensor([-2.5, -0.5, 0, 0.5, 2.5], { device });
      assert.deepEqual(p.sign().tolist(), [-1, -1, 0, 1, 1]);
      assert.deepEqual(p.trunc().tolist(), [-2, -0, 0, 0, 2]);
      assert.deepEqual(p.floor().tolist(), [-3, -1, 0, 0, 2]);
      assert.deepEqual(p.ceil().tolist(), [-2, -0, 0, 1, 3]);
    });
    test("integer arithmetic wraps like the dtype", () => {
      assert.deepEqual(new Tensor([100, -100], { device, dtype: "int8" }).mul(2).tolist(), [-56, 56]);
      assert.deepEqual(new Tensor([0xffffffff], { device, dtype: "uint32" }).add(1).tolist(), [0]);
      assert.deepEqual(new Tensor([7, -7], { device, dtype: "int32" }).idiv(2).tolist(), [3, -3]);
      assert.deepEqual(new Tensor([0x7fffffff], { device, dtype: "int32" }).add(1).tolist(), [-2147483648]);
      assert.deepEqual(new Tensor([6, 5], { device, dtype: "int32" }).bitwiseXor(3).tolist(), [5, 6]);
      assert.deepEqual(new Tensor([1], { device, dtype: "uint32" }).shl(31).shr(30).tolist(), [2]);
    });
    test("scalars take the tensor's dtype unless they need a float", () => {
      const i = new Tensor([1, 2, 3], { device });
      assert.equal(i.dtype, dtypes.int32);
      assert.equal(i.add(1).dtype, dtypes.int32);
      assert.equal(i.add(0.5).dtype, dtypes.float32);
      assert.deepEqual(i.add(0.5).tolist(), [1.5, 2.5, 3.5]);
      assert.equal(i.div(2).dtype, dtypes.float32);
      assert.equal(new Tensor([1], { device, dtype: "float16" }).mul(3).dtype, dtypes.float16);
    });
    test("float16 results round to nearest even", () => {
      // 1 + 2^-11 is halfway between float16 neighbours 1 and 1 + 2^-10: ties go to the even one (1)
      const t = new Tensor([1 + 2 ** -11, 1 + 3 * 2 ** -11, 65520, 1e-8], { device, dtype: "float32" }).cast("float16");
      assert.deepEqual(values(t), [1, 1 + 2 * 2 ** -10, Infinity, 0]);
      assert.deepEqual(values(new Tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8], { device }).cast("bfloat16")), [
        1,
        1 + 2 * 2 ** -7,
      ]);
    });
    test("bitcast reinterprets bits", () => {
      assert.deepEqual(
        new Tensor([1, -2], { device, dtype: "float32" }).bitcast("uint32").tolist(),
        [0x3f800000, 0xc0000000],
      );
      assert.deepEqual(new Tensor([0x3c00], { device, dtype: "uint16" }).bitcast("float16").tolist(), [1]);
    });
    test("casts truncate floats toward zero and saturate nothing", () => {
      assert.deepEqual(new Tensor([-1.7, 1.7, 300], { device }).cast("int32").tolist(), [-1, 1, 300]);
      assert.deepEqual(new Tensor([300], { device }).cast("uint8").tolist(), [44]);
      assert.deepEqual(new Tensor([0, 0.1, -2], { device }).cast("bool").tolist(), [false, true, true]);
    });
    test("int64 values round-trip", () => {
      const t = new Tensor(BigInt64Array.from([1n, -5n, 1n << 40n]), { device });
      assert.equal(t.dtype, dtypes.int64);
      if (!has64BitKernels(device)) return assert.throws(() => t.add(1).tolist(), NO_64_BIT);
      assert.deepEqual(t.add(1).tolist(), [2, -4, 2 ** 40 + 1]);
    });
    test("exp of large negative and log of zero follow IEEE", () => {
      assertClose(values(new Tensor([-200, 0], { device }).exp()), [0, 1]);
      assert.deepEqual(values(new Tensor([0], { device }).log()), [-Infinity]);
    });
  });
}
