// Op semantics at the edges (issue 36), each against what PyTorch and NumPy give, written beside it.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, TsgradError } from "../../src/index.ts";
import { NO_64_BIT, has64BitKernels, relaxedFloat, testDevices } from "../devices.ts";

for (const device of testDevices()) {
  describe(`reductions over an empty axis on ${device}`, () => {
    // computed (not a constant), so that the reduce reads a kernel's input rather than folding away
    const empty = (shape: number[]): Tensor => Tensor.rand(shape, { device });

    test("sum over an empty axis is 0", () => {
      // torch.rand(3, 0).sum(1) -> tensor([0., 0., 0.])
      assert.deepEqual(empty([3, 0]).sum({ axis: 1 }).tolist(), [0, 0, 0]);
      assert.deepEqual(empty([2, 0, 3]).exp().sum({ axis: 1 }).tolist(), [
        [0, 0, 0],
        [0, 0, 0],
      ]);
      // torch.rand(0).sum() -> tensor(0.)
      assert.equal(empty([0]).sum().item(), 0);
      assert.equal(empty([0, 4096]).sum({ axis: 0 }).sum().item(), 0);
    });

    test("prod over an empty axis is 1", () => {
      // torch.rand(3, 0).prod(1) -> tensor([1., 1., 1.])
      assert.deepEqual(empty([3, 0]).prod({ axis: 1 }).tolist(), [1, 1, 1]);
      assert.equal(empty([0]).prod().item(), 1);
    });

    test("prod multiplies the elements exactly", () => {
      // torch.tensor([[2., -3., 4.], [0.5, 5., -1.]]).prod(1) -> tensor([-24., -2.5])
      const x = new Tensor(
        [
          [2, -3, 4],
          [0.5, 5, -1],
        ],
        { device },
      );
      assert.deepEqual(x.prod({ axis: 1 }).tolist(), [-24, -2.5]);
      assert.deepEqual(x.prod({ axis: 0, keepdim: true }).tolist(), [[1, -15, -4]]);
      // torch.arange(1, 11).prod() -> tensor(3628800), an integer
      const ints = Tensor.arange(1, 11, 1, { device });
      assert.equal(ints.prod().item(), 3628800);
      assert.equal(ints.prod().dtype.name, "int32");
      // the product rule: d/dx_i prod(x) = prod of the others, zeros included
      const y = new Tensor([2, 0, 3, 5], { device, dtype: "float32", requiresGrad: true });
      y.prod().backward();
      assert.deepEqual(y.grad!.tolist(), [0, 30, 0, 0]);
    });

    test("mean over an empty axis is NaN", () => {
      // torch.rand(3, 0).mean(1) -> tensor([nan, nan, nan])
      assert.ok((empty([3, 0]).mean({ axis: 1 }).tolist() as number[]).every(Number.isNaN), "mean of nothing is NaN");
      assert.ok(Number.isNaN(empty([0]).mean().item()));
    });

    test("max and min over an empty axis are refused, naming the op and the axis", () => {
      // torch.rand(3, 0).max(1) -> IndexError: max(): Expected reduction dim 1 to have non-zero size
      for (const op of ["max", "min"] as const) {
        assert.throws(
          () => empty([3, 0])[op]({ axis: 1 }),
          (err: Error) =>
            err instanceof TsgradError && err.message.startsWith(`${op}(): axis 1 of [3, 0] has no elements`),
        );
      }
      assert.throws(
        () => empty([3, 0]).argmax({ axis: 1 }),
        (err: Error) => err instanceof TsgradError && err.message.startsWith("argmax(): axis 1 of [3, 0]"),
      );
      // over the other axis there is nothing to refuse: torch.rand(3, 0).max(0) -> an empty tensor
      assert.deepEqual(empty([3, 0]).max({ axis: 0 }).tolist(), []);
    });

    test("any over an empty axis is false and all is true", () => {
      // torch.rand(3, 0).any(1) -> tensor([False, False, False]); .all(1) -> tensor([True, True, True])
      assert.deepEqual(empty([3, 0]).any({ axis: 1 }).tolist(), [false, false, false]);
      assert.deepEqual(empty([3, 0]).all({ axis: 1 }).tolist(), [true, true, true]);
      assert.equal(empty([0]).any().tolist(), false);
      assert.equal(empty([0]).all().tolist(), true);
    });

    test("a matmul with inner size 0 is all zeros", () => {
      // torch.rand(64, 0) @ torch.rand(0, 64) -> torch.zeros(64, 64)
      const out = empty([64, 0]).matmul(empty([0, 64]));
      assert.deepEqual(out.shape, [64, 64]);
      assert.ok(Array.from(out.toArray() as Float32Array).every((v) => v === 0));
      assert.deepEqual(
        empty([2, 3, 0])
          .matmul(empty([2, 0, 2]))
          .tolist(),
        [
          [
            [0, 0],
            [0, 0],
            [0, 0],
          ],
          [
            [0, 0],
            [0, 0],
            [0, 0],
          ],
        ],
      );
      assert.equal(
        empty([128, 0])
          .cast("float16")
          .matmul(empty([0, 128]).cast("float16"))
          .sum()
          .item(),
        0,
      );
    });

    test("gradients through a sum over an empty axis", () => {
      // x = torch.rand(5, 0, requires_grad=True); w = torch.rand(5, requires_grad=True)
      // (x.sum(1) * w).sum().backward(): x.grad is [5, 0], w.grad is zeros (the sums are 0)
      const x = Tensor.rand([5, 0], { device, requiresGrad: true });
      const w = Tensor.rand([5], { device, requiresGrad: true });
      x.sum({ axis: 1 }).mul(w).sum().backward();
      assert.deepEqual(x.grad!.shape, [5, 0]);
      assert.deepEqual(w.grad!.tolist(), [0, 0, 0, 0, 0]);
      // a [1] broadcast to [0]: its gradient sums nothing, 0
      const b = Tensor.rand([1], { device, requiresGrad: true });
      b.expand([0]).sum().backward();
      assert.deepEqual(b.grad!.tolist(), [0]);
    });
  });
}

