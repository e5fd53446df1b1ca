// Convolution and pooling (src/tensor/windows.ts) against direct loops in float64, forward and gradients, on the JS
// and CPU devices; their errors; and what they cost in kernels.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, TsgradError, dtypes, nn } from "../../src/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import type { Stmt } from "../../src/codegen/ir.ts";
import type { Idx } from "../../src/shape/symbolic.ts";
import { assertClose } from "../close.ts";
import { values } from "./harness.ts";
import { testDevices } from "../devices.ts";

const devices = testDevices();

/** Deterministic values in [-1, 1). */
const data = (n: number, seed: number): number[] =>
  Array.from({ length: n }, (_, i) => Math.sin(i * 1.37 + seed * 7.1) * 0.999);
const prod = (shape: readonly number[]): number => shape.reduce((a, b) => a * b, 1);

interface Case {
  name: string;
  x: number[]; // [batch, channels, ...spatial]
  w: number[]; // [filters, channels / groups, ...kernel]
  stride: number[];
  padding: number[];
  dilation: number[];
  groups: number;
}

/** Row-major strides of a shape. */
const stridesOf = (shape: readonly number[]): number[] => shape.map((_, i) => prod(shape.slice(i + 1)));

/** Every multi-index of a shape, in row-major order. */
function* indices(shape: readonly number[]): Generator<number[]> {
  const n = prod(shape);
  for (let flat = 0; flat < n; flat++) yield shape.map((s, d) => Math.floor(flat / prod(shape.slice(d + 1))) % s);
}

/** [batch, filters, ...out] */
const outShapeOf = (c: Case): number[] => [
  c.x[0]!,
  c.w[0]!,
  ...c.x
    .slice(2)
    .map(
      (size, d) => Math.floor((size + 2 * c.padding[d]! - c.dilation[d]! * (c.w[2 + d]! - 1) - 1) / c.stride[d]!) + 1,
    ),
];

/** The convolution by its definition, and the gradients of sum(out * r) with respect to x and w. */
function reference(c: Case, x: number[], w: number[], bias: number[], r: number[]) {
  const filters = c.w[0]!,
    perGroup = c.w[1]!,
    kernel = c.w.slice(2);
  const outShape = outShapeOf(c);
  const [xs, ws, os] = [stridesOf(c.x), stridesOf(c.w), stridesOf(outShape)];
  const y = new Array<number>(prod(outShape)).fill(0);
  const dx = new Array<number>(x.length).fill(0),
    dw = new Array<number>(w.length).fill(0);
  const perGroupFilters = filters / c.groups;
  for (const [n, f, ...o] of indices(outShape)) {
    const g = Math.floor(f! / perGroupFilters);
    const at = n! * os[0]! + f! * os[1]! + o.reduce((s, v, d) => s + v * os[2 + d]!, 0);
    let sum = bias[f!]!;
    for (const [ci, ...k] of indices([perGroup, ...kernel])) {
      const pos = o.map((v, d) => v * c.stride[d]! + k[d]! * c.dilation[d]! - c.padding[d]!);
      if (pos.some((p, d) => p < 0 || p >= c.x[2 + d]!)) continue;
      const xi = n! * xs[0]! + (g * perGroup + ci!) * xs[1]! + pos.reduce((s, p, d) => s + p * xs[2 + d]!, 0);
      const wi = f! * ws[0]! + ci! * ws[1]! + k.reduce((s, v, d) => s + v! * ws[2 + d]!, 0);
      sum += x[xi]! * w[wi]!;
      dx[xi] += r[at]! * w[wi]!;
      dw[wi] += r[at]! * x[xi]!;
    }
    y[at] = sum;
  }
  return { y, dx, dw };
}

