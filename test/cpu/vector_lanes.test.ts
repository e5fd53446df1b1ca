// A host matmul's register-tile lanes are rendered as C vectors (src/renderer/c_lanes.ts): the same fused
// multiply-adds in the same order as the scalar form, so the results are those of fmaf over k, bit for bit.
import { test } from "node:test";
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import type { Expr, KernelIR, Stmt } from "../../src/codegen/ir.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { C_PRELUDE, C_VECTOR_PRELUDE, renderC } from "../../src/renderer/c.ts";
import { cFunction } from "../../src/engine/cpu_programs.ts";
import { findCompiler, vectorLaneWidths } from "../../src/runtime/compiler_cache.ts";
import { iadd, iconst, imul, ivar, type Idx } from "../../src/shape/symbolic.ts";

const hasCpu = Device.isAvailable("CPU");
/** The vector a run of `lanes` lanes is rendered as on this machine (16 lanes: two of 8 with AVX2), if any. */
const vectorFor = (lanes: number): string | undefined => {
  const width = vectorLaneWidths(C_PRELUDE + C_VECTOR_PRELUDE).find((w) => w <= lanes);
  return width ? `tg_fma${width}(` : undefined;
};
const f32 = dtypes.float32;

/** fmaf(a, b, c) for float32 values: the exact a*b + c rounded once to float32. */
function fmaf(a: number, b: number, c: number): number {
  const p = a * b; // exact: two 24-bit significands fit in a double's 53
  const s = p + c;
  const bb = s - p;
  const err = p - (s - bb) + (c - bb); // s + err == p + c exactly (TwoSum)
  const r = Math.fround(s);
  if (r === s || err === 0) return r;
  // s was rounded to a double: only a tie between two floats can come out wrong, broken by err's sign
  const bits = new Float32Array([r]);
  const word = new Int32Array(bits.buffer);
  word[0]! += r > s === r > 0 ? -1 : 1; // r's neighbour on the other side of s
  const other = bits[0]!;
  if ((r + other) / 2 !== s) return r;
  return err > 0 ? Math.max(r, other) : Math.min(r, other);
}

/** x[m, k] @ w[k, n] as sequential fmaf over k from 0: what the scalar and the vector tile both compute. */
function fmaMatmul(x: Float32Array, w: Float32Array, m: number, k: number, n: number): Float32Array {
  const out = new Float32Array(m * n);
  for (let i = 0; i < m; i++)
    for (let j = 0; j < n; j++) {
      let acc = 0;
      for (let r = 0; r < k; r++) acc = fmaf(x[i * k + r]!, w[r * n + j]!, acc);
      out[i * n + j] = acc;
    }
  return out;
}

const random = (n: number, seed: number): Float32Array => {
  let s = seed;
  return Float32Array.from({ length: n }, () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1);
};

/** Runs `compute` on CPU and returns its kernels' C sources and the result. */
function onCpu(compute: () => Tensor): { codes: string[]; values: Float32Array } {
  let out: Tensor | undefined;
  const { items } = recordItems(() => (out = compute().realize()));
  const codes = items.flatMap((item) => (item.kind === "kernel" ? [cFunction(item.kernel, "").code] : []));
  return { codes, values: out!.toArray() as Float32Array };
}

test("fmaf reference: rounds once, ties broken by what a double dropped", () => {
  assert.equal(fmaf(1 + 2 ** -12, 1 + 2 ** -12, -1), Math.fround(2 ** -11 + 2 ** -24));
  // the exact sum is 1 + 2^-23 + 2^-24 - 2^-54: as a double it is the float32 tie 1 + 2^-23 + 2^-24 (which
  // rounds to even, 1 + 2^-22), but the dropped -2^-54 puts it below: 1 + 2^-23
  const [a, b] = [2 ** -12 * (1 + 2 ** -15), 2 ** -12 * (1 - 2 ** -15)];
  assert.equal(Math.fround(a * b + (1 + 2 ** -23)), 1 + 2 ** -22);
  assert.equal(fmaf(a, b, 1 + 2 ** -23), 1 + 2 ** -23);
  assert.equal(fmaf(3, 5, 0.25), 15.25);
});

