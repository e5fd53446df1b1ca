// Products whose output width 16 does not divide, on host backends: the operand along the width is packed in
// 16-wide panels (the last one padded with zeros), and the register tile takes the panel's 16 lanes, its last
// tile narrower. Each product is checked against a plain triple loop, in every layout the matmul bench uses.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, UOp } from "../../src/index.ts";
import { createSchedule } from "../../src/engine/schedule.ts";
import { backendOf } from "../../src/engine/backend.ts";
import { renderC } from "../../src/renderer/c.ts";
import type { KernelIR, Stmt } from "../../src/codegen/ir.ts";
import { testDevices } from "../devices.ts";

/** How the operands are stored: "nt" keeps b as [n, k] (a linear layer's weight), "tn" keeps a as [k, m]. */
type Layout = "nn" | "nt" | "tn";

interface Product {
  readonly batch: number;
  readonly m: number;
  readonly k: number;
  readonly n: number;
  readonly layout: Layout;
}

/** Deterministic values in [-1, 1). */
function values(count: number, seed: number): Float32Array {
  let state = seed >>> 0;
  return Float32Array.from({ length: count }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 31 - 1;
  });
}

/** The shapes a and b are stored in. */
function storedShapes({ batch, m, k, n, layout }: Product): [number[], number[]] {
  const dims = (rows: number, cols: number) => (batch > 1 ? [batch, rows, cols] : [rows, cols]);
  return [layout === "tn" ? dims(k, m) : dims(m, k), layout === "nt" ? dims(n, k) : dims(k, n)];
}

/** a @ b as the bench builds it from the stored operands, transposed back where the layout keeps them transposed. */
const product = (layout: Layout, x: Tensor, w: Tensor): Tensor =>
  (layout === "tn" ? x.transpose(-1, -2) : x).matmul(layout === "nt" ? w.transpose(-1, -2) : w);

/** The reference: each output a sum over k in float64, with the sum of |terms| to bound float32's rounding. */
function tripleLoop({ batch, m, k, n, layout }: Product, a: Float32Array, b: Float32Array) {
  const at = (p: number, i: number, r: number) => p * m * k + (layout === "tn" ? r * m + i : i * k + r);
  const bt = (p: number, r: number, j: number) => p * k * n + (layout === "nt" ? j * k + r : r * n + j);
  const sums = new Float64Array(batch * m * n);
  const magnitudes = new Float64Array(batch * m * n);
  for (let p = 0; p < batch; p++)
    for (let i = 0; i < m; i++)
      for (let j = 0; j < n; j++) {
        let [sum, magnitude] = [0, 0];
        for (let r = 0; r < k; r++) {
          const term = a[at(p, i, r)]! * b[bt(p, r, j)]!;
          sum += term;
          magnitude += Math.abs(term);
        }
        sums[(p * m + i) * n + j] = sum;
        magnitudes[(p * m + i) * n + j] = magnitude;
      }
  return { sums, magnitudes };
}

/** The kernels that would compute `t` (the product last, after any packed copies of its operands). */
function kernelsFor(t: Tensor): KernelIR[] {
  assert.ok(t.node instanceof UOp);
  return createSchedule([t.node]).items.flatMap((item) => (item.kind === "kernel" ? [item.kernel] : []));
}

/** Stores in a block, nested ones included: one per output a tile computes. */
const stores = (body: readonly Stmt[]): number =>
  body.reduce((n, s) => n + (s.kind === "store" ? 1 : s.kind === "loop" ? stores(s.body) : 0), 0);

const label = (p: Product): string => `${p.batch > 1 ? `${p.batch}x` : ""}${p.m}x${p.k}x${p.n} ${p.layout}`;

// m and k odd (and at least 32, so the width's operand is packed); widths from a thousand to one
const products: Product[] = [
  ...[1000, 1001, 17, 9, 1].map((n) => ({ batch: 1, m: 45, k: 33, n, layout: "nn" as const })),
  ...(["nt", "tn"] as const).flatMap((layout) => [1001, 17].map((n) => ({ batch: 1, m: 45, k: 33, n, layout }))),
  ...(["nn", "nt", "tn"] as const).map((layout) => ({ batch: 3, m: 37, k: 35, n: 1001, layout })),
];

