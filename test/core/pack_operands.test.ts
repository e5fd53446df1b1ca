// Host backends read a matmul's operands from packed copies (panels [n/16, k, 16] for the tile's vector lanes,
// [m/8, k, 8] for its rows), for that product only, where reading them in place walks memory badly: the
// lanes (a row of the operand a step, or 16 rows at once; padded where 16 does not divide them), rows read
// across the sum. And a matmul before a heavy epilogue is stored first.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type Buffer, Tensor, type UOp } from "../../src/index.ts";
import type { Stmt } from "../../src/codegen/ir.ts";
import { coefficientOf } from "../../src/shape/symbolic.ts";
import { jsBackend } from "../../src/backends.ts";
import { registerBackend } from "../../src/engine/backend.ts";
import { type ExecItem, createSchedule, storedBuffer } from "../../src/engine/schedule.ts";
import { assertClose } from "../close.ts";
import { values } from "./harness.ts";

const device = "JS";
function input(shape: number[], seed: number, requiresGrad = false, on = device): Tensor {
  const t = new Tensor(
    Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(i * 0.37 + seed)),
    { device: on },
  )
    .reshape(shape)
    .realize();
  t.requiresGrad = requiresGrad;
  return t;
}

type Kernel = Extract<ExecItem, { kind: "kernel" }>;
const kernels = (...ts: Tensor[]): Kernel[] =>
  createSchedule(ts.map((t) => t.node as UOp)).items.flatMap((item) => (item.kind === "kernel" ? [item] : []));
const bufferOf = (t: Tensor) => storedBuffer(t.node as UOp)!;
const shapeOf = (k: Kernel): string => k.kernel.outputShape.join("x");

/** How far `kernel`'s loads of `buffer` step per step of its sum loops (one entry per distinct step). */
function sumSteps(kernel: Kernel, buffer: Buffer): number[] {
  const slot = kernel.buffers.indexOf(buffer);
  const steps = new Set<number>();
  const visit = (stmts: readonly Stmt[], sums: readonly string[]): void => {
    for (const s of stmts) {
      if (s.kind === "loop") visit(s.body, s.var.startsWith("r") ? [...sums, s.var] : sums);
      else if (s.kind === "def" && s.expr.op === "LOAD" && s.expr.buf === slot)
        for (const r of sums) steps.add(coefficientOf(s.expr.index, r)!);
    }
  };
  visit(kernel.kernel.body, []);
  return [...steps];
}

/** a @ b in float64: a [m, k] (or its transpose stored [k, m]), b [k, n] (or [n, k]). */
function reference(a: Tensor, b: Tensor, { aT = false, bT = false } = {}): number[] {
  const [as, bs] = [values(a), values(b)];
  const m = aT ? a.shape[1]! : a.shape[0]!;
  const k = aT ? a.shape[0]! : a.shape[1]!;
  const n = bT ? b.shape[0]! : b.shape[1]!;
  return Array.from({ length: m * n }, (_, e) => {
    const [i, j] = [Math.floor(e / n), e % n];
    let sum = 0;
    for (let t = 0; t < k; t++) sum += as[aT ? t * m + i : i * k + t]! * bs[bT ? j * k + t : t * n + j]!;
    return sum;
  });
}

test("x @ W reads W as [n/16, k, 16] panels: one sequential stream, not a row of W a step; x stays in place", () => {
  const [x, w] = [input([64, 96], 1), input([96, 48], 2)];
  const y = x.matmul(w);
  const items = kernels(y);
  assert.deepEqual(items.map(shapeOf), ["3x96x16", "64x48"]);
  const [panel, product] = items as [Kernel, Kernel];
  assert.ok(panel.buffers.includes(bufferOf(w)));
  assert.ok(
    product.buffers.includes(panel.buffers[0]!) &&
      !product.buffers.includes(bufferOf(w)) &&
      product.buffers.includes(bufferOf(x)),
  );
  // each step of the sum reads the next 16 lanes of the panel
  assert.deepEqual(sumSteps(product, panel.buffers[0]!), [16]);
  assertClose(values(y), reference(x, w), { atol: 1e-3, rtol: 1e-5, what: "x @ W" });
});

