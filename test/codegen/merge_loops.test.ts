// Nested reduce loops merged into one (codegen/merge_loops.ts): the merged kernel computes what the nest
// did, with one stride where the nest walks memory as one loop, and with / and % where it does not.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor } from "../../src/index.ts";
import type { KernelIR, Stmt } from "../../src/codegen/ir.ts";
import type { ExecItem } from "../../src/engine/schedule.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { mergeNestedLoops } from "../../src/codegen/merge_loops.ts";
import { kernelSpecOf, lowerKernel } from "../../src/codegen/lower.ts";
import { NO_OPTS } from "../../src/codegen/opts.ts";
import type { UOp } from "../../src/uop.ts";
import { backendOf } from "../../src/engine/backend.ts";

type KernelItem = ExecItem & { kind: "kernel" };

/**
 * The last kernel `build` runs on JS, with its buffers (its output already computed), lowered again without the
 * host backends' forms: the nest as a GPU backend gets it (the host lowering merges summed axes itself).
 */
function lastKernel(build: () => Tensor): KernelItem {
  const root = build();
  const value = root.node as UOp; // (realize() swaps it for its buffer)
  const last = recordItems(() => root.realize())
    .items.filter((item) => item.kind === "kernel")
    .at(-1) as KernelItem | undefined;
  assert.ok(last, "no kernel ran");
  const spec = kernelSpecOf(last.kernel)!;
  return { ...last, kernel: lowerKernel({ ...spec, value, host: false }, NO_OPTS) };
}

const loops = (stmts: readonly Stmt[]): { size: number; depth: number }[] =>
  stmts.flatMap((s) =>
    s.kind === "loop"
      ? [{ size: s.size, depth: 1 + Math.max(0, ...loops(s.body).map((l) => l.depth)) }, ...loops(s.body)]
      : [],
  );

/** Runs `kernel` on the item's buffers and returns the output; the item's own output first, for comparison. */
function runBoth(item: KernelItem, kernel: KernelIR): [number[], number[]] {
  const before = Array.from(item.buffers[0]!.toTypedArray() as Float32Array);
  backendOf("JS").compile(kernel).run(item.buffers);
  return [before, Array.from(item.buffers[0]!.toTypedArray() as Float32Array)];
}

const x = Tensor.rand([8, 16, 32], { device: "JS" }).realize();

test("a sum over two outer axes becomes one loop reading with one stride, and gives the same sums", () => {
  const item = lastKernel(() => x.sum({ axis: [0, 1] }));
  const merged = mergeNestedLoops(item.kernel);
  assert.notEqual(merged, item.kernel);
  assert.deepEqual(
    loops(merged.body).filter((l) => l.size === 128),
    [{ size: 128, depth: 1 }],
  );
  const [before, after] = runBoth(item, merged);
  assert.deepEqual(after, before);
});

test("a nest that reads through a permute merges with / and %, and gives the same sums", () => {
  const item = lastKernel(() =>
    x
      .permute([1, 0, 2])
      .contiguous()
      .add(x.permute([1, 0, 2]))
      .sum({ axis: [0, 1] }),
  );
  const merged = mergeNestedLoops(item.kernel);
  assert.ok(loops(merged.body).some((l) => l.size === 128));
  const [before, after] = runBoth(item, merged);
  assert.deepEqual(after, before);
});

test("a padded, flipped nest keeps its bounds and gives the same maxima", () => {
  const item = lastKernel(() =>
    x
      .pad([
        [1, 2],
        [0, 3],
        [0, 0],
      ])
      .flip(0)
      .max({ axis: [0, 1] }),
  );
  const merged = mergeNestedLoops(item.kernel);
  assert.ok(loops(merged.body).some((l) => l.size === 11 * 19));
  const [before, after] = runBoth(item, merged);
  assert.deepEqual(after, before);
});

test("output loops and single loops stay as they are", () => {
  const elementwise = lastKernel(() => x.mul(2));
  assert.equal(mergeNestedLoops(elementwise.kernel), elementwise.kernel);
  const rowSum = lastKernel(() => x.sum({ axis: 2 }));
  assert.equal(mergeNestedLoops(rowSum.kernel), rowSum.kernel);
});