for (const [what, m, k, n, transposed, width] of [
  ["a plain tile (16 lanes, 8 rows)", 64, 256, 64, false, 16],
  ["a k-blocked tile, partial sums in the output, ragged last block", 40, 3000, 64, false, 16],
  ["an 8-lane tile (40 columns)", 64, 64, 40, false, 8],
  ["x @ W^T", 64, 512, 96, true, 16],
  // W 19 times x: lanes across x's rows (a masked-LM head's logits), 6 of W's rows a tile (606 = 2 x 3 x 101)
  ["x @ W^T, lanes across x", 32, 64, 606, true, 16],
  ["x @ W^T, lanes across x, a ragged last tile (40 rows)", 40, 64, 720, true, 16],
] as const) {
  test(`matmul: ${what} updates vector accumulators, and equals fmaf over k bit for bit`, { skip: !hasCpu }, () => {
    const xs = random(m * k, 1),
      ws = random(k * n, 2);
    const wT = new Float32Array(k * n);
    for (let r = 0; r < k; r++) for (let j = 0; j < n; j++) wT[j * k + r] = ws[r * n + j]!;
    const on = { device: "CPU", dtype: f32 };
    const x = new Tensor(xs, on).reshape([m, k]).realize();
    const w = (transposed ? new Tensor(wT, on).reshape([n, k]) : new Tensor(ws, on).reshape([k, n])).realize();
    const { codes, values } = onCpu(() => x.matmul(transposed ? w.transpose() : w));
    const vector = vectorFor(width);
    if (vector) {
      const product = codes.find((c) => c.includes(vector));
      assert.ok(product, `no ${vector} in:\n${codes.join("\n")}`);
      assert.ok(!product.includes("fmaf("), "scalar lanes left beside the vectors");
    } else {
      assert.ok(
        codes.every((c) => !c.includes("tg_fma")),
        "vectors rendered for a target without them",
      );
    }
    assert.deepEqual(Array.from(values), Array.from(fmaMatmul(xs, ws, m, k, n)));
  });
}

