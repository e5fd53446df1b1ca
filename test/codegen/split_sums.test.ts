// Split sums on host backends: a sum along contiguous memory (row statistics, softmax, norm partials) runs
// its steps over 16 accumulators in turn, added pairwise at the end, so the loop vectorises along the sum.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, Tensor } from "../../src/index.ts";
import { recordItems, runItem } from "../../src/engine/realize.ts";
import type { ExecItem } from "../../src/engine/schedule.ts";
import type { KernelIR, Stmt } from "../../src/codegen/ir.ts";
import { kernelSpecOf, lowerKernel } from "../../src/codegen/lower.ts";
import { heuristicOpts } from "../../src/codegen/heuristics.ts";
import { NO_OPTS } from "../../src/codegen/opts.ts";
import { testDevices } from "../devices.ts";
import { assertClose } from "../close.ts";
import { backendOf } from "../../src/engine/backend.ts";

type KernelItem = ExecItem & { kind: "kernel" };
const ranKernels = (t: Tensor): KernelItem[] =>
  recordItems(() => t.realize()).items.filter((i): i is KernelItem => i.kind === "kernel");
const data = (n: number, seed: number): Float32Array =>
  Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + seed) * (1 + (i % 7)));

/** `item`'s kernel lowered again without options, run on the same buffers: its output. */
function plainOutput(item: KernelItem): Float32Array {
  runItem({ ...item, kernel: lowerKernel(kernelSpecOf(item.kernel)!, NO_OPTS) });
  return Float32Array.from(item.buffers[0]!.toTypedArray() as Float32Array);
}

/** Accumulators declared at the top of the kernel's output loops (one per lane per split step). */
const accumulators = (body: readonly Stmt[]): number =>
  body.reduce((n, s) => n + (s.kind === "acc" ? 1 : s.kind === "loop" ? accumulators(s.body) : 0), 0);
const splitOf = (k: KernelIR): number => Number(/\|s(\d+)/.exec(k.opts)?.[1] ?? 0);

for (const device of testDevices().filter((d) => backendOf(d).hostForms)) {
  test(`${device}: a row sum takes 16 accumulators, added pairwise, and agrees with the single-accumulator sum`, () => {
    const x = new Tensor(data(48 * 256, 1), { device }).reshape([48, 256]).realize();
    const sum = x.sum({ axis: 1 });
    const [item] = ranKernels(sum);
    assert.equal(splitOf(item!.kernel), 16, item!.kernel.opts);
    assert.equal(accumulators(item!.kernel.body), 16);
    const split = Float32Array.from(sum.toArray() as Float32Array);
    const plain = plainOutput(item!);
    assertClose(split, plain, { atol: 1e-4, rtol: 1e-6, what: "split vs one accumulator" });
    // against float64
    const xs = data(48 * 256, 1);
    const exact = Array.from({ length: 48 }, (_, r) => xs.slice(r * 256, r * 256 + 256).reduce((a, b) => a + b, 0));
    assertClose(split, exact, { atol: 1e-4, rtol: 1e-6, what: "split vs float64" });
  });

  test(`${device}: a split max is the max to the bit, and a softmax's exp-sum is split despite its row-max load`, () => {
    const x = new Tensor(data(40 * 128, 2), { device }).reshape([40, 128]).realize();
    const max = x.max({ axis: 1 });
    const [item] = ranKernels(max);
    assert.equal(splitOf(item!.kernel), 16, item!.kernel.opts);
    assert.deepEqual(Float32Array.from(max.toArray() as Float32Array), plainOutput(item!));
    // softmax: the max, then sum(exp(x - max)) whose loads include the max (one a row, contiguous along rows)
    const kernels = ranKernels(x.softmax(-1));
    assert.deepEqual(
      kernels.filter((k) => k.kernel.name.startsWith("r")).map((k) => splitOf(k.kernel)),
      [16, 16],
    );
  });

  test(`${device}: a sum 16 does not divide (a vocabulary) leaves its last steps to a loop of their own; a bias every row shares does not block the split`, () => {
    // 1030 = 64 x 16 + 6, over rows of logits plus a bias along the sum (BERT's masked-LM head over 30522 words)
    const xs = data(24 * 1030, 3);
    const bs = data(1030, 4);
    const x = new Tensor(xs, { device }).reshape([24, 1030]).realize();
    const bias = new Tensor(bs, { device }).realize();
    const sum = x.add(bias).sum({ axis: 1 });
    const [item] = ranKernels(sum);
    assert.equal(splitOf(item!.kernel), 16, item!.kernel.opts);
    const loops: number[] = [];
    const walk = (body: readonly Stmt[]): void =>
      body.forEach((s) => s.kind === "loop" && (s.var.startsWith("r") && loops.push(s.size), walk(s.body)));
    walk(item!.kernel.body);
    assert.deepEqual(loops, [64, 6]);
    const split = Float32Array.from(sum.toArray() as Float32Array);
    const exact = Array.from({ length: 24 }, (_, r) => bs.reduce((a, b, j) => a + xs[r * 1030 + j]! + b, 0));
    assertClose(split, exact, { atol: 1e-4, rtol: 1e-6, what: "ragged split vs float64" });
    assertClose(split, plainOutput(item!), { atol: 1e-4, rtol: 1e-6, what: "ragged split vs one accumulator" });
    // a max over 1030, with the largest value among the last six steps in some rows: exact
    const ys = data(24 * 1030, 5);
    for (let r = 0; r < 24; r += 3) ys[r * 1030 + 1027] = 100 + r;
    const max = new Tensor(ys, { device }).reshape([24, 1030]).realize().max({ axis: 1 });
    const [maxItem] = ranKernels(max);
    assert.equal(splitOf(maxItem!.kernel), 16, maxItem!.kernel.opts);
    const expected = Array.from({ length: 24 }, (_, r) => Math.max(...ys.slice(r * 1030, r * 1030 + 1030)));
    assert.deepEqual(Array.from(max.toArray() as Float32Array), expected);
  });

  test(`${device}: a vocabulary-long sum runs in blocks of 64 trips, each from 0, and keeps a pairwise sum's accuracy`, () => {
    // 30522 = 29 blocks x 64 trips x 16 + 51 trips x 16 + 10; one loop of 1907 trips had a relative error of 3.3e-7
    // on these rows (PyTorch's sum 1.1e-7): each accumulator's error grows with the square root of its terms
    const [rows, length] = [20, 30522];
    let state = 12345;
    const xs = Float32Array.from({ length: rows * length }, () => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return (state >>> 8) / 2 ** 24;
    });
    const sum = new Tensor(xs, { device }).reshape([rows, length]).realize().sum({ axis: 1 });
    const [item] = ranKernels(sum);
    assert.equal(splitOf(item!.kernel), 16, item!.kernel.opts);
    const loops: number[] = [];
    const walk = (body: readonly Stmt[]): void =>
      body.forEach((s) => s.kind === "loop" && (s.var.startsWith("r") && loops.push(s.size), walk(s.body)));
    walk(item!.kernel.body);
    assert.deepEqual(loops, [29, 64, 51, 10]);
    const got = sum.toArray() as Float32Array;
    let worst = 0;
    for (let r = 0; r < rows; r++) {
      let exact = 0;
      for (let j = 0; j < length; j++) exact += xs[r * length + j]!;
      worst = Math.max(worst, Math.abs(got[r]! - exact) / exact);
    }
    assert.ok(worst < 1.5e-7, `relative error ${worst}`);
  });
}

