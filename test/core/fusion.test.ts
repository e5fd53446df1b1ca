import { test } from "node:test";
import assert from "node:assert/strict";
import { GlobalCounters, Tensor, UOp, dtypes } from "../../src/index.ts";
import { jsBackend } from "../../src/backends.ts";
import { registerBackend } from "../../src/engine/backend.ts";
import type { Stmt } from "../../src/codegen/ir.ts";
import { createSchedule } from "../../src/engine/schedule.ts";
import { kernelSpecOf, lowerKernel } from "../../src/codegen/lower.ts";
import { NO_OPTS } from "../../src/codegen/opts.ts";
import { isOneHotProduct } from "../../src/codegen/one_hot.ts";
import { cpuAvailable } from "../../src/runtime/cpu.ts";
import { assertClose } from "../close.ts";

const values = (t: Tensor): number[] => Array.from(t.toArray() as Float32Array);

const device = "JS";
const input = (shape: number[], seed: number): Tensor =>
  new Tensor(
    Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(i * 0.37 + seed)),
    { device },
  )
    .reshape(shape)
    .realize();

/** Kernels run to realize `t`, with every input already realized. */
function kernelsFor(t: Tensor): number {
  GlobalCounters.reset();
  t.realize();
  return GlobalCounters.kernelCount;
}

test("a.add(b).mul(c) is one kernel", () => {
  const [a, b, c] = [input([16, 16], 1), input([16, 16], 2), input([16], 3)];
  assert.equal(kernelsFor(a.add(b).mul(c)), 1);
});

test("a.mul(b).sum() is one kernel", () => {
  assert.equal(
    kernelsFor(
      input([64], 1)
        .mul(input([64], 2))
        .sum(),
    ),
    1,
  );
});

test("softmax over an axis is at most 3 kernels", () => {
  assert.ok(kernelsFor(input([8, 32], 1).softmax(-1)) <= 3);
});

test("softmax's and log-softmax's gradients do not go through the max they shift by (its gradient is 0: the shift cancels)", () => {
  for (const [name, fn, grad] of [
    // d/dx_i sum_j w_j p_j = p_i (w_i - sum_j p_j w_j)
    [
      "softmax",
      (t: Tensor) => t.softmax(-1),
      (p: number[], w: number[], i: number) => p[i]! * (w[i]! - p.reduce((s, pj, j) => s + pj * w[j]!, 0)),
    ],
    // d/dx_i sum_j w_j log p_j = w_i - p_i sum_j w_j
    [
      "logSoftmax",
      (t: Tensor) => t.logSoftmax(-1),
      (p: number[], w: number[], i: number) => w[i]! - p[i]! * w.reduce((s, wj) => s + wj, 0),
    ],
  ] as const) {
    const x = input([6, 40], 4).mul(3).realize();
    x.requiresGrad = true;
    const w = input([6, 40], 5);
    fn(x).mul(w).sum().backward();
    // the gradient's reduces: the forward's max and sum again (the backward recomputes them in its kernels) and
    // the one the formula has; differentiating the max added a count of each row's maxima and a sum over the row
    const reduces = createSchedule([x.grad!.node as UOp]).items.filter(
      (item) => item.kind === "kernel" && item.kernel.name.startsWith("r"),
    ).length;
    assert.ok(reduces <= 3, `${name}: ${reduces} reduce kernels`);
    const [xs, ws, got] = [values(x), values(w), values(x.grad!)];
    for (let row = 0; row < 6; row++) {
      const r = xs.slice(row * 40, row * 40 + 40),
        top = Math.max(...r);
      const total = r.reduce((s, v) => s + Math.exp(v - top), 0);
      const p = r.map((v) => Math.exp(v - top) / total);
      for (let i = 0; i < 40; i++) {
        const want = grad(p, ws.slice(row * 40, row * 40 + 40), i);
        assertClose(got[row * 40 + i]!, want, { atol: 2e-6, rtol: 0, what: `${name} row ${row}, column ${i}` });
      }
    }
  }
});

