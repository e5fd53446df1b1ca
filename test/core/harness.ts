// Shared checks for op tests: forward against the float64 reference, gradients against finite differences.
import assert from "node:assert/strict";
import { Tensor, dtypes } from "../../src/index.ts";
import { assertClose } from "../close.ts";
import { type Nd, randomNd } from "./ref.ts";

export const fromNd = (a: Nd, device: string): Tensor =>
  new Tensor(Float32Array.from(a.data), { device }).reshape(a.shape);

export function values(t: Tensor): number[] {
  return Array.from(t.toArray() as ArrayLike<number>, Number);
}

/** Forward against `ref`, then d(sum(out * w))/d(input) against central differences of the float64 reference. */
export function checkOp(
  device: string,
  inputs: Nd[],
  fn: (...xs: Tensor[]) => Tensor,
  ref: (...xs: Nd[]) => Nd,
  { grad = true, atol = 1e-5, rtol = 1e-4, gradAtol = 2e-3, gradRtol = 2e-3 } = {},
): void {
  const tensors = inputs.map((a) => fromNd(a, device));
  if (grad) tensors.forEach((t) => (t.requiresGrad = true));
  const out = fn(...tensors);
  const expected = ref(...inputs);
  assert.deepEqual(out.shape, expected.shape, "output shape");
  assertClose(values(out), expected.data, { atol, rtol, equalNan: true, what: "forward" });
  if (!grad) return;
  const weights = randomNd(expected.shape, 99);
  out.mul(fromNd(weights, device)).sum().backward();
  const refLoss = (xs: Nd[]): number => ref(...xs).data.reduce((s, v, i) => s + v * weights.data[i]!, 0);
  inputs.forEach((input, n) => {
    const h = 1e-6;
    const numeric = input.data.map((_, i) => {
      const bump = (d: number): Nd[] =>
        inputs.map((x, m) => (m === n ? { shape: x.shape, data: x.data.map((v, j) => (j === i ? v + d : v)) } : x));
      return (refLoss(bump(h)) - refLoss(bump(-h))) / (2 * h);
    });
    assert.ok(tensors[n]!.grad, `input ${n} got no gradient`);
    assertClose(values(tensors[n]!.grad!), numeric, {
      atol: gradAtol,
      rtol: gradRtol,
      equalNan: true,
      what: `gradient of input ${n}`,
    });
  });
}

export const f32 = dtypes.float32;