test("no split where a register tile or vector lanes serve better, for short sums, or on devices without host forms", () => {
  const optsOf = (t: Tensor): string => ranKernels(t).at(-1)!.kernel.opts;
  const a = Tensor.empty([64, 256], { device: "JS" });
  // a matmul: its loads are shared across the tile
  assert.doesNotMatch(optsOf(a.matmul(Tensor.empty([256, 48], { device: "JS" }))), /\|s/);
  // a column sum: the lanes read neighbours along the output
  assert.doesNotMatch(optsOf(a.sum({ axis: 0 })), /\|s/);
  // a sum of 16 steps: fewer than 4 trips of 8 are not worth it
  assert.doesNotMatch(optsOf(Tensor.empty([64, 16], { device: "JS" }).sum({ axis: 1 })), /\|s/);
  // the same row sum lowered for a GPU-like device
  const [item] = ranKernels(Tensor.empty([48, 256], { device: "JS" }).sum({ axis: 1 }));
  const spec = { ...kernelSpecOf(item!.kernel)!, host: false };
  assert.equal(heuristicOpts(spec, lowerKernel(spec, NO_OPTS)).split, undefined);
});

test("a split sum of products is a multiply and an add, not a fused multiply-add: the CPU device matches the JS device to the bit", {
  skip: !Device.isAvailable("CPU"),
}, () => {
  // a gradient norm's partials: sum of squares along rows (a register tile's sum keeps its FMA; a split's
  // lanes do not, so gcc vectorises their loop)
  const build = (device: string): { values: number[]; opts: string } => {
    const x = new Tensor(data(64 * 1030, 6), { device }).reshape([64, 1030]).realize();
    const sum = x.square().sum({ axis: 1 });
    const [item] = ranKernels(sum);
    return { values: Array.from(sum.toArray() as Float32Array), opts: item!.kernel.opts };
  };
  const [js, cpu] = [build("JS"), build("CPU")];
  assert.match(cpu.opts, /\|s16/);
  assert.equal(js.opts, cpu.opts);
  assert.deepEqual(cpu.values, js.values);
});

test("sums stacked along a short axis (LAMB's two norms in one kernel) split, that axis upcast whole beside the split", () => {
  const xs = data(64 * 300, 7);
  const x = new Tensor(xs, { device: "JS" }).reshape([64, 300]).realize();
  // two sums of the same loads, stacked: [2, 64], each row summed over 300
  const norms = Tensor.stack([x.square(), x.mul(0.5).add(1).square()]).sum({ axis: -1 });
  const [item] = ranKernels(norms);
  assert.match(item!.kernel.opts, /^u0x2\|.*\|s16$/, item!.kernel.opts);
  const got = Array.from(norms.toArray() as Float32Array);
  const exact = [0, 1].flatMap((k) =>
    Array.from({ length: 64 }, (_, r) =>
      xs.slice(r * 300, r * 300 + 300).reduce((a, v) => a + (k === 0 ? v * v : (v * 0.5 + 1) ** 2), 0),
    ),
  );
  assertClose(got, exact, { atol: 1e-3, rtol: 1e-5, what: "stacked split sums vs float64" });
});