test("a weight gradient (sum over batch and sequence) takes vector lanes too", { skip: !hasCpu }, () => {
  const [b, s, i, o] = [4, 32, 48, 32];
  const xs = random(b * s * i, 3),
    gs = random(b * s * o, 4);
  const on = { device: "CPU", dtype: f32 };
  const x = new Tensor(xs, on).reshape([b * s, i]).realize();
  const g = new Tensor(gs, on).reshape([b * s, o]).realize();
  const { codes, values } = onCpu(() => x.transpose().matmul(g));
  if (vectorFor(16))
    assert.ok(
      codes.some((c) => /tg_fma(8|16)\(/.test(c)),
      codes.join("\n"),
    );
  const xT = new Float32Array(i * b * s);
  for (let r = 0; r < b * s; r++) for (let c = 0; c < i; c++) xT[c * b * s + r] = xs[r * i + c]!;
  assert.deepEqual(Array.from(values), Array.from(fmaMatmul(xT, gs, i, b * s, o)));
});

// hand-made kernels: for i0 { acc0..acc15; for r0 { x = b1[i0*K + r0]; w_j = b2[r0*16 + j]; acc_j += x * w_j };
// b0[i0*16 + j] = acc_j }
const K = 8;
const val = (name: string) => ({ kind: "val" as const, name, dtype: f32 });
const def = (name: string, expr: Expr): Stmt => ({ kind: "def", name, dtype: f32, expr });
const load = (name: string, buf: number, index: Idx): Stmt => def(name, { op: "LOAD", buf, index, valid: [] });
const [i0, r0] = [ivar("i0", 4), ivar("r0", K)];

function tile(opts: { stride?: number; unfused?: boolean; readAcc?: boolean; nested?: boolean } = {}): KernelIR {
  const lanes = Array.from({ length: 16 }, (_, j) => j);
  const inner: Stmt[] = [load("x", 1, iadd(imul(i0, K), r0))];
  for (const j of lanes)
    inner.push(
      load(`w${j}`, 2, iadd(imul(r0, 16), iconst(j * (opts.stride ?? 1)))),
      def(`p${j}`, { op: "MUL", srcs: [val("x"), val(`w${j}`)] }),
    );
  for (const j of lanes)
    inner.push({
      kind: "update",
      name: `acc${j}`,
      dtype: f32,
      op: "ADD",
      value: val(`p${j}`),
      ...(opts.unfused ? { unfused: true } : {}),
    });
  if (opts.readAcc)
    inner.push(def("peek", { op: "ADD", srcs: [val("acc3"), val("x")] }), {
      kind: "store",
      buf: 0,
      index: i0,
      value: val("peek"),
      dtype: f32,
    });
  const body: Stmt[] = [
    {
      kind: "loop",
      var: "i0",
      size: 4,
      body: [
        ...lanes.map((j): Stmt => ({ kind: "acc", name: `acc${j}`, dtype: f32, op: "ADD" })),
        opts.nested
          ? { kind: "loop", var: "r1", size: 3, body: [{ kind: "loop", var: "r0", size: K, body: inner }] }
          : { kind: "loop", var: "r0", size: K, body: inner },
        ...lanes.map(
          (j): Stmt => ({
            kind: "store",
            buf: 0,
            index: iadd(imul(i0, 16), iconst(j)),
            value: val(`acc${j}`),
            dtype: f32,
          }),
        ),
      ],
    },
  ];
  return {
    name: "r_4_16",
    buffers: [
      { dtype: f32, size: 64 },
      { dtype: f32, size: 4 * K },
      { dtype: f32, size: 16 * K * 16 },
    ],
    body,
    outputShape: [4, 16],
    flops: 0,
    parallel: 0,
    opts: "",
  };
}

test("a run of fused products over 16 neighbouring loads becomes one vector update, packed before its loop and unpacked after", () => {
  const code = renderC(tile(), "k", { vectorLanes: [16, 8] });
  // 8-lane vectors only (AVX2): two a run
  assert.match(
    renderC(tile(), "k", { vectorLanes: [8] }),
    /acc0_v = tg_fma8\(x, &b2\[r0\*16\], acc0_v\);\s+acc8_v = tg_fma8\(x, &b2\[\(r0\*16 \+ 8\)\], acc8_v\);/,
  );
  // none: the scalar form
  assert.doesNotMatch(renderC(tile(), "k", {}), /tg_fma/);
  assert.match(code, /tg_f32x16 acc0_v = \{acc0, acc1, .*acc15\};/);
  assert.match(code, /acc0_v = tg_fma16\(x, &b2\[r0\*16\], acc0_v\);/);
  assert.match(code, /acc0 = acc0_v\[0\]; acc1 = acc0_v\[1\];.* acc15 = acc0_v\[15\];/);
  // the lanes' products and loads are gone; the scalar the row broadcasts stays
  assert.doesNotMatch(code, /fmaf|float p\d+|float w\d+/);
  assert.match(code, /float x = b1\[/);
});

test("a sum over two loops packs its vectors once, around the outer loop", () => {
  const code = renderC(tile({ nested: true }), "k", { vectorLanes: [16, 8] });
  assert.match(code, /tg_f32x16 acc0_v = \{[^}]*\};\s+for \(int32_t r1 = 0; r1 < 3; r1\+\+\) \{\s+for \(int32_t r0/);
  assert.match(code, /acc0_v = tg_fma16\(/);
  assert.match(code, /\}\s+\}\s+acc0 = acc0_v\[0\];/);
});

test("lanes stay scalar when the loads are not neighbours or the loop reads an accumulator", () => {
  for (const opts of [{ stride: 2 }, { readAcc: true }]) {
    const code = renderC(tile(opts), "k", { vectorLanes: [16, 8] });
    assert.doesNotMatch(code, /tg_fma16\(|_v = /, JSON.stringify(opts));
  }
});

// lanes across the tile's first axis: for i0 { for r0 { h_l = b1[r0*32 + l] (32 lanes, two vectors);
// e_r = b2[(i0*2 + r)*K + r0]; acc_{l,r} += h_l * e_r }, updated lane by lane, each lane's 2 rows together
function lanesAcross(order: "lanes-first" | "rows-first"): KernelIR {
  const [lanes, rows] = [32, 2];
  const inner: Stmt[] = [];
  for (let r = 0; r < rows; r++) inner.push(load(`e${r}`, 2, iadd(imul(i0, rows * K), iconst(r * K), r0)));
  for (let l = 0; l < lanes; l++) inner.push(load(`h${l}`, 1, iadd(imul(r0, lanes), iconst(l))));
  const pairs = Array.from({ length: lanes * rows }, (_, i) =>
    order === "lanes-first" ? { l: Math.floor(i / rows), r: i % rows } : { l: i % lanes, r: Math.floor(i / lanes) },
  );
  for (const { l, r } of pairs) inner.push(def(`p${l}_${r}`, { op: "MUL", srcs: [val(`h${l}`), val(`e${r}`)] }));
  for (const { l, r } of pairs)
    inner.push({ kind: "update", name: `acc${l}_${r}`, dtype: f32, op: "ADD", value: val(`p${l}_${r}`) });
  const accs = pairs.map(({ l, r }) => `acc${l}_${r}`);
  return {
    name: "r_4_64",
    buffers: [
      { dtype: f32, size: 4 * 64 },
      { dtype: f32, size: K * lanes },
      { dtype: f32, size: 4 * rows * K },
    ],
    body: [
      {
        kind: "loop",
        var: "i0",
        size: 4,
        body: [
          ...accs.map((name): Stmt => ({ kind: "acc", name, dtype: f32, op: "ADD" })),
          { kind: "loop", var: "r0", size: K, body: inner },
          ...pairs.map(
            ({ l, r }): Stmt => ({
              kind: "store",
              buf: 0,
              index: iadd(imul(i0, 64), iconst(r * lanes + l)),
              value: val(`acc${l}_${r}`),
              dtype: f32,
            }),
          ),
        ],
      },
    ],
    outputShape: [4, 64],
    flops: 0,
    parallel: 0,
    opts: "",
  };
}

test("lanes that are not neighbouring updates (each lane's rows together, two vectors of them) are vector runs too", () => {
  for (const order of ["lanes-first", "rows-first"] as const) {
    const code = renderC(lanesAcross(order), "k", { vectorLanes: [16, 8] });
    // two rows x two vectors of 16 lanes, each lane's loads from one run of b1, the row's scalar broadcast
    for (const [row, at] of [
      [0, "r0*32"],
      [0, "(r0*32 + 16)"],
      [1, "r0*32"],
      [1, "(r0*32 + 16)"],
    ] as const)
      assert.ok(
        code.includes(`tg_fma16(e${row}, &b1[${at}], `),
        `${order}: no vector update of row ${row} at ${at}:\n${code}`,
      );
    assert.doesNotMatch(code, /fmaf\(/, order);
  }
});

test("products that must not fuse are a vector sum of separately rounded products", () => {
  const code = renderC(tile({ unfused: true }), "k", { vectorLanes: [16, 8] });
  assert.match(code, /acc0_v = acc0_v \+ \(tg_splat16\(x\) \* tg_ld16\(&b2\[r0\*16\]\)\);/);
  assert.doesNotMatch(code, /fma/);
});

// a split sum's kernel: for i0 { acc0..acc15; for r0 { t_j = term(b1[i0*256 + r0*16 + j], b2[...]) ; acc_j += t_j };
// b0[i0*16 + j] = acc_j }
type Term = (x: string, y: string, j: number, out: Stmt[], hoisted: Stmt[]) => string;
function splitSum(term: Term, opts: { guarded?: boolean } = {}): KernelIR {
  const lanes = Array.from({ length: 16 }, (_, j) => j);
  const inner: Stmt[] = [],
    hoisted: Stmt[] = [];
  const at = (j: number): Idx => iadd(iadd(imul(i0, 256), imul(ivar("r0", 16), 16)), iconst(j));
  for (const j of lanes) {
    inner.push(
      def(`x${j}`, {
        op: "LOAD",
        buf: 1,
        index: at(j),
        valid: opts.guarded ? [{ expr: ivar("r0", 16), lo: 0, hi: 15 }] : [],
      }),
    );
    inner.push(load(`y${j}`, 2, at(j)));
    inner.push({
      kind: "def",
      name: `m${j}`,
      dtype: dtypes.bool,
      expr: { op: "LOAD", buf: 3, index: at(j), valid: [] },
    });
    inner.push({
      kind: "update",
      name: `acc${j}`,
      dtype: f32,
      op: "ADD",
      value: val(term(`x${j}`, `y${j}`, j, inner, hoisted)),
    });
  }
  const body: Stmt[] = [
    {
      kind: "loop",
      var: "i0",
      size: 4,
      body: [
        load("g", 2, i0),
        ...hoisted,
        ...lanes.map((j): Stmt => ({ kind: "acc", name: `acc${j}`, dtype: f32, op: "ADD" })),
        { kind: "loop", var: "r0", size: 16, body: inner },
        ...lanes.map(
          (j): Stmt => ({
            kind: "store",
            buf: 0,
            index: iadd(imul(i0, 16), iconst(j)),
            value: val(`acc${j}`),
            dtype: f32,
          }),
        ),
      ],
    },
  ];
  return {
    name: "r_4_16",
    buffers: [
      { dtype: f32, size: 64 },
      { dtype: f32, size: 1024 },
      { dtype: f32, size: 1024 },
      { dtype: dtypes.bool, size: 1024 },
    ],
    body,
    outputShape: [4, 16],
    flops: 0,
    parallel: 0,
    opts: "",
  };
}
const TERMS: [string, Term][] = [
  [
    "squares (fused, as the scalar fmaf)",
    (x, _y, j, out) => (out.push(def(`t${j}`, { op: "MUL", srcs: [val(x), val(x)] })), `t${j}`),
  ],
  ["plain loads", (x) => x],
  [
    "negated sums scaled by one value",
    (x, y, j, out) => {
      out.push(def(`s${j}`, { op: "ADD", srcs: [val(x), val(y)] }), def(`n${j}`, { op: "NEG", srcs: [val(`s${j}`)] }));
      out.push(
        def(`t${j}`, { op: "MUL", srcs: [val(`n${j}`), { kind: "lit", value: 0.375, dtype: f32 }] }),
        def(`u${j}`, { op: "ADD", srcs: [val(`t${j}`), val(y)] }),
      );
      return `u${j}`;
    },
  ],
  // a bias read once a strip, lane by lane, before the loop (neighbouring loads the lowering hoisted)
  [
    "plus neighbouring values hoisted out of the loop, times the other load",
    (x, y, j, out, hoisted) => {
      hoisted.push(load(`c${j}`, 2, iadd(imul(i0, 16), iconst(j))));
      out.push(
        def(`s${j}`, { op: "ADD", srcs: [val(x), val(`c${j}`)] }),
        def(`t${j}`, { op: "MUL", srcs: [val(`s${j}`), val(y)] }),
      );
      return `t${j}`;
    },
  ],
  // a dropout's select by kept elements, times a value hoisted out of the loop once a lane (copies of 1/g)
  [
    "selects by neighbouring bools, times one hoisted value",
    (x, y, j, out, hoisted) => {
      hoisted.push(def(`h${j}`, { op: "RECIP", srcs: [val("g")] }));
      out.push(
        def(`k${j}`, {
          op: "WHERE",
          srcs: [{ kind: "val", name: `m${j}`, dtype: dtypes.bool }, val(x), { kind: "lit", value: 0, dtype: f32 }],
        }),
      );
      out.push(
        def(`t${j}`, { op: "MUL", srcs: [val(`k${j}`), val(`h${j}`)] }),
        def(`u${j}`, { op: "ADD", srcs: [val(`t${j}`), val(y)] }),
      );
      return `u${j}`;
    },
  ],
];

test("a split sum's 16 lanes over neighbouring loads are one vector, their terms vector expressions", () => {
  const squares = renderC(splitSum(TERMS[0]![1]), "k", { vectorLanes: [16, 8] });
  assert.match(
    squares,
    /acc0_v = tg_vfma16\(tg_ld16\(&b1\[\(i0\*256 \+ r0\*16\)\]\), tg_ld16\(&b1\[\(i0\*256 \+ r0\*16\)\]\), acc0_v\);/,
  );
  assert.match(
    renderC(splitSum(TERMS[1]![1]), "k", { vectorLanes: [16, 8] }),
    /acc0_v = acc0_v \+ tg_ld16\(&b1\[\(i0\*256 \+ r0\*16\)\]\);/,
  );
  assert.match(
    renderC(splitSum(TERMS[2]![1]), "k", { vectorLanes: [8] }),
    /acc0_v = acc0_v \+ \(\(\(-\(tg_ld8\(&b1\[[^\]]*\]\) \+ tg_ld8\(&b2\[[^\]]*\]\)\)\) \* tg_splat8\(0\.375[0-9]*f\)\) \+ tg_ld8\(&b2\[/,
  );
  assert.match(
    renderC(splitSum(TERMS[3]![1]), "k", { vectorLanes: [16, 8] }),
    /acc0_v = tg_vfma16\(\(tg_ld16\(&b1\[[^\]]*\]\) \+ tg_ld16\(&b2\[i0\*16\]\)\), tg_ld16\(&b2\[\(i0\*256/,
  );
  assert.match(
    renderC(splitSum(TERMS[4]![1]), "k", { vectorLanes: [16, 8] }),
    /acc0_v = acc0_v \+ \(\(tg_sel16\(tg_mask16\(&b3\[[^\]]*\]\), tg_ld16\(&b1\[[^\]]*\]\), tg_splat16\(0\.0*f\)\) \* tg_splat16\(h0\)\) \+ tg_ld16\(&b2\[/,
  );
  // guarded loads (a pad's edge) stay scalar
  assert.doesNotMatch(renderC(splitSum(TERMS[0]![1], { guarded: true }), "k", { vectorLanes: [16, 8] }), /_v = /);
});

test("split sums as vectors compute the scalar form's sums bit for bit", { skip: !hasCpu || !vectorFor(16) }, () => {
  // each kernel rendered both ways into one program, run on the same inputs, outputs compared byte for byte
  const widths = vectorLaneWidths(C_PRELUDE + C_VECTOR_PRELUDE);
  const parts = TERMS.map(([, term], t) =>
    [renderC(splitSum(term), `scalar${t}`, {}), renderC(splitSum(term), `vector${t}`, { vectorLanes: widths })].join(
      "\n",
    ),
  );
  assert.ok(
    parts.every((p) => p.includes("_v = ")),
    "a kernel took no vector",
  );
  const main = `#include <stdio.h>
int main(void) {
  static float a[1024], b[1024], o1[64], o2[64];
  static uint8_t m[1024];
  unsigned s = 12345;
  for (int i = 0; i < 1024; i++) { s = s * 1103515245u + 12345u; a[i] = (float)(int)(s >> 8) / 8388608.0f - 1.0f; s = s * 1103515245u + 12345u; b[i] = (float)(int)(s >> 8) / 4194304.0f; m[i] = (s >> 3) % 10 != 0; }
  ${TERMS.map((_, t) => `scalar${t}(o1, a, b, m, 1); vector${t}(o2, a, b, m, 1); if (memcmp(o1, o2, sizeof o1)) { printf("term ${t} differs\\n"); return 1; }`).join("\n  ")}
  printf("same\\n");
  return 0;
}`;
  assert.equal(compileAndRun([...parts, main]), "same");
});

/** Builds the kernels and `main` after the preludes with the kernels' own compiler flags, runs it: its output. */
function compileAndRun(sources: readonly string[]): string {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-lanes-"));
  try {
    writeFileSync(join(dir, "k.c"), [C_PRELUDE, C_VECTOR_PRELUDE, ...sources].join("\n"));
    const compiler = findCompiler()!;
    const flags = compiler.flags.filter((f) => f !== "-shared" && f !== "-fPIC" && !f.startsWith("-Wl,"));
    const build = spawnSync(compiler.command, [...flags, "-o", join(dir, "k"), join(dir, "k.c"), "-lm"], {
      encoding: "utf8",
    });
    assert.equal(build.status, 0, build.stderr);
    const run = spawnSync(join(dir, "k"), { encoding: "utf8" });
    assert.equal(run.status, 0, run.stdout + run.stderr);
    return run.stdout.trim();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// a softmax's row max over masked scores: for i0 { acc_j = -inf; for r0 { acc_j = max(acc_j, x_j * 0.125 + (1 -
// (float)m_j) * -10000) } }
function splitMax(): KernelIR {
  const lanes = Array.from({ length: 16 }, (_, j) => j);
  const at = (j: number): Idx => iadd(iadd(imul(i0, 256), imul(ivar("r0", 16), 16)), iconst(j));
  const lit = (value: number) => ({ kind: "lit" as const, value, dtype: f32 });
  const inner: Stmt[] = [];
  for (const j of lanes) {
    inner.push(load(`x${j}`, 1, at(j)), {
      kind: "def",
      name: `m${j}`,
      dtype: dtypes.int32,
      expr: { op: "LOAD", buf: 2, index: at(j), valid: [] },
    });
    inner.push(
      def(`c${j}`, { op: "CAST", srcs: [{ kind: "val", name: `m${j}`, dtype: dtypes.int32 }] }),
      def(`n${j}`, { op: "NEG", srcs: [val(`c${j}`)] }),
    );
    inner.push(
      def(`s${j}`, { op: "ADD", srcs: [val(`n${j}`), lit(1)] }),
      def(`t${j}`, { op: "MUL", srcs: [val(`s${j}`), lit(-10000)] }),
    );
    inner.push(
      def(`u${j}`, { op: "MUL", srcs: [val(`x${j}`), lit(0.125)] }),
      def(`v${j}`, { op: "ADD", srcs: [val(`u${j}`), val(`t${j}`)] }),
    );
    inner.push({ kind: "update", name: `acc${j}`, dtype: f32, op: "MAX", value: val(`v${j}`) });
  }
  const body: Stmt[] = [
    {
      kind: "loop",
      var: "i0",
      size: 4,
      body: [
        ...lanes.map((j): Stmt => ({ kind: "acc", name: `acc${j}`, dtype: f32, op: "MAX" })),
        { kind: "loop", var: "r0", size: 16, body: inner },
        ...lanes.map(
          (j): Stmt => ({
            kind: "store",
            buf: 0,
            index: iadd(imul(i0, 16), iconst(j)),
            value: val(`acc${j}`),
            dtype: f32,
          }),
        ),
      ],
    },
  ];
  return {
    name: "r_4_16",
    buffers: [
      { dtype: f32, size: 64 },
      { dtype: f32, size: 1024 },
      { dtype: dtypes.int32, size: 1024 },
    ],
    body,
    outputShape: [4, 16],
    flops: 0,
    parallel: 0,
    opts: "",
  };
}

test("a split max's lanes are one vector max (NaN, -0 and -inf kept as the scalar form keeps them), int32 loads converted as vectors", {
  skip: !hasCpu || !vectorFor(16),
}, () => {
  const widths = vectorLaneWidths(C_PRELUDE + C_VECTOR_PRELUDE);
  const vector = renderC(splitMax(), "vector", { vectorLanes: widths });
  assert.match(
    vector,
    /acc0_v = tg_vmax(16|8)\(acc0_v, \(\(tg_ld(16|8)\(&b1\[[^\]]*\]\) \* tg_splat(16|8)\(0\.125[0-9]*f\)\) \+ \(\(\(-tg_ldi(16|8)\(&b2\[/,
  );
  const main = `#include <stdio.h>
int main(void) {
  static float x[1024], o1[64], o2[64];
  static int32_t m[1024];
  unsigned s = 777;
  for (int i = 0; i < 1024; i++) { s = s * 1103515245u + 12345u; x[i] = (float)(int)(s >> 8) / 8388608.0f - 1.0f; m[i] = (s >> 4) % 3 != 0; }
  /* row 1: a NaN; row 2: zeros of both signs only; row 3: -inf where every mask is 1 */
  x[300] = NAN;
  for (int i = 512; i < 768; i++) { x[i] = (i % 2) ? -0.0f : 0.0f; m[i] = 1; }
  for (int i = 768; i < 1024; i++) { x[i] = -INFINITY; m[i] = 1; }
  scalar(o1, x, m, 1); vector(o2, x, m, 1);
  if (memcmp(o1, o2, sizeof o1)) { printf("differs\\n"); return 1; }
  printf("same %d %d %d\\n", o1[28] != o1[28], signbit(o1[32]) != 0 || signbit(o1[33]) != 0, isinf(o1[48]) != 0);
  return 0;
}`;
  // the NaN row's lane holds NaN, the zeros row has a -0 max somewhere, the -inf row stays -inf
  assert.equal(compileAndRun([renderC(splitMax(), "scalar", {}), vector, main]), "same 1 1 1");
});

test("the vector widths follow the machine's instruction sets (the compiler's macros for -march=native)", {
  skip: !hasCpu || !!process.env.CC || !existsSync("/proc/cpuinfo"),
}, () => {
  const flags = new Set(/^flags\s*:(.*)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1]?.trim().split(/\s+/) ?? []);
  const expected = flags.has("avx512f") ? [16, 8] : flags.has("avx") && flags.has("fma") ? [8] : [];
  assert.deepEqual(vectorLaneWidths(C_PRELUDE + C_VECTOR_PRELUDE), expected);
});

test("a compiler without the helpers' builtins gets the scalar form, and its kernels still build", {
  skip: !hasCpu || process.platform === "win32",
}, () => {
  // the system compiler, with the two x86 builtins the vector helpers call made unknown
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-lanes-cc-"));
  try {
    const cc = join(dir, "cc");
    writeFileSync(
      cc,
      `#!/bin/sh\nexec ${process.env.CC || "cc"} "$@" -D__builtin_ia32_vfmaddps256=tg_missing -D__builtin_ia32_vfmaddps512_mask=tg_missing\n`,
    );
    chmodSync(cc, 0o755);
    const child = join(import.meta.dirname, "small-matmul-child.ts");
    const run = spawnSync(process.execPath, ["--import", "tsx", child], {
      env: { ...process.env, CC: cc, BEAM: "", TSGRAD_CACHE: join(dir, "cache") },
      encoding: "utf8",
    });
    assert.equal(run.status, 0, run.stderr);
    const x = Array.from({ length: 4 * 6 }, (_, i) => ((i * 7) % 11) - 5),
      w = Array.from({ length: 6 * 2 }, (_, i) => ((i * 5) % 7) * 0.25);
    const expected = Array.from(
      { length: 8 },
      (_, o) =>
        Array.from({ length: 6 }, (_, k) => x[Math.floor(o / 2) * 6 + k]! * w[k * 2 + (o % 2)]!).reduce(
          (a, b) => a + b,
          0,
        ) + 1,
    );
    assert.deepEqual((JSON.parse(run.stdout) as { values: number[] }).values, expected);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
