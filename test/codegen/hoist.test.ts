// Loop-invariant definitions move out of their loops before the C compiler sees a kernel (src/renderer/hoist.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import type { Expr, Stmt } from "../../src/codegen/ir.ts";
import { hoistInvariants } from "../../src/renderer/hoist.ts";
import { iadd, imul, ivar } from "../../src/shape/symbolic.ts";

const f32 = dtypes.float32;
const load = (name: string, buf: number, index: ReturnType<typeof ivar>): Stmt => ({
  kind: "def",
  name,
  dtype: f32,
  expr: { op: "LOAD", buf, index, valid: [] },
});
const mul = (name: string, a: string, b: string): Stmt => ({
  kind: "def",
  name,
  dtype: f32,
  expr: {
    op: "MUL",
    srcs: [
      { kind: "val", name: a, dtype: f32 },
      { kind: "val", name: b, dtype: f32 },
    ],
  } as Expr,
});
const loop = (v: string, size: number, body: Stmt[], serial = false): Stmt =>
  serial ? { kind: "loop", var: v, size, body, serial } : { kind: "loop", var: v, size, body };
const store = (value: string, index: ReturnType<typeof ivar>): Stmt => ({
  kind: "store",
  buf: 0,
  index,
  value: { kind: "val", name: value, dtype: f32 },
  dtype: f32,
});
const [i0, i1] = [ivar("i0", 4), ivar("i1", 8)];
const row = iadd(imul(i0, 8), i1);

/** The names of the definitions directly in `stmts` (not in nested loops), and the loop's body's. */
const defsAt = (stmts: readonly Stmt[]): string[] => stmts.flatMap((s) => (s.kind === "def" ? [s.name] : []));
const loopIn = (stmts: readonly Stmt[]): Stmt & { kind: "loop" } =>
  stmts.find((s): s is Stmt & { kind: "loop" } => s.kind === "loop")!;

// for i0 { for i1 { x = b1[i0*8+i1]; m = b2[i0]; s = m*m; y = x*s; b0[i0*8+i1] = y } }
const kernel = (): Stmt[] => [
  loop("i0", 4, [
    loop("i1", 8, [load("x", 1, row), load("m", 2, i0), mul("s", "m", "m"), mul("y", "x", "s"), store("y", row)]),
  ]),
];

test("a row's scalar and what is computed from it move before the loop over the row; what reads the loop's variable stays", () => {
  const out = hoistInvariants(kernel(), 1);
  const outer = loopIn(out);
  assert.deepEqual(defsAt(outer.body), ["m", "s"]);
  assert.deepEqual(defsAt(loopIn(outer.body).body), ["x", "y"]);
  // nothing reads only constants here, so nothing leaves the outer loop
  assert.deepEqual(defsAt(out), []);
});

test("loads of the output and of slots the kernel also writes stay in place", () => {
  const body: Stmt[] = [
    loop("i0", 4, [loop("i1", 8, [load("p", 0, i0), load("m", 2, i0), mul("y", "p", "m"), store("y", row)])]),
  ];
  const pinned = loopIn(hoistInvariants(body, 1, new Set([0, 2])));
  assert.deepEqual(defsAt(pinned.body), []);
  const free = loopIn(hoistInvariants(body, 1));
  // the output's load stays (and so does what reads it); slot 2's moves when nothing pins it
  assert.deepEqual(defsAt(free.body), ["m"]);
});

test("nothing lands between loops OpenMP collapses, and serial loops keep their bodies", () => {
  const collapsed = hoistInvariants(kernel(), 2);
  const outer = loopIn(collapsed);
  assert.equal(outer.body.length, 1);
  assert.deepEqual(defsAt(loopIn(outer.body).body), ["x", "m", "s", "y"]);
  const serial = hoistInvariants([loop("kb", 2, kernel(), true)], 1);
  assert.deepEqual(defsAt(loopIn(serial).body), []);
  assert.deepEqual(defsAt(loopIn(loopIn(serial).body).body), ["m", "s"]);
});

test("a value read from an accumulator the loop updates stays in the loop", () => {
  const body: Stmt[] = [
    loop("i0", 4, [
      { kind: "acc", name: "acc0", dtype: f32, op: "ADD" },
      loop("r0", 8, [
        load("x", 1, iadd(imul(i0, 8), ivar("r0", 8))),
        { kind: "update", name: "acc0", dtype: f32, op: "ADD", value: { kind: "val", name: "x", dtype: f32 } },
        mul("z", "acc0", "acc0"),
        store("z", row),
      ]),
    ]),
  ];
  const inner = loopIn(loopIn(hoistInvariants(body, 1)).body);
  assert.deepEqual(defsAt(inner.body), ["x", "z"]);
});

test("a layer norm's backward (row scalars beside a dropout mask) gives the JS device's values on the CPU", {
  skip: !Device.isAvailable("CPU"),
}, () => {
  const run = (device: string): number[] => {
    Tensor.manualSeed(3);
    const x = Tensor.randn([64, 96], { device, requiresGrad: true });
    const g = Tensor.randn([96], { device, requiresGrad: true });
    x.layerNorm().mul(g).dropout(0.1).square().sum().backward();
    return Array.from(x.grad!.toArray() as Float32Array);
  };
  Tensor.training = true;
  try {
    assert.deepEqual(run("CPU"), run("JS"));
  } finally {
    Tensor.training = false;
  }
});

test("in a K-blocked kernel the collapsed loops start inside the serial loop over blocks: nothing lands between them", () => {
  // for kb (serial) { for i0 { for i1 { ... } } } with 2 loops collapsed: i0 and i1, inside kb. m reads only
  // i0: it may not sit between i0 and i1 (gcc: "not enough perfectly nested loops"), so it stays in i1
  const blocked = hoistInvariants([loop("kb", 2, kernel(), true)], 2);
  const outer = loopIn(loopIn(blocked).body);
  assert.equal(outer.var, "i0");
  assert.equal(outer.body.length, 1);
  assert.deepEqual(defsAt(loopIn(outer.body).body), ["x", "m", "s", "y"]);
});