const cases: Case[] = [
  {
    name: "3x3, padding 1",
    x: [2, 3, 7, 6],
    w: [4, 3, 3, 3],
    stride: [1, 1],
    padding: [1, 1],
    dilation: [1, 1],
    groups: 1,
  },
  {
    name: "stride 2, a 2x3 kernel",
    x: [1, 2, 9, 8],
    w: [3, 2, 2, 3],
    stride: [2, 2],
    padding: [0, 1],
    dilation: [1, 1],
    groups: 1,
  },
  {
    name: "dilation 2, stride (1, 3)",
    x: [2, 2, 9, 10],
    w: [2, 2, 3, 2],
    stride: [1, 3],
    padding: [2, 0],
    dilation: [2, 2],
    groups: 1,
  },
  {
    name: "two groups",
    x: [2, 4, 6, 6],
    w: [6, 2, 3, 3],
    stride: [1, 1],
    padding: [1, 1],
    dilation: [1, 1],
    groups: 2,
  },
  {
    name: "depthwise (groups = channels)",
    x: [1, 3, 5, 5],
    w: [3, 1, 3, 3],
    stride: [2, 1],
    padding: [1, 1],
    dilation: [1, 1],
    groups: 3,
  },
  { name: "1-D", x: [2, 3, 11], w: [2, 3, 4], stride: [2], padding: [1], dilation: [1], groups: 1 },
  {
    name: "3-D",
    x: [1, 2, 4, 5, 4],
    w: [2, 2, 2, 3, 2],
    stride: [1, 2, 1],
    padding: [1, 0, 0],
    dilation: [1, 1, 2],
    groups: 1,
  },
];

for (const device of devices) {
  for (const c of cases) {
    test(`conv2d matches its definition, forward and both gradients: ${c.name} (${device})`, () => {
      const [xv, wv, bv] = [data(prod(c.x), 1), data(prod(c.w), 2), data(c.w[0]!, 3)];
      const outShape = outShapeOf(c);
      const r = data(prod(outShape), 4);
      const { y, dx, dw } = reference(c, xv, wv, bv, r);
      const x = new Tensor(xv, { device, dtype: dtypes.float32 }).reshape(c.x).realize();
      const w = new Tensor(wv, { device, dtype: dtypes.float32 }).reshape(c.w).realize();
      const b = new Tensor(bv, { device, dtype: dtypes.float32 }).realize();
      for (const t of [x, w, b]) t.requiresGrad = true;
      const out = x.conv2d(w, {
        bias: b,
        stride: c.stride,
        padding: c.padding,
        dilation: c.dilation,
        groups: c.groups,
      });
      assert.deepEqual(out.shape, outShape);
      assertClose(values(out), y, { atol: 1e-5, what: "output" });
      out
        .mul(new Tensor(r, { device, dtype: dtypes.float32 }).reshape(outShape))
        .sum()
        .backward();
      assertClose(values(x.grad!), dx, { atol: 1e-5, what: "input gradient" });
      assertClose(values(w.grad!), dw, { atol: 1e-5, what: "weight gradient" });
      const db = Array.from({ length: c.w[0]! }, (_, f) => {
        let s = 0;
        for (let i = 0; i < r.length; i++) if (Math.floor(i / prod(outShape.slice(2))) % c.w[0]! === f) s += r[i]!;
        return s;
      });
      assertClose(values(b.grad!), db, { atol: 1e-5, what: "bias gradient" });
    });
  }

  test(`maxPool2d and avgPool2d match their definitions, with padding, stride and their gradients (${device})`, () => {
    const shape = [2, 3, 7, 8];
    const xv = data(prod(shape), 5);
    for (const [kernel, stride, padding] of [
      [2, 2, 0],
      [3, 2, 1],
      [3, 1, 1],
    ] as const) {
      const [oh, ow] = [7, 8].map((s) => Math.floor((s + 2 * padding - kernel) / stride) + 1) as [number, number];
      const outShape = [2, 3, oh, ow];
      const r = data(prod(outShape), 6);
      const max: number[] = [],
        avg: number[] = [];
      const dmax = new Array<number>(xv.length).fill(0),
        davg = new Array<number>(xv.length).fill(0);
      for (const [n, ch, y, x] of indices(outShape)) {
        const at = ((n! * 3 + ch!) * oh + y!) * ow + x!;
        let best = -Infinity,
          bestAt = -1,
          sum = 0;
        const inside: number[] = [];
        for (let ky = 0; ky < kernel; ky++)
          for (let kx = 0; kx < kernel; kx++) {
            const [py, px] = [y! * stride + ky - padding, x! * stride + kx - padding];
            if (py < 0 || py >= 7 || px < 0 || px >= 8) continue;
            const i = ((n! * 3 + ch!) * 7 + py) * 8 + px;
            inside.push(i);
            sum += xv[i]!;
            if (xv[i]! > best) [best, bestAt] = [xv[i]!, i];
          }
        max.push(best);
        avg.push(sum / (kernel * kernel));
        dmax[bestAt] += r[at]!;
        for (const i of inside) davg[i] += r[at]! / (kernel * kernel);
      }
      const what = `kernel ${kernel}, stride ${stride}, padding ${padding}`;
      const x = new Tensor(xv, { device, dtype: dtypes.float32 }).reshape(shape).realize();
      x.requiresGrad = true;
      const m = x.maxPool2d({ kernel, stride, padding });
      assertClose(values(m), max, { atol: 1e-6, what: `max, ${what}` });
      m.mul(new Tensor(r, { device, dtype: dtypes.float32 }).reshape(outShape))
        .sum()
        .backward();
      assertClose(values(x.grad!), dmax, { atol: 1e-5, what: `max gradient, ${what}` });
      x.grad = null;
      const a = x.avgPool2d({ kernel, stride, padding });
      assertClose(values(a), avg, { atol: 1e-6, what: `mean, ${what}` });
      a.mul(new Tensor(r, { device, dtype: dtypes.float32 }).reshape(outShape))
        .sum()
        .backward();
      assertClose(values(x.grad!), davg, { atol: 1e-5, what: `mean gradient, ${what}` });
    }
  });
}

