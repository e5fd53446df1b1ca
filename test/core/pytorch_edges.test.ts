// Op semantics the PyTorch conformance suite (test/conformance) found different from PyTorch, each fixed, with
// PyTorch's value beside it.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { Tensor } from "../../src/index.ts";
import { assertClose } from "../close.ts";
import { NO_64_BIT, accurateTrigRange, has64BitKernels, relaxedFloat, testDevices } from "../devices.ts";

/** d(sum(f(x)))/dx at the given float32 points. */
function gradientOf(f: (x: Tensor) => Tensor, points: number[], device: string): number[] {
  const x = new Tensor(points, { device, dtype: "float32", requiresGrad: true });
  f(x).sum().backward();
  return x.grad!.tolist() as number[];
}

for (const device of testDevices()) {
  describe(`trigonometry at large arguments on ${device}`, () => {
    // float32 values, so that the float64 Math.cos of each is the exact answer PyTorch rounds
    const large = [1e4, -1e4, 12345.678, 314159.25, 1e6, -1e6, 3e6]
      .map(Math.fround)
      .filter((x) => Math.abs(x) <= accurateTrigRange(device));

    test("cos stays accurate where x + π/2 rounds", () => {
      // torch.cos(torch.tensor(1e6)) -> tensor(0.9368); sin(1e6 + π/2) in float32 is 0.9338 (the sum rounds to 1e6 + 1.5625)
      const cos = new Tensor(large, { device }).cos().tolist() as number[];
      assertClose(cos, large.map(Math.cos), { atol: 1e-6, rtol: 0 });
    });

    test("sin's gradient is an accurate cos there too", () => {
      assertClose(
        gradientOf((x) => x.sin(), large, device),
        large.map(Math.cos),
        { atol: 1e-6, rtol: 0 },
      );
      assertClose(
        gradientOf((x) => x.cos(), large, device),
        large.map((v) => -Math.sin(v)),
        { atol: 1e-6, rtol: 0 },
      );
    });
  });

  describe(`gradients at clip's bounds on ${device}`, () => {
    test("clip's gradient is 1 at a bound and 0 beyond it", () => {
      // x = torch.tensor([-2., -1., 0., 1., 2.], requires_grad=True); x.clamp(-1, 1).sum().backward()
      // x.grad -> tensor([0., 1., 1., 1., 0.])
      assert.deepEqual(
        gradientOf((x) => x.clip(-1, 1), [-2, -1, 0, 1, 2], device),
        [0, 1, 1, 1, 0],
      );
    });

    test("clip keeps NaN, and gives max everywhere when min > max", () => {
      // torch.tensor([nan, 0., 5.]).clamp(-1, 1) -> tensor([nan, 0., 1.]); .clamp(2, 1) -> tensor([nan, 1., 1.])
      const x = new Tensor([Number.NaN, 0, 5], { device });
      assert.deepEqual(x.clip(-1, 1).tolist(), [Number.NaN, 0, 1]);
      assert.deepEqual(x.clip(2, 1).tolist(), [Number.NaN, 1, 1]);
    });

    test("hardtanh's and relu6's gradients are 0 at their bounds", () => {
      // F.hardtanh(x, -1, 1) on [-2, -1, 0, 1, 2]: x.grad -> tensor([0., 0., 1., 0., 0.])
      assert.deepEqual(
        gradientOf((x) => x.hardtanh(), [-2, -1, 0, 1, 2], device),
        [0, 0, 1, 0, 0],
      );
      // F.relu6 on [-1, 0, 3, 6, 7]: x.grad -> tensor([0., 0., 1., 0., 0.])
      assert.deepEqual(
        gradientOf((x) => x.relu6(), [-1, 0, 3, 6, 7], device),
        [0, 0, 1, 0, 0],
      );
    });
  });

  describe(`gradients at zero spread on ${device}`, () => {
    test("std's gradient is 0 where every element is equal", () => {
      // x = torch.tensor([[1.5, 1.5, 1.5], [1., 2., 3.]], requires_grad=True); x.std(1).sum().backward()
      // x.grad -> tensor([[0., 0., 0.], [-0.5, 0., 0.5]])
      const x = new Tensor(
        [
          [1.5, 1.5, 1.5],
          [1, 2, 3],
        ],
        { device, requiresGrad: true },
      );
      x.std({ axis: 1 }).sum().backward();
      assertClose(x.grad!.tolist() as number[][], [
        [0, 0, 0],
        [-0.5, 0, 0.5],
      ]);
      // and the value is still the square root of the variance: torch.zeros(3).std() -> tensor(0.)
      assert.equal(Tensor.zeros([3], { device }).std().item(), 0);
    });

    test("the L2 norm's gradient is 0 at a zero vector", () => {
      // x = torch.zeros(3, requires_grad=True); x.norm().backward(); x.grad -> tensor([0., 0., 0.])
      assert.deepEqual(
        gradientOf((x) => x.norm(), [0, 0, 0], device),
        [0, 0, 0],
      );
      assertClose(
        gradientOf((x) => x.norm(), [3, 4], device),
        [0.6, 0.8],
      );
    });
  });

  test(`le and ge are false where an operand is NaN on ${device}`, () => {
    // a = torch.tensor([nan, 1., nan, 2.]); b = torch.tensor([nan, nan, 1., 2.])
    // a <= b -> tensor([False, False, False, True]); a >= b -> the same
    const a = new Tensor([Number.NaN, 1, Number.NaN, 2], { device });
    const b = new Tensor([Number.NaN, Number.NaN, 1, 2], { device });
    assert.deepEqual(a.le(b).tolist(), [false, false, false, true]);
    assert.deepEqual(a.ge(b).tolist(), [false, false, false, true]);
    assert.deepEqual(a.le(Number.NaN).tolist(), [false, false, false, false]);
    // integers compare as before: torch.tensor([1, 2, 3]) >= 2 -> tensor([False, True, True])
    assert.deepEqual(new Tensor([1, 2, 3], { device }).ge(2).tolist(), [false, true, true]);
  });

  test(`trunc, floor, ceil and round backpropagate zeros on ${device}`, () => {
    // x = torch.tensor([-1.5, 0.2, 2.5], requires_grad=True); x.floor().sum().backward(); x.grad -> tensor([0., 0., 0.])
    for (const op of ["trunc", "floor", "ceil", "round"] as const)
      assert.deepEqual(
        gradientOf((x) => x[op](), [-1.5, 0.2, 2.5], device),
        [0, 0, 0],
        op,
      );
    // beside another path, only that one counts: d/dx (x + floor(x)) = 1
    assert.deepEqual(
      gradientOf((x) => x.add(x.floor()), [-1.5, 0.2], device),
      [1, 1],
    );
  });

  test(`erf's gradient is 2/√π exp(-x²), at 0 too, on ${device}`, () => {
    // x = torch.tensor([0., 0.5, -2.], requires_grad=True); torch.erf(x).sum().backward()
    // x.grad -> tensor([1.1284, 0.8788, 0.0207])
    const points = [0, 0.5, -2];
    assertClose(
      gradientOf((x) => x.erf(), points, device),
      points.map((v) => (2 / Math.sqrt(Math.PI)) * Math.exp(-v * v)),
      { atol: 1e-6, rtol: 1e-6 },
    );
  });

  describe(`erfinv at its bounds on ${device}`, () => {
    test("erfinv is ±inf at ±1 and NaN beyond", () => {
      // torch.erfinv(torch.tensor([-1., 1., 1.5, 0.])) -> tensor([-inf, inf, nan, 0.])
      const y = new Tensor([-1, 1, 1.5, 0], { device }).erfinv().tolist();
      assert.deepEqual(y, [-Infinity, Infinity, Number.NaN, 0]);
    });

    test("erfinv's gradient is √π/2 exp(erfinv(x)²): √π/2 at 0, inf at ±1", () => {
      // x = torch.tensor([0., 0.5, -1., 1.], requires_grad=True); torch.erfinv(x).sum().backward()
      // x.grad -> tensor([0.8862, 1.1126, inf, inf])
      const grad = gradientOf((x) => x.erfinv(), [0, 0.5, -1, 1], device);
      assertClose(grad, [Math.sqrt(Math.PI) / 2, 1.1126, Infinity, Infinity], { atol: 1e-4, rtol: 1e-4 });
    });
  });

  describe(`log1p at its pole and at inf on ${device}`, () => {
    test("log1p is -inf at -1, inf at inf and NaN below -1", () => {
      // torch.log1p(torch.tensor([-1., float('inf'), -2., 1e-10])) -> tensor([-inf, inf, nan, 1.0000e-10])
      const y = new Tensor([-1, Infinity, -2, 1e-10], { device }).log1p().tolist() as number[];
      assert.deepEqual(y.slice(0, 3), [-Infinity, Infinity, Number.NaN]);
      // (a compiler that reassociates (1 + x) - 1 into x loses the tiny argument's digits)
      if (!relaxedFloat(device)) assertClose(y[3]!, 1e-10, { atol: 0, rtol: 1e-6 });
    });

    test("log1p's gradient is 1 / (1 + x): inf at -1, 0 at inf", () => {
      // x = torch.tensor([-1., 0., 1e-10, 3., float('inf')], requires_grad=True); torch.log1p(x).sum().backward()
      // x.grad -> tensor([inf, 1., 1., 0.25, 0.])
      assert.deepEqual(
        gradientOf((x) => x.log1p(), [-1, 0, 1e-10, 3, Infinity], device),
        [Infinity, 1, 1, 0.25, 0],
      );
    });
  });

  test(`softplus's gradient at 0 is 1/2, and logsigmoid's too, on ${device}`, () => {
    // x = torch.tensor([0., 2.], requires_grad=True); F.softplus(x).sum().backward(); x.grad -> tensor([0.5, 0.8808])
    assertClose(
      gradientOf((x) => x.softplus(), [0, 2], device),
      [0.5, 1 / (1 + Math.exp(-2))],
    );
    // F.logsigmoid at 0: 1 - sigmoid(0) = 0.5; F.binary_cross_entropy_with_logits at logit 0, target 0.5: 0
    assertClose(
      gradientOf((x) => x.logsigmoid(), [0], device),
      [0.5],
    );
    assertClose(
      gradientOf((x) => x.binaryCrossentropyLogits(new Tensor([0.5], { device })), [0], device),
      [0],
    );
  });

  test(`elu's gradient at 0 is alpha, and selu's alpha times its scale, on ${device}`, () => {
    // x = torch.tensor([0., -1., 1.], requires_grad=True); F.elu(x, 0.5).sum().backward()
    // x.grad -> tensor([0.5000, 0.1839, 1.0000])
    assertClose(
      gradientOf((x) => x.elu(0.5), [0, -1, 1], device),
      [0.5, 0.5 * Math.exp(-1), 1],
    );
    // F.selu at 0: 1.0507 * 1.6733 = 1.7581
    assertClose(
      gradientOf((x) => x.selu(), [0], device),
      [1.0507009873554805 * 1.6732632423543772],
    );
  });

  test(`cumsum and cummax of a 0-d tensor along axis 0 or -1 give the tensor on ${device}`, () => {
    // torch.tensor(2.5).cumsum(0) -> tensor(2.5000); torch.cummax(torch.tensor(2.5), -1).values -> tensor(2.5000)
    const x = new Tensor(2.5, { device });
    assert.equal(x.cumsum(0).item(), 2.5);
    assert.deepEqual(x.cumsum(0).shape, []);
    assert.equal(x.cummax(-1).item(), 2.5);
    assert.throws(() => x.cumsum(1), /cumsum/);
  });

  test(`exp of 16-bit floats is exp rounded once on ${device}`, () => {
    // torch.exp(torch.tensor([10., -3.5, 0.25]).half().float()).half() -> [22032., 0.030197, 1.2842] (CPU PyTorch
    // has no float16 exp; CUDA's rounds once too). Scaling by log2(e) rounded to float16 gave 21984 for exp(10).
    const y = new Tensor([10, -3.5, 0.25], { device, dtype: "float16" }).exp();
    assert.equal(y.dtype.name, "float16");
    assert.deepEqual(y.tolist(), [22032, 0.0301971435546875, 1.2841796875]);
    // torch.exp(torch.tensor([10.], dtype=torch.bfloat16)) -> tensor([22016.], dtype=torch.bfloat16)
    assert.deepEqual(new Tensor([10], { device, dtype: "bfloat16" }).exp().tolist(), [22016]);
  });

  test(`integers to integer powers stay exact integers on ${device}`, () => {
    // a = torch.tensor([3, -2, 7, 0, 46340], dtype=torch.int32); b = torch.tensor([5, 3, 2, 0, 2], dtype=torch.int32)
    // a ** b -> tensor([243, -8, 49, 1, 2147395600], dtype=torch.int32)
    const a = new Tensor([3, -2, 7, 0, 46340], { device });
    const y = a.pow(new Tensor([5, 3, 2, 0, 2], { device }));
    if (!has64BitKernels(device)) {
      // computed in float64, exact where float32 is not: refused where kernels have no 64-bit types
      assert.throws(() => y.tolist(), NO_64_BIT);
      assert.deepEqual(new Tensor([4], { device }).pow(0.5).tolist(), [2]);
      return;
    }
    assert.equal(y.dtype.name, "int32");
    assert.deepEqual(y.tolist(), [243, -8, 49, 1, 2147395600]);
    // torch.tensor([3, -2], dtype=torch.int32) ** 5 -> tensor([243, -32], dtype=torch.int32)
    const z = new Tensor([3, -2], { device }).pow(5);
    assert.equal(z.dtype.name, "int32");
    assert.deepEqual(z.tolist(), [243, -32]);
    // a float exponent still makes a float: torch.tensor([4]) ** 0.5 -> tensor([2.])
    assert.deepEqual(new Tensor([4], { device }).pow(0.5).tolist(), [2]);
  });
}