for (const device of testDevices()) {
  describe(`0-d tensors on ${device}`, () => {
    const scalar = (): Tensor => new Tensor(3.5, { device });

    test("reductions over axis 0 or -1 of a 0-d tensor give the tensor itself", () => {
      // torch.tensor(3.5).sum(0) -> tensor(3.5); np.sum(np.float32(3.5), axis=-1) -> 3.5
      for (const axis of [0, -1]) {
        for (const op of ["sum", "max", "min", "mean", "prod"] as const) {
          const out = scalar()[op]({ axis });
          assert.deepEqual(out.shape, [], `${op} over axis ${axis}`);
          assert.equal(out.item(), 3.5, `${op} over axis ${axis}`);
        }
        // torch.tensor(3.5).sum(0, keepdim=True) -> tensor(3.5), still 0-d
        assert.deepEqual(scalar().sum({ axis, keepdim: true }).shape, []);
        assert.equal(scalar().any({ axis }).tolist(), true);
        // torch.tensor(3.5).argmax(0) -> tensor(0)
        assert.equal(scalar().argmax({ axis }).item(), 0);
        assert.equal(scalar().softmax(axis).item(), 1);
      }
    });

    test("a 0-d tensor refuses axes other than 0 and -1", () => {
      // torch.tensor(3.5).sum(1) -> IndexError: Dimension out of range (expected to be in range of [-1, 0], but got 1)
      assert.throws(() => scalar().sum({ axis: 1 }), /axis 1 is out of range for a tensor of shape \[\]/);
      assert.throws(() => scalar().max({ axis: -2 }), TsgradError);
    });
  });
}