test("x @ W^T reads W^T as panels: one stream, not 16 rows of W at once (which alias in L1 when 2 KB apart)", () => {
  const [x, w] = [input([64, 512], 1), input([48, 512], 2)];
  const y = x.matmul(w.T);
  const items = kernels(y);
  assert.deepEqual(items.map(shapeOf), ["3x512x16", "64x48"]);
  const [panel, product] = items as [Kernel, Kernel];
  assert.ok(panel.buffers.includes(bufferOf(w)) && !product.buffers.includes(bufferOf(w)));
  assert.deepEqual(sumSteps(product, panel.buffers[0]!), [16]);
  assertClose(values(y), reference(x, w, { bT: true }), { atol: 1e-3, rtol: 1e-5, what: "x @ W^T" });
});

test("h @ E^T with E many times h (a masked-LM head's logits) packs h for the lanes and reads E in place", () => {
  // E is 606 x 64, h 32 x 64: copying E into panels every call cost more than the product gained; lanes across
  // h's 32 rows read E's rows as the tile's rows, one sequential stream each
  const [h, e] = [input([32, 64], 1), input([606, 64], 2)];
  const y = h.matmul(e.T);
  const items = kernels(y);
  assert.deepEqual(items.map(shapeOf), ["2x64x16", "32x606"]);
  const [panel, product] = items as [Kernel, Kernel];
  assert.ok(panel.buffers.includes(bufferOf(h)) && product.buffers.includes(bufferOf(e)));
  assert.deepEqual(sumSteps(product, panel.buffers[0]!), [16]);
  assert.deepEqual(sumSteps(product, bufferOf(e)), [1]);
  assertClose(values(y), reference(h, e, { bT: true }), { atol: 1e-3, rtol: 1e-5, what: "h @ E^T" });
  // E only 8 times h: E's panels as before
  const small = input([256, 64], 3);
  assert.deepEqual(kernels(h.matmul(small.T)).map(shapeOf), ["16x64x16", "32x256"]);
});

test("a weight gradient g^T @ x over a batch of sequences reads both operands as panels along the tokens", () => {
  const [x, w] = [input([2, 24, 32], 1, true), input([32, 32], 2, true)];
  const y = x.matmul(w.T);
  y.square().sum().backward();
  const items = kernels(w.grad!);
  // dW [32, 32] = g^T @ x over 2 x 24 tokens, g and x [2, 24, 32] k-major: g as [32/8, 2, 24, 8], x as
  // [32/16, 2, 24, 16] (a kernel's shape merges the axes it walks in one run: 4x48x8, 2x48x16)
  const shapes = items.map(shapeOf);
  assert.ok(shapes.includes("4x48x8") && shapes.includes("2x48x16"), shapes.join(" "));
  const dw = items.find((k) => shapeOf(k) === "32x32")!;
  // the sum runs over batch (2) and sequence (24) as one loop over the 48 tokens: one sequential walk of the panel
  assert.deepEqual(sumSteps(dw, items.find((k) => shapeOf(k) === "2x48x16")!.buffers[0]!), [16]);
  const xs = values(x);
  const ys = reference(x.reshape([48, 32]), w, { bT: true });
  const expected = Array.from({ length: 32 * 32 }, (_, e) => {
    let sum = 0;
    for (let t = 0; t < 48; t++) sum += 2 * ys[t * 32 + Math.floor(e / 32)]! * xs[t * 32 + (e % 32)]!;
    return sum;
  });
  assertClose(values(w.grad!), expected, { atol: 1e-2, rtol: 1e-4, what: "dW" });
});

test("lanes read from a panel stay the tile's vector axis when the other operand reads neighbours along the rows", () => {
  // BERT's tied-weight gradient g^T @ h in small: g [64, 1002] is read contiguously along the 1002 rows (no
  // panel: 8 does not divide them), h [64, 32] as panels [2, 64, 16]; the lanes stay along the 32 columns
  const [g, h] = [input([64, 1002], 1), input([64, 32], 2)];
  const out = g.T.matmul(h);
  const items = kernels(out);
  assert.deepEqual(items.map(shapeOf), ["2x64x16", "1002x32"]);
  assert.match(items[1]!.kernel.opts, /^u1x16,0x6\b/, items[1]!.kernel.opts);
  assertClose(values(out), reference(g, h, { aT: true }), { atol: 1e-3, rtol: 1e-5, what: "g^T @ h" });
});