test("16-bit attention scores are computed once, in the matmul's kernel: the softmax reads them stored (4 kernels)", () => {
  const [q, k] = [input([2, 32, 16], 1), input([2, 32, 16], 2)].map((t) => t.cast(dtypes.float16).realize());
  const mask = input([2, 1, 32], 3).cast(dtypes.float16).realize();
  // matmul + scale + mask, max, sum, normalize (the max stores its 16-bit input; the shift reads the same)
  assert.equal(kernelsFor(q!.matmul(k!.transpose(-1, -2)).mul(0.25).add(mask).softmax(-1)), 4);
  // the values: a float64 softmax of the stored 16-bit scores, to 16-bit rounding
  const scores = q!.matmul(k!.transpose(-1, -2)).mul(0.25).add(mask);
  const x = values(scores.cast(dtypes.float32));
  const got = values(scores.softmax(-1).cast(dtypes.float32));
  for (let row = 0; row < x.length / 32; row++) {
    const r = x.slice(row * 32, row * 32 + 32),
      top = Math.max(...r);
    const total = r.reduce((sum, v) => sum + Math.exp(v - top), 0);
    const softmax = r.map((v) => Math.exp(v - top) / total);
    assertClose(got.slice(row * 32, row * 32 + 32), softmax, { atol: 2e-3, rtol: 0, what: `row ${row}` });
  }
});

test("a matmul with a bias add and gelu after it is at most 2 kernels", () => {
  const n = kernelsFor(
    input([8, 16], 1)
      .matmul(input([16, 12], 2))
      .add(input([12], 3))
      .gelu(),
  );
  assert.ok(n <= 2, `${n} kernels`);
});

test("a 16-bit matmul accumulated in float32 and read inside another matmul is stored in 16 bits", () => {
  const [x, wq, wk] = [input([64, 32], 1), input([48, 32], 2), input([48, 32], 3)].map((t) =>
    t.cast(dtypes.float16).realize(),
  );
  // attention scores: each projection is read inside the scores' reduce, so it is stored first
  const scores = x!.matmul(wq!.T).matmul(x!.matmul(wk!.T).T);
  const projections = createSchedule([scores.node as UOp]).items.flatMap((item) =>
    item.kind === "kernel" && item.kernel.name.startsWith("r") && item.kernel.buffers[0]!.size === 64 * 48
      ? [item.kernel.buffers[0]!.dtype.name]
      : [],
  );
  assert.deepEqual(projections, ["float16", "float16"]);
});

test("a 16-bit value widened to float32 and narrowed back, through views, is the value itself", () => {
  const x = input([4, 6], 1).cast(dtypes.float16).realize();
  const back = x.cast(dtypes.float32).reshape([6, 4]).permute([1, 0]).cast(dtypes.float16);
  assert.deepEqual(
    UOp.toposort([back.node as UOp])
      .map((n) => n.op)
      .filter((op) => op === "CAST"),
    [],
  );
  assert.deepEqual(values(back.cast(dtypes.float32)), values(x.cast(dtypes.float32).reshape([6, 4]).permute([1, 0])));
  // narrowing first is not exact: that cast stays
  assert.ok(UOp.toposort([x.cast(dtypes.float32).cast(dtypes.bfloat16).node as UOp]).some((n) => n.op === "CAST"));
});

test("a 16-bit MLP's backward stores 16-bit gradients, one matmul a kernel", () => {
  const [x, w1, w2, b1] = [input([256, 64], 1), input([96, 64], 2), input([64, 96], 3), input([96], 4)].map((t) =>
    t.cast(dtypes.float16).realize(),
  );
  for (const w of [w1!, w2!]) w.requiresGrad = true;
  x!.matmul(w1!.T).add(b1!).gelu().matmul(w2!.T).cast(dtypes.float32).sum().backward();
  const kernels = createSchedule([w1!.grad!.node as UOp, w2!.grad!.node as UOp]).items.flatMap((item) =>
    item.kind === "kernel" ? [item.kernel] : [],
  );
  // activations and gradients (not the float32 loss) are 16-bit
  assert.deepEqual(
    kernels.filter((k) => k.buffers[0]!.size >= 64 * 96).map((k) => k.buffers[0]!.dtype.name),
    kernels.filter((k) => k.buffers[0]!.size >= 64 * 96).map(() => "float16"),
  );
  // the gelu's input is not recomputed beside the matmul of its backward: no kernel holds two reduce loops
  for (const k of kernels)
    assert.ok(topLevelLoops(k.body) <= 1, `${k.name} holds ${topLevelLoops(k.body)} reduce loops`);
});