test("a convolution is one matmul over a view of the input's windows: no kernel writes them out (no im2col buffer)", () => {
  const x = new Tensor(data(2 * 8 * 16 * 16, 1), { device: "JS", dtype: dtypes.float32 })
    .reshape([2, 8, 16, 16])
    .realize();
  const w = new Tensor(data(16 * 8 * 3 * 3, 2), { device: "JS", dtype: dtypes.float32 })
    .reshape([16, 8, 3, 3])
    .realize();
  const { items } = recordItems(() => x.conv2d(w, { padding: 1 }).realize());
  const kernels = items.flatMap((item) => (item.kind === "kernel" ? [item] : []));
  const names = kernels.map((k) => k.kernel.name).join(", ");
  // the matmul, and at most a packed copy of the weight (host backends lay a matmul's operand out in panels)
  assert.equal(kernels.filter((k) => k.kernel.name.startsWith("r_")).length, 1, names);
  const windows = 2 * 16 * 16 * 8 * 3 * 3;
  for (const k of kernels)
    assert.ok(
      k.buffers[0]!.nbytes / 4 < windows,
      `${k.kernel.name} writes ${k.buffers[0]!.nbytes / 4} elements (${names})`,
    );
});

test("nn.Conv2d: PyTorch's weight layout and initialisation bound, and its options", () => {
  Tensor.manualSeed(2);
  const conv = new nn.Conv2d(4, 6, [3, 2], { stride: 2, padding: 1, groups: 2 });
  assert.deepEqual(conv.weight.shape, [6, 2, 3, 2]);
  assert.deepEqual(conv.bias!.shape, [6]);
  const bound = 1 / Math.sqrt(2 * 3 * 2);
  for (const v of [...values(conv.weight), ...values(conv.bias!)])
    assert.ok(Math.abs(v) <= bound, `${v} outside +-${bound}`);
  assert.deepEqual(conv.forward(Tensor.zeros([1, 4, 9, 9])).shape, [1, 6, 5, 5]);
});