for (const device of testDevices()) {
  describe(`pow at the edges on ${device}`, () => {
    const f32 = (data: number[], requiresGrad = false): Tensor =>
      new Tensor(data, { device, dtype: "float32", requiresGrad });

    test("a negative base with a non-integer exponent is NaN", () => {
      // torch.tensor([-2., -0.5, 2.]) ** 0.5 -> tensor([nan, nan, 1.4142])
      const out = f32([-2, -0.5, 2]).pow(0.5).tolist() as number[];
      assert.ok(Number.isNaN(out[0]!) && Number.isNaN(out[1]!), `got ${out}`);
      assert.ok(Math.abs(out[2]! - Math.SQRT2) < 1e-6);
      // a whole exponent keeps the sign: torch.tensor([-2.]) ** torch.tensor([3., 2., -1.]) -> [-8., 4., -0.5]
      assert.deepEqual(
        f32([-2, -2, -2])
          .pow(f32([3, 2, -1]))
          .tolist(),
        [-8, 4, -0.5],
      );
    });

    test("0 ** 0 is 1, and anything ** 0 is 1", () => {
      // torch.tensor([0., 0., 0., nan, inf]) ** torch.tensor([0., 2., -1., 0., 0.]) -> [1., 0., inf, 1., 1.]
      assert.deepEqual(
        f32([0, 0, 0, Number.NaN, Infinity])
          .pow(f32([0, 2, -1, 0, 0]))
          .tolist(),
        [1, 0, Infinity, 1, 1],
      );
      assert.deepEqual(f32([0, -3, Number.NaN]).pow(0).tolist(), [1, 1, 1]);
      // torch.tensor(1.) ** nan -> 1.
      assert.equal(f32([1]).pow(Number.NaN).item(), 1);
    });

    test("pow(x, 0) backpropagates zeros", () => {
      // x = torch.tensor([0., 2., -1.], requires_grad=True); (x ** 0).sum().backward(); x.grad -> [0., 0., 0.]
      const x = f32([0, 2, -1], true);
      x.pow(0).sum().backward();
      assert.deepEqual(x.grad!.tolist(), [0, 0, 0]);
    });

    test("the gradient at base 0 is b * 0^(b-1): 1 for b = 1, 0 above, inf below", () => {
      // for b in [1., 1.5, 2., 3., 5., 0.5, -1.]: x = torch.zeros(1, requires_grad=True); (x ** b).backward()
      // -> 1, 0, 0, 0, 0, inf, -inf
      const expected: [number, number][] = [
        [1, 1],
        [1.5, 0],
        [2, 0],
        [3, 0],
        [5, 0],
        [0.5, Infinity],
        [-1, -Infinity],
      ];
      for (const [b, grad] of expected) {
        const x = f32([0], true);
        x.pow(b).sum().backward();
        assert.deepEqual(x.grad!.tolist(), [grad], `d/dx x^${b} at 0`);
      }
      // a tensor exponent too: torch.tensor([0., 0.]) ** torch.tensor([1., 2.5]) -> grads [1., 0.], exponent grads [0., 0.]
      const base = f32([0, 0], true);
      const exponent = f32([1, 2.5], true);
      base.pow(exponent).sum().backward();
      assert.deepEqual(base.grad!.tolist(), [1, 0]);
      assert.deepEqual(exponent.grad!.tolist(), [0, 0]);
    });
  });
}