/** Computes `p` on `device` and checks every output against the triple loop. */
function checkProduct(p: Product, device: string): void {
  const a = values(p.batch * p.m * p.k, p.n);
  const b = values(p.batch * p.k * p.n, p.n + 1);
  const [aShape, bShape] = storedShapes(p);
  const x = new Tensor(a, { device }).reshape(aShape);
  const w = new Tensor(b, { device }).reshape(bShape);
  const out = product(p.layout, x, w).toArray() as Float32Array;
  const { sums, magnitudes } = tripleLoop(p, a, b);
  assert.equal(out.length, sums.length);
  for (let e = 0; e < sums.length; e++) {
    // float32's rounding of k products and k - 1 additions, at most k units of 2^-24 of the magnitude
    if (Math.abs(out[e]! - sums[e]!) > p.k * 2 ** -24 * magnitudes[e]!)
      assert.fail(`${label(p)}: element ${e} is ${out[e]}, not ${sums[e]}`);
  }
}

for (const device of testDevices().filter((d) => backendOf(d).hostForms)) {
  for (const p of products) test(`${device}: ${label(p)} matches a triple loop`, () => checkProduct(p, device));

  test(`${device}: a last tile of every width from 1 to 15 lanes matches a triple loop`, () => {
    for (let n = 17; n < 32; n++) {
      const p: Product = { batch: 1, m: 33, k: 35, n, layout: "nn" };
      const [x, w] = storedShapes(p).map((shape) => Tensor.empty(shape, { device }));
      assert.match(kernelsFor(product(p.layout, x!, w!)).at(-1)!.opts, /^u1x16,/, label(p));
      checkProduct(p, device);
    }
  });
}

test("a product over 1000 outputs (16-wide panels) takes 16 lanes by 8 rows, the last tile 8 wide", {
  skip: !testDevices().includes("CPU"),
}, () => {
  for (const layout of ["nn", "nt", "tn"] as const) {
    const p: Product = { batch: 1, m: 1024, k: 768, n: 1000, layout };
    const [x, w] = storedShapes(p).map((shape) => Tensor.empty(shape, { device: "CPU" }));
    const kernels = kernelsFor(product(layout, x!, w!));
    // the width's operand packed in 63 panels of 16, the last one padded
    assert.ok(
      kernels.some((kernel) => kernel.name === "E_63_768_16"),
      kernels.map((kernel) => kernel.name).join(" "),
    );
    const gemm = kernels.at(-1)!;
    assert.match(gemm.opts, /^u1x16,0x8\|/, `${layout}: ${gemm.opts}`);
    // two loop nests: 62 tiles of 16 x 8 outputs across the width, then one of 8 x 8
    const nests = gemm.body.filter((s) => s.kind === "loop");
    assert.deepEqual(
      nests.map((nest) => stores([nest])),
      [16 * 8, 8 * 8],
    );
    // each row of a tile one vector multiply-add a step: 16 lanes wide in the full tiles, 8 in the last
    const code = renderC(gemm, "k", { vectorLanes: [16, 8] });
    assert.equal(code.match(/tg_fma16\(/g)?.length, 8, code);
    assert.equal(code.match(/tg_fma8\(/g)?.length, 8, code);
  }
});

test("a product over 1000 outputs read in place (too few rows to pack) keeps 8 lanes, which divide it", {
  skip: !testDevices().includes("CPU"),
}, () => {
  const x = Tensor.empty([16, 768], { device: "CPU" });
  const w = Tensor.empty([768, 1000], { device: "CPU" });
  const kernels = kernelsFor(x.matmul(w));
  assert.equal(kernels.length, 1, kernels.map((kernel) => kernel.name).join(" "));
  assert.match(kernels[0]!.opts, /^u1x8\b/, kernels[0]!.opts);
});