test("the gradient of an input several matmuls read is one matmul each, then a sum (not one loop over every product)", () => {
  const [x, wq, wk, wv] = [input([64, 32], 1), input([48, 32], 2), input([48, 32], 3), input([48, 32], 4)];
  x!.requiresGrad = true;
  // q, k and v read the same x: its gradient sums dq @ wq + dk @ wk + dv @ wv
  const up = [input([64, 48], 5), input([64, 48], 6), input([64, 48], 7)];
  [wq!, wk!, wv!]
    .map((w, i) => x!.matmul(w.T).mul(up[i]!).sum())
    .reduce((a, b) => a.add(b))
    .backward();
  const kernels = createSchedule([x!.grad!.node as UOp]).items.flatMap((item) =>
    item.kind === "kernel" ? [item.kernel] : [],
  );
  // each matmul's reduce loop reads two factors (the upstream gradient and a weight), not six
  const loads = (stmts: readonly Stmt[], inReduce = false): number =>
    stmts.reduce(
      (n, s) =>
        n +
        (s.kind === "loop"
          ? loads(s.body, inReduce || s.var.startsWith("r"))
          : inReduce && s.kind === "def" && s.expr.op === "LOAD"
            ? 1
            : 0),
      0,
    );
  const reduces = kernels.filter((k) => topLevelLoops(k.body) > 0).map((k) => lowerKernel(kernelSpecOf(k)!, NO_OPTS));
  assert.equal(reduces.length, 3, kernels.map((k) => k.name).join(", "));
  for (const k of reduces) assert.equal(loads(k.body), 2, `${k.name}: ${loads(k.body)} loads in its loop`);
  // the value: the sum of the three upstream gradients times each weight
  const expected = up.map((u, i) => u.matmul([wq!, wk!, wv!][i]!)).reduce((a, b) => a.add(b));
  const [got, want] = [values(x!.grad!), values(expected)];
  assertClose(got, want, { atol: 1e-4, rtol: 1e-4 });
});

test("on a GPU, a tied embedding's two gradients (a matmul and a one-hot product) are summed after two kernels, not computed in one", () => {
  // a device without host forms (a GPU's: a one-hot product runs on tensor cores, a host makes it a scatter)
  registerBackend("PLAINJS3", () => ({ ...jsBackend(), name: "PLAINJS3", hostForms: false }));
  const on = (t: Tensor) => t.to("PLAINJS3").realize();
  // the decoder's gradient h^T @ g and the lookup's gradient, the one-hot product sum over tokens of [ids == v] * dy
  const [h, g, dy] = [on(input([12, 10], 1)), on(input([12, 6], 2)), on(input([20, 6], 3))];
  const ids = on(
    new Tensor(
      Int32Array.from({ length: 20 }, (_, i) => (i * 7) % 10),
      { device },
    ),
  );
  const lookup = ids
    .unsqueeze(-1)
    .eq(Tensor.arange(10, undefined, 1, { device: "PLAINJS3" }))
    .unsqueeze(-1)
    .where(dy.unsqueeze(1), 0)
    .sum({ axis: 0 });
  const total = h.T.matmul(g).add(lookup).contiguous();
  const kernels = createSchedule([total.node as UOp]).items.filter((item) => item.kind === "kernel");
  // in one kernel both ran as loops over every product (no tensor cores); a product beside a matmul is stored
  assert.equal(kernels.length, 2, kernels.map((k) => (k.kind === "kernel" ? k.kernel.name : "copy")).join(", "));
  const want = values(h.T.matmul(g).contiguous()).map((v, i) => v + values(lookup.contiguous())[i]!);
  assertClose(values(total), want, { atol: 1e-5, rtol: 0 });
});

test("a one-hot sum over its class axis is a gather (an embedding lookup), over the other axes a product (its gradient)", () => {
  const ids = new Tensor(
    Int32Array.from({ length: 20 }, (_, i) => (i * 7) % 10),
    { device },
  ).realize();
  const onehot = ids
    .unsqueeze(-1)
    .eq(Tensor.arange(10, undefined, 1, { device }))
    .unsqueeze(-1);
  const reduceOf = (t: Tensor): UOp => UOp.toposort([t.node as UOp], () => false).find((n) => n.op === "REDUCE")!;
  assert.equal(isOneHotProduct(reduceOf(onehot.where(input([10, 6], 1), 0).sum({ axis: 1 }))), false);
  assert.equal(isOneHotProduct(reduceOf(onehot.where(input([20, 1, 6], 2), 0).sum({ axis: 0 }))), true);
  assert.equal(
    isOneHotProduct(
      reduceOf(
        input([20, 10], 3)
          .mul(input([20, 10], 4))
          .sum({ axis: 0 }),
      ),
    ),
    false,
  );
});