for (const device of testDevices()) {
  describe(`gradients at kinks on ${device}`, () => {
    const gradOf = (op: (x: Tensor) => Tensor, data: number[]): number[] => {
      const x = new Tensor(data, { device, dtype: "float32", requiresGrad: true });
      op(x).sum().backward();
      return x.grad!.tolist() as number[];
    };

    test("relu's gradient at 0 is 0", () => {
      // x = torch.tensor([-1., 0., 2.], requires_grad=True); x.relu().sum().backward(); x.grad -> [0., 0., 1.]
      assert.deepEqual(
        gradOf((x) => x.relu(), [-1, 0, 2]),
        [0, 0, 1],
      );
    });

    test("relu keeps NaN and clamps -inf to 0", () => {
      // torch.tensor([nan, -inf, -0., inf]).relu() -> [nan, 0., 0., inf]
      const out = new Tensor([Number.NaN, -Infinity, -0, Infinity], { device, dtype: "float32" }).relu().tolist();
      assert.deepEqual(out, [Number.NaN, 0, 0, Infinity]);
    });

    test("sign's gradient is 0", () => {
      // x.sign().sum().backward() -> x.grad == [0., 0., 0.]
      assert.deepEqual(
        gradOf((x) => x.sign(), [-1, 0, 2]),
        [0, 0, 0],
      );
    });

    test("sign is -1, 0 or 1, and keeps bool and integer dtypes", () => {
      // torch.tensor([-inf, -2., -0., 0., 3., inf]).sign() -> [-1., -1., 0., 0., 1., 1.]; torch.sign(nan) -> 0.
      const out = new Tensor([-Infinity, -2, -0, 0, 3, Infinity, Number.NaN], { device, dtype: "float32" }).sign();
      assert.deepEqual(
        (out.tolist() as number[]).map((v) => v + 0),
        [-1, -1, 0, 0, 1, 1, 0],
      );
      assert.deepEqual(new Tensor([-3, 0, 2], { device }).sign().tolist(), [-1, 0, 1]);
      // torch.tensor([True, False]).sign() -> tensor([True, False])
      assert.deepEqual(new Tensor([true, false], { device }).sign().tolist(), [true, false]);
    });

    test("abs of -0 and +0 is +0", {
      skip: relaxedFloat(device) && "WGSL's relaxed float math on this device (docs/devices.md)",
    }, () => {
      // 1 / torch.tensor([-0., 0.]).abs() -> tensor([inf, inf])
      const out = new Tensor([-0, 0], { device, dtype: "float32" }).abs().reciprocal();
      assert.deepEqual(out.tolist(), [Infinity, Infinity]);
    });

    test("abs's gradient at 0 is 0", () => {
      // x.abs().sum().backward() -> x.grad == [-1., 0., 1.]
      assert.deepEqual(
        gradOf((x) => x.abs(), [-1, 0, 2]),
        [-1, 0, 1],
      );
    });
  });
}

for (const device of testDevices()) {
  describe(`round on ${device}`, () => {
    test("round takes halves to the even neighbour", () => {
      // torch.tensor([2.5, 3.5, -2.5, 0.5, -0.5, 1.5, -1.5]).round() -> [2., 4., -2., 0., -0., 2., -2.]
      const out = new Tensor([2.5, 3.5, -2.5, 0.5, -0.5, 1.5, -1.5], { device, dtype: "float32" }).round();
      assert.deepEqual(
        (out.tolist() as number[]).map((v) => v + 0),
        [2, 4, -2, 0, 0, 2, -2],
      );
    });

    test("round takes other values to the nearest integer, exactly", () => {
      // np.round(np.float32([0.49999997, 1.4, -1.6, 2.51, 16777215., 1e10])) -> [0., 1., -2., 3., 16777215., 1e10]
      const x = new Tensor([0.49999997, 1.4, -1.6, 2.51, 16777215, 1e10], { device, dtype: "float32" });
      assert.deepEqual(
        (x.round().tolist() as number[]).map((v) => v + 0),
        [0, 1, -2, 3, 16777215, 1e10],
      );
      // np.round([inf, -inf, nan]) -> [inf, -inf, nan]
      const special = new Tensor([Infinity, -Infinity, Number.NaN], { device, dtype: "float32" });
      assert.deepEqual(special.round().tolist(), [Infinity, -Infinity, Number.NaN]);
    });
  });
}