test("the backward's dY @ W reads its own panels of W, not the forward's panels of W^T", () => {
  const [x, w] = [input([64, 512], 1, true), input([48, 512], 2, true)];
  const y = x.matmul(w.T);
  y.square().sum().backward();
  const items = kernels(y, x.grad!);
  const forward = items.find((k) => shapeOf(k) === "3x512x16");
  // dX [64, 512] = dY [64, 48] @ W [48, 512]: W's lanes along 512, as [32, 48, 16]
  const backward = items.find((k) => shapeOf(k) === "32x48x16");
  assert.ok(forward && backward, items.map(shapeOf).join(" "));
  const dx = items.find((k) => shapeOf(k) === "64x512")!;
  assert.ok(dx.buffers.includes(backward.buffers[0]!) && !dx.buffers.includes(bufferOf(w)));
  assert.deepEqual(sumSteps(dx, backward.buffers[0]!), [16]);
  // each copy is made right before its product and dies after it: the backward's copy takes the forward's memory
  assert.equal(backward.buffers[0], forward.buffers[0]);
  assert.ok(
    items.indexOf(forward) < items.findIndex((k) => shapeOf(k) === "64x48") &&
      items.indexOf(backward) === items.indexOf(dx) - 1,
  );
  const ys = reference(x, w, { bT: true });
  const ws = values(w);
  const expected = Array.from({ length: 64 * 512 }, (_, e) => {
    let sum = 0;
    for (let j = 0; j < 48; j++) sum += 2 * ys[Math.floor(e / 512) * 48 + j]! * ws[j * 512 + (e % 512)]!;
    return sum;
  });
  assertClose(values(x.grad!), expected, { atol: 1e-2, rtol: 1e-4, what: "dX" });
});

test("batched products (attention's probabilities @ v) pack each batch's operand", () => {
  const [p, v] = [input([3, 32, 40], 1), input([3, 40, 48], 2)];
  const out = p.matmul(v);
  // v as [3, 48/16, 40, 16]
  assert.deepEqual(kernels(out).map(shapeOf), ["3x3x40x16", "3x32x48"]);
  const expected = [0, 1, 2].flatMap((b) =>
    reference(
      p.shrink([[b, b + 1], null, null]).reshape([32, 40]),
      v.shrink([[b, b + 1], null, null]).reshape([40, 48]),
    ),
  );
  assertClose(values(out), expected, { atol: 1e-3, rtol: 1e-5, what: "p @ v" });
});

test("no copies where an operand is read few times, the sum is short, the tile cannot take a panel, or the device is not a host", () => {
  // four rows: each element of W is read four times, and 4 rows are no panel of 8
  assert.equal(kernels(input([4, 512], 1).matmul(input([48, 512], 2).T)).length, 1);
  // a sum of 16 steps
  assert.equal(kernels(input([64, 16], 1).matmul(input([16, 48], 2))).length, 1);
  // a small output over a long sum: K-blocked instead, its operands' blocks read from cache
  const blocked = kernels(input([64, 4096], 1).matmul(input([4096, 48], 2)));
  assert.equal(blocked.length, 1);
  assert.match(blocked[0]!.kernel.opts, /\|k\d+/);
  // 60 rows read across the sum: no panel of 8 (only the lanes of h take one)
  assert.deepEqual(kernels(input([64, 60], 1).T.matmul(input([64, 32], 2))).map(shapeOf), ["2x64x16", "60x32"]);
  // a device without the host forms (a GPU's) tiles its own way
  assert.equal(kernels(input([64, 96], 1).matmul(input([96, 48], 2))).length, 2);
  registerBackend("PLAINJS", () => ({ ...jsBackend(), name: "PLAINJS", hostForms: false }));
  assert.equal(kernels(input([64, 96], 1, false, "PLAINJS").matmul(input([96, 48], 2, false, "PLAINJS"))).length, 1);
});

