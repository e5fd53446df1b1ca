// Chunked tile loops on host backends: one output axis of a register tile walked in chunks of tiles, the chunk
// loop outermost, so a chunk of that axis's operand stays in cache while the other axis's tiles pass (BERT-base's
// tied-weight gradient g^T @ h, h 480 KB). Only the order of the tiles changes: every output is the same sum in
// the same order, so the results are the bits of the unchunked kernel.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, UOp } from "../../src/index.ts";
import { createSchedule } from "../../src/engine/schedule.ts";
import { extensions } from "../../src/engine/search.ts";
import { recordItems, runItem } from "../../src/engine/realize.ts";
import type { ExecItem } from "../../src/engine/schedule.ts";
import { heuristicOpts } from "../../src/codegen/heuristics.ts";
import { kernelSpecOf, lowerKernel } from "../../src/codegen/lower.ts";
import { type KernelOpts, NO_OPTS, optsKey } from "../../src/codegen/opts.ts";
import { testDevices } from "../devices.ts";
import { backendOf } from "../../src/engine/backend.ts";

type KernelItem = ExecItem & { kind: "kernel" };

/** The last kernel item computing `t` (the product; before it, any packed copies of its operands), run. */
function productKernel(t: Tensor): KernelItem {
  const items = recordItems(() => t.realize()).items.filter((i): i is KernelItem => i.kind === "kernel");
  return items.at(-1)!;
}

/** The item's kernel lowered again with `change` applied to the heuristics' options, run on the same buffers. */
function rerun(item: KernelItem, change: (opts: KernelOpts) => KernelOpts): { opts: string; out: Float32Array } {
  const spec = kernelSpecOf(item.kernel)!;
  const kernel = lowerKernel(spec, change(heuristicOpts(spec, lowerKernel(spec, NO_OPTS))));
  item.buffers[0]!.copyin(new Float32Array(item.buffers[0]!.size).fill(Number.NaN));
  runItem({ ...item, kernel });
  return { opts: kernel.opts, out: Float32Array.from(item.buffers[0]!.toTypedArray() as Float32Array) };
}

for (const device of testDevices().filter((d) => backendOf(d).hostForms)) {
  // 96 rows (12 tiles of 8) by 160 columns (10 of 16), and 170 columns: 10 tiles and a last one 10 wide
  for (const n of [160, 170]) {
    test(`${device}: a ${96}x${n} product in chunks of either axis's tiles gives the bits of the unchunked one`, () => {
      Tensor.manualSeed(21);
      const a = Tensor.randn([96, 40], { device }).realize();
      const b = Tensor.randn([40, n], { device }).realize();
      const item = productKernel(a.matmul(b));
      // tiles of 16 columns by 8 rows (170 columns: the heuristics would take 2 lanes, 16 does not divide it)
      const upcast = [
        { axis: 1, amount: 16 },
        { axis: 0, amount: 8 },
      ];
      const plain = rerun(item, (o) => ({ ...o, upcast, chunk: undefined }));
      assert.ok(plain.out.every(Number.isFinite));
      const [rows, vector] = [0, 1];
      for (const chunk of [
        { axis: rows, tiles: 4 },
        { axis: rows, tiles: 3 },
        { axis: vector, tiles: 5 },
        { axis: vector, tiles: 2 },
      ]) {
        for (const outer of [[rows], [vector]]) {
          const chunked = rerun(item, (o) => ({ ...o, upcast, outer, chunk, parallel: 2 }));
          assert.match(chunked.opts, new RegExp(`\\|c${chunk.axis}x${chunk.tiles}`));
          assert.deepEqual(chunked.out, plain.out, `${chunked.opts} vs ${plain.opts}`);
        }
      }
    });
  }

  test(`${device}: chunks that do not divide an axis's tiles are refused`, () => {
    Tensor.manualSeed(22);
    const item = productKernel(Tensor.randn([96, 40], { device }).matmul(Tensor.randn([40, 160], { device })));
    assert.throws(
      () => rerun(item, (o) => ({ ...o, chunk: { axis: 0, tiles: 5 } })),
      /chunks of 5 tiles do not divide axis 0's 12 tiles/,
    );
  });
}

test("BEAM's neighbours of a chunked kernel all lower: half, double or no chunks, none left that no longer divides", () => {
  // BERT-base's tied-weight gradient (g^T @ h, h [160, 768]): rows outermost, 48 column tiles in chunks of 24
  const g = Tensor.empty([160, 30522], { device: "JS" });
  const h = Tensor.empty([160, 768], { device: "JS" });
  const product = g.transpose(0, 1).matmul(h);
  assert.ok(product.node instanceof UOp);
  const kernel = createSchedule([product.node])
    .items.flatMap((i) => (i.kind === "kernel" ? [i.kernel] : []))
    .at(-1)!;
  const spec = kernelSpecOf(kernel)!;
  const plain = lowerKernel(spec, NO_OPTS);
  const opts = heuristicOpts(spec, plain);
  assert.deepEqual(opts.chunk, { axis: 1, tiles: 24 }, kernel.opts);
  const next = extensions(opts, spec, plain);
  const chunks = new Set(next.map((o) => (o.chunk ? o.chunk.tiles : 0)));
  for (const tiles of [0, 12, 24])
    assert.ok(chunks.has(tiles), `no neighbour with ${tiles}-tile chunks: ${[...chunks]}`);
  // one more upcast along the 48 column tiles leaves 24 or fewer: chunks of 24 no longer split them, and go
  for (const o of next) assert.doesNotThrow(() => lowerKernel(spec, o), optsKey(o));
  assert.ok(
    next.some((o) => !o.chunk && o.upcast.length > opts.upcast.length),
    "an extra upcast along the chunked axis should drop chunks that no longer divide",
  );
});