for (const device of testDevices()) {
  describe(`full's dtype on ${device}`, () => {
    test("an integer fill value gives int32, as arange does", () => {
      // torch.full((2,), 3).dtype -> torch.int64 (int32 here, the default integer of arange too)
      const t = Tensor.full([2], 3, { device });
      assert.equal(t.dtype.name, "int32");
      assert.deepEqual(t.tolist(), [3, 3]);
      assert.equal(Tensor.full([2], -7, { device }).dtype.name, Tensor.arange(3, undefined, 1, { device }).dtype.name);
    });

    test("a non-integer fill value gives the default float", () => {
      // torch.full((2,), 2.5).dtype -> torch.float32
      assert.equal(Tensor.full([2], 2.5, { device }).dtype.name, "float32");
      assert.equal(Tensor.full([2], Number.NaN, { device }).dtype.name, "float32");
      assert.equal(Tensor.full([2], Infinity, { device }).dtype.name, "float32");
    });

    test("a bool fill value gives bool", () => {
      // torch.full((2,), True) -> tensor([True, True])
      const t = Tensor.full([2], true, { device });
      assert.equal(t.dtype.name, "bool");
      assert.deepEqual(t.tolist(), [true, true]);
    });

    test("a given dtype wins, and zeros and ones stay float", () => {
      // torch.full((2,), 3, dtype=torch.float32) -> tensor([3., 3.]); torch.zeros(2).dtype -> torch.float32
      assert.equal(Tensor.full([2], 3, { device, dtype: "float32" }).dtype.name, "float32");
      assert.equal(Tensor.zeros([2], { device }).dtype.name, "float32");
      assert.equal(Tensor.ones([2], { device }).dtype.name, "float32");
      assert.equal(Tensor.ones([2], { device, dtype: "int32" }).dtype.name, "int32");
    });
  });
}

for (const device of testDevices()) {
  test(`int64 constants at -2^63 and 2^63 keep their sign in kernels on ${device}`, () => {
    if (!has64BitKernels(device)) {
      assert.throws(
        () =>
          Tensor.full([2], -(2 ** 63), { device, dtype: "int64" })
            .add(1)
            .tolist(),
        NO_64_BIT,
      );
      return;
    }
    // int64 min is exact; a double at 2^63 saturates to int64 max (read back as the double 2^63)
    const low = Tensor.full([2], -(2 ** 63), { device, dtype: "int64" }).add(
      new Tensor([0, 1], { device, dtype: "int64" }),
    );
    const high = Tensor.full([2], 2 ** 63, { device, dtype: "int64" }).add(
      new Tensor([0, -1], { device, dtype: "int64" }),
    );
    assert.deepEqual(low.tolist(), [-(2 ** 63), -(2 ** 63)]);
    assert.deepEqual(high.tolist(), [2 ** 63, 2 ** 63]);
  });
}

for (const device of testDevices()) {
  test(`a gradient through a reshape of an empty tensor is zero, not an endless index recursion, on ${device}`, () => {
    // property-test seeds 336, 373, 389: a 0 in the reshaped shape made index arithmetic divide by a 0 stride
    const x = new Tensor(
      Array.from({ length: 15 }, (_, i) => i / 7 - 1),
      { device },
    ).reshape([3, 5]);
    x.requiresGrad = true;
    const out = x
      .pad([
        [2, 2],
        [1, 0],
      ])
      .shrink([
        [2, 7],
        [2, 2],
      ])
      .reshape([5, 0, 1])
      .mean({ axis: 0 });
    assert.deepEqual(out.shape, [0, 1]);
    out.sum().backward();
    assert.deepEqual(Array.from(x.grad!.toArray() as Float32Array), new Array(15).fill(0));
  });
}

for (const device of testDevices()) {
  test(`tanh keeps float32's relative precision near 0 and a finite gradient at ±inf on ${device}`, () => {
    // 2σ(2x) − 1 cancels near 0: 2.6e-4 relative error at small x before the polynomial
    const xs = [1e-6, -1e-4, 0.01, 0.3, -0.6249, 0.625, 0.7, 3, -20];
    const x = new Tensor(xs, { device });
    x.requiresGrad = true;
    const y = x.tanh();
    y.sum().backward();
    const values = y.toArray() as Float32Array;
    xs.forEach((v, i) =>
      assert.ok(Math.abs(values[i]! / Math.tanh(v) - 1) < 3e-7, `tanh(${v}) = ${values[i]} vs ${Math.tanh(v)}`),
    );
    const inf = new Tensor([Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY], { device });
    inf.requiresGrad = true;
    const yi = inf.tanh();
    yi.sum().backward();
    assert.deepEqual(Array.from(yi.toArray() as Float32Array), [1, -1]);
    assert.deepEqual(Array.from(inf.grad!.toArray() as Float32Array), [0, 0]);
  });
}