test("lanes 16 does not divide read a padded panel: x @ W^T over 40 outputs, x @ W over 40 columns", () => {
  const [x, w] = [input([60, 512], 1), input([40, 512], 2)];
  const y = x.matmul(w.T);
  const items = kernels(y);
  // W^T as [3, 512, 16]: 48 lanes, the last panel's 8 extra never read
  assert.deepEqual(items.map(shapeOf), ["3x512x16", "60x40"]);
  assert.ok(items[1]!.buffers.includes(items[0]!.buffers[0]!) && !items[1]!.buffers.includes(bufferOf(w)));
  assert.deepEqual(sumSteps(items[1]!, items[0]!.buffers[0]!), [16]);
  assertClose(values(y), reference(x, w, { bT: true }), { atol: 1e-3, rtol: 1e-5, what: "x @ W^T" });
  const [a, b] = [input([60, 64], 3), input([64, 40], 4)];
  const z = a.matmul(b);
  assert.deepEqual(kernels(z).map(shapeOf), ["3x64x16", "60x40"]);
  assertClose(values(z), reference(a, b), { atol: 1e-3, rtol: 1e-5, what: "x @ W" });
});

test("a matmul before a heavy epilogue (a GELU) is stored with its full tile; a light one stays fused", () => {
  const [x, w] = [input([20, 64], 1), input([64, 40], 2)];
  const heavy = kernels(x.matmul(w).gelu());
  assert.deepEqual(
    heavy.map((k) => k.kernel.name[0]),
    ["r", "E"],
  );
  assert.ok(heavy[1]!.buffers.includes(heavy[0]!.buffers[0]!));
  assert.equal(kernels(x.matmul(w).mul(2).add(1)).length, 1);
});

test("a bias's gradient under a GELU is one reduce of the stored gradient, not one reduce per contribution", () => {
  const [x, w, b] = [input([20, 30], 1), input([40, 30], 2, true), input([40], 3, true)];
  const h = x.matmul(w.T).add(b);
  h.gelu().square().sum().backward();
  const items = kernels(w.grad!, b.grad!);
  const bias = items.find((k) => k.kernel.outputShape.filter((s) => s > 1).join() === "40");
  assert.ok(bias, "a kernel computes the bias's gradient");
  // one input: the gradient at h, which dW's matmul reads too
  assert.equal(bias.buffers.length, 2);
  const dw = items.find((k) => k.kernel.outputShape.filter((s) => s > 1).join() === "40,30")!;
  assert.ok(dw.buffers.includes(bias.buffers[1]!));
});

test("an operand whose index divides (a convolution's windows) is packed even where the sum runs K-blocked: the weight gradient reads the copy", () => {
  const x = input([8, 8, 34, 34], 1);
  const w = input([64, 8, 3, 3], 2, true);
  const g = input([8, 64, 32, 32], 3);
  w.grad = null;
  x.conv2d(w).mul(g).sum().backward();
  const ks = kernels(w.grad!);
  const product = ks.find((k) => k.kernel.name.startsWith("r_"))!;
  assert.ok(product, ks.map(shapeOf).join(", "));
  // the product reads no input buffer in place (the windows come from their packed copy), and the copy
  // before it was made by a kernel of this schedule
  assert.ok(
    !product.buffers.includes(bufferOf(x)),
    "the weight gradient reads the windows in place (a division a load)",
  );
  const copies = ks.filter((k) => k !== product && product.buffers.includes(k.buffers[0]!));
  assert.ok(copies.length >= 1, "no packed copy feeds the product");
  const gx = values(w.grad!);
  // the same numbers as the definition: dW[f, c, i, j] = sum over n, y, x of g[n, f, y, x] * x[n, c, y + i, x + j]
  const xv = values(x),
    gv = values(g);
  for (const [f, c, i, j] of [
    [0, 0, 0, 0],
    [5, 3, 1, 2],
    [63, 7, 2, 1],
  ] as const) {
    let s = 0;
    for (let n = 0; n < 8; n++)
      for (let y = 0; y < 32; y++)
        for (let xx = 0; xx < 32; xx++)
          s += gv[((n * 64 + f) * 32 + y) * 32 + xx]! * xv[((n * 8 + c) * 34 + y + i) * 34 + xx + j]!;
    assertClose([gx[((f * 8 + c) * 3 + i) * 3 + j]!], [s], { atol: 1e-3, what: `dW[${f}, ${c}, ${i}, ${j}]` });
  }
});
