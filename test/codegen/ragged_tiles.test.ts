// Ragged register tiles on host backends: a long vector axis without a factor of 8 (BERT's 30522-word
// vocabulary) takes 16 lanes anyway, the last tile along it narrower, instead of 6 or 2 lanes everywhere.
// Each output's sum is the same, so the results are the bits of the kernel without that upcast.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor } from "../../src/index.ts";
import { recordItems, runItem } from "../../src/engine/realize.ts";
import type { ExecItem } from "../../src/engine/schedule.ts";
import { kernelSpecOf, lowerKernel } from "../../src/codegen/lower.ts";
import { testDevices } from "../devices.ts";
import { backendOf } from "../../src/engine/backend.ts";

type KernelItem = ExecItem & { kind: "kernel" };

/** The one reduce kernel that computes `t` (after any packed copies of its operands), run, and its output. */
function runOne(t: Tensor): { item: KernelItem; out: Float32Array } {
  const items = recordItems(() => t.realize()).items.filter((i): i is KernelItem => i.kind === "kernel");
  assert.deepEqual(items.map((i) => i.kernel.name[0]).join(""), `${"E".repeat(items.length - 1)}r`);
  return { item: items.at(-1)!, out: Float32Array.from(t.toArray() as Float32Array) };
}

/** `item`'s kernel lowered again without its vector-axis upcast (and as it is otherwise), run on the same buffers. */
function withoutVectorUpcast(item: KernelItem, vectorAxis: number): Float32Array {
  const spec = kernelSpecOf(item.kernel)!;
  const optsKey = item.kernel.opts;
  const upcast = [...optsKey.matchAll(/(\d+)x(\d+)/g)]
    .map((m) => ({ axis: Number(m[1]), amount: Number(m[2]) }))
    .filter((u) => u.axis !== vectorAxis);
  const parallel = Number(/\|p(\d+)/.exec(optsKey)![1]);
  const outer = /\|o([\d,]+)/.exec(optsKey)?.[1]?.split(",").map(Number) ?? [];
  const kblock = Number(/\|k(\d+)/.exec(optsKey)?.[1] ?? 0);
  const plain = lowerKernel(spec, { upcast, unroll: 1, parallel, outer, kblock });
  runItem({ ...item, kernel: plain });
  return item.buffers[0]!.toTypedArray() as Float32Array;
}

for (const device of testDevices().filter((d) => backendOf(d).hostForms)) {
  test(`${device}: h @ W^T over 1029 columns takes 16-lane tiles, the last one 5 wide, with the bits of the untiled kernel`, () => {
    Tensor.manualSeed(21);
    const h = Tensor.randn([37, 20], { device }).realize();
    const w = Tensor.randn([1029, 20], { device }).realize();
    const { item, out } = runOne(h.matmul(w.transpose(0, 1)));
    assert.match(item.kernel.opts, /^u1x16\b/, item.kernel.opts);
    assert.deepEqual(withoutVectorUpcast(item, 1), out);
  });
}

test("CPU: a ragged tile inside a K-blocked sum (g @ W, 1030 columns, a 6000-long sum)", {
  skip: !testDevices().includes("CPU"),
}, () => {
  Tensor.manualSeed(22);
  const g = Tensor.randn([24, 6000], { device: "CPU" }).realize();
  const w = Tensor.randn([6000, 1030], { device: "CPU" }).realize();
  const { item, out } = runOne(g.matmul(w));
  assert.match(item.kernel.opts, /^u1x16\b.*\|k\d+/, item.kernel.opts);
  assert.deepEqual(withoutVectorUpcast(item, 1), out);
});

test("a vector axis that 8 divides, or a short one, is not ragged", () => {
  const opts = (a: number[], b: number[]): string =>
    runOne(Tensor.empty(a, { device: "JS" }).matmul(Tensor.empty(b, { device: "JS" }))).item.kernel.opts;
  assert.match(opts([8, 16], [16, 2056]), /^u1x8\b/);
  assert.match(opts([8, 16], [16, 102]), /^u1x6\b/);
});

test("a 1-D output's ragged last tile gets a loop of its own, so the full tiles still split across threads", () => {
  Tensor.manualSeed(23);
  // the gradient of a bias over a vocabulary: 160 rows summed into 4099 columns
  const g = Tensor.randn([160, 4099], { device: "JS" }).realize();
  const { item, out } = runOne(g.sum({ axis: 0 }));
  assert.match(item.kernel.opts, /^u0x16\|.*\|p1/, item.kernel.opts);
  assert.equal(item.kernel.parallel, 1);
  // two top-level output loops (the full tiles, the last one's single trip), no reduce loop at the top
  const top = item.kernel.body.filter((s) => s.kind === "loop");
  assert.deepEqual(
    top.map((s) => s.kind === "loop" && [s.var, s.size]),
    [
      ["i0", 256],
      ["i0", 1],
    ],
  );
  const rows = g.toArray() as Float32Array;
  const expected = Array.from({ length: 4099 }, (_, c) =>
    Array.from({ length: 160 }, (_, r) => rows[r * 4099 + c]!).reduce((a, b) => Math.fround(a + b), 0),
  );
  assert.deepEqual(Array.from(out), expected);
});