/** Reduce loops right inside the output loops. */
function topLevelLoops(body: readonly Stmt[]): number {
  let stmts = body;
  while (stmts.length === 1 && stmts[0]!.kind === "loop" && stmts[0]!.var.startsWith("i")) stmts = stmts[0]!.body;
  return stmts.filter((s) => s.kind === "loop").length;
}

test("movement ops are views: a transpose feeding an add costs no extra kernel", () => {
  assert.equal(
    kernelsFor(
      input([8, 4], 1)
        .T.add(input([4, 8], 2))
        .flip(0)
        .pad([[1, 1], null]),
    ),
    1,
  );
});

test("a reduce broadcast back over its input is stored, not recomputed per element", () => {
  const x = input([4, 64], 1);
  const centered = x.sub(x.mean({ axis: 1, keepdim: true }));
  assert.equal(kernelsFor(centered), 2);
  assert.ok(GlobalCounters.globalOps < 4 * 64 * 10, "mean recomputed per element");
});

test("a value realized once is not computed again", () => {
  const y = input([32], 1).exp().realize();
  assert.equal(kernelsFor(y.add(1)), 1);
});

test("the memory planner reuses an intermediate's buffer once its last reader ran", async () => {
  const { createSchedule } = await import("../../src/engine/schedule.ts");
  const w = input([8, 8], 1);
  let y = input([8, 8], 2);
  for (let i = 0; i < 4; i++) y = y.matmul(w).contiguous();
  const { items } = createSchedule([y.node as UOp]);
  const written = new Set(items.map((it) => (it.kind === "kernel" ? it.buffers[0] : it.dst)));
  assert.equal(items.length, 4);
  assert.equal(written.size, 3, "the first product's buffer should be reused by the third");
});

test("one realize with planned buffers gives the numbers of step-by-step realizes", () => {
  const w = input([8, 8], 3);
  let y = input([8, 8], 4);
  const expected: number[][] = [];
  for (let i = 0; i < 4; i++) {
    y = y.matmul(w).mul(0.5).contiguous();
    expected.push(values(y));
  }
  let z = input([8, 8], 4);
  for (let i = 0; i < 4; i++) z = z.matmul(w).mul(0.5).contiguous();
  assert.deepEqual(values(z), expected[3]);
});

test("a kernel that would read more buffers than an FFI call takes is split", async () => {
  const { MAX_KERNEL_INPUTS, createSchedule } = await import("../../src/engine/schedule.ts");
  const parts = Array.from({ length: 130 }, (_, i) => input([4], i));
  const total = parts.reduce((a, b) => a.add(b));
  const widest = Math.max(
    ...createSchedule([total.node as UOp]).items.map((it) => (it.kind === "kernel" ? it.buffers.length - 1 : 1)),
  );
  assert.ok(widest <= MAX_KERNEL_INPUTS, `a kernel reads ${widest} buffers`);
  GlobalCounters.reset();
  const got = values(total);
  assert.ok(GlobalCounters.kernelCount >= Math.ceil(130 / MAX_KERNEL_INPUTS), `${GlobalCounters.kernelCount} kernels`);
  const expected = [0, 1, 2, 3].map((j) => parts.reduce((s, _, i) => s + Math.fround(Math.sin(j * 0.37 + i)), 0));
  got.forEach((v, j) => assert.ok(Math.abs(v - expected[j]!) < 1e-3, `element ${j}: ${v} vs ${expected[j]}`));
});

test("an expensive elementwise value several kernels read is stored once on host backends; a cheap one, or on a GPU-like device, is recomputed", () => {
  const kernelShapes = (t: Tensor): string[] =>
    createSchedule([t.node as UOp]).items.flatMap((i) => (i.kind === "kernel" ? [i.kernel.name] : []));
  const build = (x: Tensor, cheap: boolean): Tensor => {
    // read by two reduces (a row sum and a column sum: two kernels) and the sum of both
    const y = cheap ? x.mul(2).add(1) : x.mul(1.5).add(0.25).exp().mul(x).sqrt().add(x.square());
    return y
      .sum({ axis: 1 })
      .unsqueeze(1)
      .add(y.sum({ axis: 0 }).unsqueeze(0));
  };
  const x = input([64, 48], 1).abs();
  const stored = kernelShapes(build(x, false));
  // y (E_3072), the two sums, the output (E_64_48)
  assert.deepEqual(stored, ["E_3072", "r_64", "r_48", "E_64_48"]);
  // the values: as with y computed in every kernel
  const xs = values(x);
  const y = xs.map((v) => Math.sqrt(Math.exp(v * 1.5 + 0.25) * v) + v * v);
  const rows = Array.from({ length: 64 }, (_, i) => y.slice(i * 48, i * 48 + 48).reduce((a, b) => a + b, 0));
  const cols = Array.from({ length: 48 }, (_, j) => rows.reduce((a, _, i) => a + y[i * 48 + j]!, 0));
  const got = values(build(x, false));
  got.forEach((v, e) =>
    assert.ok(Math.abs(v - (rows[Math.floor(e / 48)]! + cols[e % 48]!)) < 1e-3 * Math.abs(v), `element ${e}`),
  );
  // a cheap chain stays inlined
  assert.deepEqual(kernelShapes(build(x, true)), ["r_64", "r_48", "E_64_48"]);
  // a device without host forms (a GPU's) recomputes rather than hold more memory
  registerBackend("PLAINJS2", () => ({ ...jsBackend(), name: "PLAINJS2", hostForms: false }));
  const onGpuLike = kernelShapes(build(input([64, 48], 1).to("PLAINJS2").abs().realize(), false));
  assert.ok(!onGpuLike.includes("E_3072"), onGpuLike.join(" "));
});

