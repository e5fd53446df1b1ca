// Loops the C compiler vectorises wrongly: gcc 12.2 (Debian 12's) summed [[1,2],[3,4],[5,6],[7,8]] over rows as
// [7, 2], dropped elements of padded copies and counted an element of a flipped array twice at -O2 and above. The
// backend probes the compiler for these (runtime/compiler_bugs.ts) and turns loop vectorisation off for the
// kernels with such loops, which the C renderer marks. These are the shapes a differential fuzzer found wrong,
// and the marking.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import type { ExecItem } from "../../src/engine/schedule.ts";
import { cFunction } from "../../src/engine/cpu_programs.ts";
import { PROBES, miscompileWorkarounds, runProbe } from "../../src/runtime/compiler_bugs.ts";
import { renderC } from "../../src/renderer/c.ts";
import type { KernelIR, Stmt } from "../../src/codegen/ir.ts";
import { iadd, iconst, imul, ivar } from "../../src/shape/symbolic.ts";

const skip = Device.isAvailable("CPU") ? false : "no working C compiler";

test("column sums with an accumulator per column are right on the CPU device", { skip }, () => {
  assert.deepEqual(
    new Tensor(
      [
        [1, 2],
        [3, 4],
        [5, 6],
        [7, 8],
      ],
      { device: "CPU" },
    )
      .sum({ axis: 0 })
      .add(1)
      .tolist(),
    [17, 21],
  );
  const t = new Tensor(
    [
      [1, 2, 3, 4],
      [5, 6, 7, 8],
      [9, 10, 11, 12],
      [13, 14, 15, 16],
    ],
    { device: "CPU", dtype: "float32" },
  );
  assert.deepEqual(
    t
      .pad([
        [1, 0],
        [0, 0],
      ])
      .sum({ axis: 0 })
      .tolist(),
    [28, 32, 36, 40],
  );
});

test("a padded copy laid out in rows keeps every element on the CPU device", { skip }, () => {
  const out = new Tensor([1, 2, 3, 4, 5, 6], { device: "CPU" })
    .pad([[6, 38]])
    .reshape([1, 10, 1, 5])
    .contiguous()
    .tolist();
  assert.deepEqual(
    (out as number[][][][]).flat(3).filter((v) => v !== 0),
    [1, 2, 3, 4, 5, 6],
  );
});

/** The C source of the one kernel `build` runs. */
function kernelSource(build: () => Tensor): string {
  const { items } = recordItems(() => build().realize());
  const kernels = items.filter((i): i is ExecItem & { kind: "kernel" } => i.kind === "kernel");
  assert.equal(kernels.length, 1);
  return cFunction(kernels[0]!.kernel, "").code;
}

test("the sum of a flipped array counts each element once on the CPU device", { skip }, () => {
  const bits = new Tensor(Uint8Array.from([0, 0, 1, 0, 1, 0, 1, 1, 1, 0]), { device: "CPU", dtype: "bool" }).reshape([
    1, 5, 1, 2,
  ]);
  assert.deepEqual(
    bits
      .flip([0, 1, 2, 3])
      .mean({ axis: [1, 2, 3] })
      .tolist(),
    [0.5],
  );
  // summed across its layout (axes that do not merge into one loop: a short loop inside another)
  const ten = new Tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], { device: "CPU", dtype: dtypes.float32 }).realize();
  assert.deepEqual(ten.reshape([5, 2]).T.flip([0, 1]).sum().tolist(), 45);
});

test("kernels with grouped or guarded accesses and integer sums are marked; plain elementwise loops are not", {
  skip,
}, () => {
  const on = (dtype: "float32" | "int32") => ({ device: "CPU", dtype });
  const marked = /^TG_FRAGILE_LOOPS void tg_kernel/m;
  assert.match(
    kernelSource(() => new Tensor([1, 2, 3], on("float32")).pad([[2, 2]])),
    marked,
  );
  assert.match(
    kernelSource(() =>
      new Tensor(
        [
          [1, 2],
          [3, 4],
        ],
        on("int32"),
      ).sum({ axis: 0 }),
    ),
    marked,
  );
  const ten = new Tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], on("float32")).realize();
  assert.match(
    kernelSource(() => ten.reshape([5, 2]).T.flip([0, 1]).sum()),
    marked,
  );
  const x = Tensor.arange(0, 4096, 1, { device: "CPU" }).cast(dtypes.float32).realize();
  assert.match(
    kernelSource(() => x.mul(2).add(x.sqrt())),
    /^void tg_kernel/m,
  );
});