test("bad convolutions and pools are clear errors naming the shapes", () => {
  const x = Tensor.zeros([1, 3, 8, 8]);
  const expectError = (f: () => unknown, text: string) =>
    assert.throws(f, (e: Error) => e instanceof TsgradError && e.message.includes(text), text);
  expectError(() => x.conv2d(Tensor.zeros([4, 2, 3, 3])), "input [1, 3, 8, 8], weight [4, 2, 3, 3]");
  expectError(() => x.conv2d(Tensor.zeros([4, 3, 9, 3])), "a window spans 9 elements");
  expectError(() => x.conv2d(Tensor.zeros([4, 3, 3, 3]), { stride: [1, 0] }), "stride must be a positive integer");
  expectError(() => x.conv2d(Tensor.zeros([4, 3, 3, 3]), { groups: 2 }), "2 groups must divide the 3 channels");
  expectError(() => x.conv2d(Tensor.zeros([4, 3, 3, 3]), { bias: Tensor.zeros([3]) }), "bias [3] must be [4]");
  expectError(() => Tensor.zeros([8]).maxPool2d({ kernel: 2 }), "fewer than 2 axes");
  expectError(() => x.avgPool2d({ kernel: [2, 2, 2] }), "avgPool2d kernel");
});

test("a convolution's input gradient reads the windows' gradient at affine indices: the skewed rows' modulo is unwrapped under its pad", () => {
  const x = new Tensor(data(2 * 4 * 10 * 10, 1), { device: "JS", dtype: dtypes.float32 })
    .reshape([2, 4, 10, 10])
    .realize();
  const w = new Tensor(data(6 * 4 * 3 * 3, 2), { device: "JS", dtype: dtypes.float32 }).reshape([6, 4, 3, 3]).realize();
  const g = new Tensor(data(2 * 6 * 10 * 10, 3), { device: "JS", dtype: dtypes.float32 })
    .reshape([2, 6, 10, 10])
    .realize();
  x.requiresGrad = true;
  x.conv2d(w, { padding: 1 }).mul(g).sum().backward();
  const { result, items } = recordItems(() => x.grad!.realize());
  // every load of every kernel of the input gradient: no division or modulo left in its index
  const divides = (e: Idx): boolean =>
    e.kind === "div" ||
    e.kind === "mod" ||
    (e.kind === "sum" ? e.terms.some(divides) : e.kind === "mul" ? divides(e.a) : false);
  const loads: Idx[] = [];
  const visit = (stmts: readonly Stmt[]): void => {
    for (const s of stmts) {
      if (s.kind === "loop") visit(s.body);
      else if (s.kind === "def" && s.expr.op === "LOAD") loads.push(s.expr.index);
    }
  };
  for (const item of items) if (item.kind === "kernel" && item.kernel.name.startsWith("r_")) visit(item.kernel.body);
  assert.ok(loads.length > 0);
  assert.deepEqual(
    loads.filter(divides).map((e) => e.key),
    [],
  );
  // and the numbers of the definition: dx[n, c, y, x] = sum over f, i, j of g[n, f, y - i + 1, x - j + 1] * w[f, c, i,
  // j]
  const [gv, wv, dx] = [values(g), values(w), values(result)];
  for (const [n, c, yy, xx] of [
    [0, 0, 0, 0],
    [1, 3, 5, 9],
    [0, 2, 9, 4],
  ] as const) {
    let s = 0;
    for (let f = 0; f < 6; f++)
      for (let i = 0; i < 3; i++)
        for (let j = 0; j < 3; j++) {
          const [oy, ox] = [yy - i + 1, xx - j + 1];
          if (oy >= 0 && oy < 10 && ox >= 0 && ox < 10)
            s += gv[((n * 6 + f) * 10 + oy) * 10 + ox]! * wv[((f * 4 + c) * 3 + i) * 3 + j]!;
        }
    assertClose([dx[((n * 4 + c) * 10 + yy) * 10 + xx]!], [s], { atol: 1e-4, what: `dx[${n}, ${c}, ${yy}, ${xx}]` });
  }
});
