// Op semantics the PyTorch conformance suite (test/conformance) found different from PyTorch, each fixed, with
// PyTorch's value beside it.
import { describe, test } from "node:test";
import { Tensor } from "../../src/index.ts";
import { assertClose } from "../close.ts";
import { testDevices } from "../devices.ts";

/** d(sum(f(x)))/dx at the given float32 points. */
function gradientOf(f: (x: Tensor) => Tensor, points: number[], device: string): number[] {
  const x = new Tensor(points, { device, dtype: "float32", requiresGrad: true });
  f(x).sum().backward();
  return x.grad!.tolist() as number[];
}

for (const device of testDevices()) {
  describe(`trigonometry at large arguments on ${device}`, () => {
    // float32 values, so that the float64 Math.cos of each is the exact answer PyTorch rounds
    const large = [1e4, -1e4, 12345.678, 314159.25, 1e6, -1e6, 3e6].map(Math.fround);

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
}