test("a kernel's bytes are the spans it reads and writes: a slice of a big buffer, not the buffer", () => {
  const big = input([1000, 16], 1);
  GlobalCounters.reset();
  big
    .shrink([
      [10, 20],
      [0, 16],
    ])
    .mul(2)
    .realize();
  // 10 rows of 16 floats read, 10 rows written (the whole 64000-byte buffer counted before)
  assert.equal(GlobalCounters.globalMem, 2 * 10 * 16 * 4);
});

test("a concatenation of matmuls (a fused q/k/v projection's gradient) runs each as a matmul kernel; the concatenation only copies", () => {
  const [a, b, c] = [input([8, 32], 1), input([8, 32], 2), input([8, 32], 3)];
  const w = input([32, 16], 4);
  const cat = Tensor.cat([a.matmul(w), b.matmul(w), c.matmul(w)], 1);
  const { items } = createSchedule([cat.node as UOp]);
  const kernels = items.flatMap((item) => (item.kind === "kernel" ? [item.kernel] : []));
  // the concatenation lowers each piece as plain loops, with no tile: a sum there ran untiled (4.5 ms of a
  // 40 ms step of examples/char_lm.ts)
  const concatenation = kernels.filter((k) => k.name.startsWith("E_"));
  assert.equal(concatenation.length, 1, kernels.map((k) => k.name).join(", "));
  assert.equal(kernels.filter((k) => k.name.startsWith("r_")).length, 3, kernels.map((k) => k.name).join(", "));
  const expected = [a, b, c].map((x) => values(x.matmul(w)));
  const got = values(cat);
  for (let row = 0; row < 8; row++)
    for (let part = 0; part < 3; part++) {
      assert.deepEqual(
        got.slice(row * 48 + part * 16, row * 48 + part * 16 + 16),
        expected[part]!.slice(row * 16, row * 16 + 16),
      );
    }
});

test("a gelu's backward on a host backend is one kernel reading the pre-activation, its gradient and two stored forward values", {
  skip: !cpuAvailable() && "no C compiler",
}, () => {
  // host backends store what several kernels would recompute (schedule.ts storeSharedChains)
  const cpu = (t: Tensor): Tensor => t.to("CPU").realize();
  const [x, w1, w2, b1] = [input([256, 64], 1), input([96, 64], 2), input([64, 96], 3), input([96], 4)].map(cpu);
  w1!.requiresGrad = true;
  const h = x!.matmul(w1!.T).add(b1!);
  const y = h.gelu().matmul(w2!.T);
  y.sum().backward();
  const kernels = createSchedule([y.node as UOp, w1!.grad!.node as UOp]).items.flatMap((item) =>
    item.kind === "kernel" ? [item.kernel] : [],
  );
  // the [tokens, hidden] elementwise kernels (not the copy that packs the output for the next matmul): the
  // forward's stored values, the gelu's output, its gradient
  const elementwise = kernels.filter(
    (k) => k.buffers[0]!.size === 256 * 96 && topLevelLoops(k.body) === 0 && k.buffers.length > 2,
  );
  const described = elementwise.map((k) => `${k.name} reads ${k.buffers.length - 1}`).join(", ");
  // (differentiating erf's polynomial stored 7 values in the forward pass, and its backward read 10 buffers)
  assert.ok(elementwise.length <= 5, described);
  for (const k of elementwise) assert.ok(k.buffers.length - 1 <= 5, described);
});