test("groups of accesses that walk their buffer forwards are unmarked; a flipped group is marked", { skip }, () => {
  const m = Tensor.arange(0, 4096, 1, { device: "CPU" }).cast(dtypes.float32).reshape([64, 64]).realize();
  const grouped = (code: string) => (code.match(/= b1\[/g)?.length ?? 0) > 1;
  // a row sum's lanes (several accumulators, each reading the next element) and a transposing copy's tile
  for (const build of [() => m.sum({ axis: 1 }), () => m.T.contiguous()]) {
    const code = kernelSource(build);
    assert.ok(grouped(code), code);
    assert.match(code, /^void tg_kernel/m);
  }
  // the transposing copy of a flipped array: its tile reads rows backwards
  const flipped = kernelSource(() => m.T.flip(1).contiguous());
  assert.ok(grouped(flipped), flipped);
  assert.match(flipped, /^TG_FRAGILE_LOOPS void tg_kernel/m);
  assert.deepEqual(Array.from(m.sum({ axis: 1 }).toArray() as Float32Array).slice(0, 2), [2016, 6112]);
  assert.deepEqual(Array.from(m.T.contiguous().toArray() as Float32Array).slice(0, 3), [0, 64, 128]);
  assert.deepEqual(Array.from(m.T.flip(1).contiguous().toArray() as Float32Array).slice(0, 3), [4032, 3968, 3904]);
});

test("a guarded load whose index stays inside its buffer is read unconditionally, unmarked, and the guard selects", {
  skip,
}, () => {
  const build = () => new Tensor([5], { device: "CPU", dtype: dtypes.float32 }).expand([4]).pad([[2, 2]]);
  const code = kernelSource(build);
  assert.match(code, /^void tg_kernel/m);
  assert.doesNotMatch(code, /\? b1\[/);
  assert.deepEqual(build().tolist(), [0, 0, 5, 5, 5, 5, 0, 0]);
});

test("each miscompile probe prints its expected answer when built without optimisation", {
  skip: spawnSync(process.env.CC || "cc", ["--version"]).status === 0 ? false : "no C compiler",
}, () => {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-probe-"));
  try {
    for (const probe of PROBES)
      assert.equal(runProbe(process.env.CC || "cc", ["-O0"], probe.source, dir), probe.expected, probe.name);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the probes built as one program find what each probe built alone finds", {
  skip: spawnSync(process.env.CC || "cc", ["--version"]).status === 0 ? false : "no C compiler",
}, () => {
  const cc = process.env.CC || "cc";
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-probe-"));
  const flags = ["-O3", "-march=native", "-ffp-contract=off", "-fno-trapping-math", "-fno-math-errno"];
  const marker = `-DTG_FRAGILE_LOOPS=__attribute__((optimize("no-tree-loop-vectorize")))`;
  try {
    const alone = PROBES.filter((probe) => runProbe(cc, flags, probe.source, dir) !== probe.expected);
    for (const probe of alone) assert.equal(runProbe(cc, [...flags, marker], probe.source, dir), probe.expected);
    const together = miscompileWorkarounds(cc, "a version", flags, dir);
    assert.deepEqual(
      together.found,
      alone.map((probe) => probe.name),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a sum over neighbouring axes that walk memory as one is one loop, reversed or not, and unmarked", {
  skip,
}, () => {
  const ten = new Tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], { device: "CPU", dtype: dtypes.float32 }).realize();
  for (const build of [
    () => ten.reshape([5, 2]).flip([0, 1]).sum(),
    () => ten.reshape([5, 1, 2]).sum({ axis: [0, 2] }),
  ]) {
    const code = kernelSource(build);
    assert.match(code, /^void tg_kernel/m);
    assert.equal(code.match(/for \(/g)?.length, 1, code);
    assert.deepEqual(Array.from(build().toArray() as Float32Array), [45]);
  }
});

test("a kernel whose loops of several sums all read their terms along the loop is marked (nothing to vectorise there)", () => {
  const f32 = dtypes.float32;
  // sums of b1[r0 * step + 256 * k] over r0, for k < 2
  const kernel = (step: number): KernelIR => {
    const r0 = ivar("r0", 256);
    const body: Stmt[] = [0, 1].flatMap((k): Stmt[] => [
      {
        kind: "def",
        name: `v${k}`,
        dtype: f32,
        expr: { op: "LOAD", buf: 1, index: iadd(imul(r0, step), iconst(256 * k)), valid: [] },
      },
      {
        kind: "def",
        name: `w${k}`,
        dtype: f32,
        expr: { op: "NEG", srcs: [{ kind: "val", name: `v${k}`, dtype: f32 }] },
      },
    ]);
    body.push(
      ...[0, 1].map(
        (k): Stmt => ({
          kind: "update",
          name: `acc${k}`,
          dtype: f32,
          op: "ADD",
          value: { kind: "val", name: `w${k}`, dtype: f32 },
        }),
      ),
    );
    return {
      name: "r_2",
      buffers: [
        { dtype: f32, size: 2 },
        { dtype: f32, size: 512 * step },
      ],
      outputShape: [2],
      flops: 1024,
      parallel: 0,
      opts: "",
      body: [
        ...[0, 1].map((k): Stmt => ({ kind: "acc", name: `acc${k}`, dtype: f32, op: "ADD" })),
        { kind: "loop", var: "r0", size: 256, body },
        ...[0, 1].map(
          (k): Stmt => ({
            kind: "store",
            buf: 0,
            index: iconst(k),
            value: { kind: "val", name: `acc${k}`, dtype: f32 },
            dtype: f32,
          }),
        ),
      ],
    };
  };
  assert.match(renderC(kernel(1), "tg_kernel", {}), /^TG_FRAGILE_LOOPS void tg_kernel/m);
  // lanes two elements apart along the loop: not a sum along it
  assert.match(renderC(kernel(2), "tg_kernel", {}), /^void tg_kernel/m);
});

test("selects on one condition in a loop over groups of accesses not a power of two long are marked; others not", () => {
  const [f32, bool] = [dtypes.float32, dtypes.bool];
  const val = (name: string, dtype = f32) => ({ kind: "val" as const, name, dtype });
  const zero = { kind: "lit" as const, value: 0, dtype: f32 };
  // for i0 < 8, i1 < n: b0[k] = (b1[k] < 0 ? 0 : b3[k]) + (x < 0 ? b3[k] : 0), x being b1[k] (computed again) or b2[k]
  const kernel = (n: number, sameCondition: boolean): KernelIR => {
    const k = iadd(imul(ivar("i0", 8), n), ivar("i1", n));
    const load = (name: string, buf: number): Stmt => ({
      kind: "def",
      name,
      dtype: f32,
      expr: { op: "LOAD", buf, index: k, valid: [] },
    });
    const negative = (name: string, x: string): Stmt => ({
      kind: "def",
      name,
      dtype: bool,
      expr: { op: "CMPLT", srcs: [val(x), zero] },
    });
    const body: Stmt[] = [
      load("x1", 1),
      negative("c", "x1"),
      ...(sameCondition ? [negative("d", "x1")] : [load("x2", 2), negative("d", "x2")]),
      load("v", 3),
      { kind: "def", name: "w1", dtype: f32, expr: { op: "WHERE", srcs: [val("c", bool), zero, val("v")] } },
      { kind: "def", name: "w2", dtype: f32, expr: { op: "WHERE", srcs: [val("d", bool), val("v"), zero] } },
      { kind: "def", name: "s", dtype: f32, expr: { op: "ADD", srcs: [val("w1"), val("w2")] } },
      { kind: "store", buf: 0, index: k, value: val("s"), dtype: f32 },
    ];
    return {
      name: `E_8_${n}`,
      buffers: [0, 1, 2, 3].map(() => ({ dtype: f32, size: 8 * n })),
      outputShape: [8, n],
      flops: 8 * n,
      parallel: 0,
      opts: "",
      body: [{ kind: "loop", var: "i0", size: 8, body: [{ kind: "loop", var: "i1", size: n, body }] }],
    };
  };
  const marked = /^TG_FRAGILE_LOOPS void tg_kernel/m;
  for (const n of [3, 5, 6, 7, 9, 12, 15])
    assert.match(renderC(kernel(n, true), "tg_kernel", {}), marked, `groups of ${n}`);
  for (const n of [2, 4, 8, 16, 17]) assert.doesNotMatch(renderC(kernel(n, true), "tg_kernel", {}), marked, `${n}`);
  // conditions on different values: gcc keeps them apart
  assert.doesNotMatch(renderC(kernel(5, false), "tg_kernel", {}), marked);
});
