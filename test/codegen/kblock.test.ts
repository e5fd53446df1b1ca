// K-blocked sums on host backends: a product with few outputs and a long sum (BERT's hidden-state gradient
// g @ W over the 30522-word vocabulary) runs its sum in blocks, every output tile adding one block of the
// operands (from cache) to its partial sum in the output. The terms are added in the same order, so the
// results are the bits of the same kernel lowered whole.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor } from "../../src/index.ts";
import { recordItems, runItem } from "../../src/engine/realize.ts";
import type { ExecItem } from "../../src/engine/schedule.ts";
import { heuristicOpts } from "../../src/codegen/heuristics.ts";
import { kernelSpecOf, lowerKernel } from "../../src/codegen/lower.ts";
import { NO_OPTS } from "../../src/codegen/opts.ts";
import { testDevices } from "../devices.ts";
import { backendOf } from "../../src/engine/backend.ts";

type KernelItem = ExecItem & { kind: "kernel" };

/** The kernel items that compute `t`, run (the last stores `t`; before it, any packed copies of its operands). */
function ranKernels(t: Tensor): KernelItem[] {
  return recordItems(() => t.realize()).items.filter((i): i is KernelItem => i.kind === "kernel");
}

/**
 * The output of `item`'s kernel lowered again with the heuristics' options but without blocking, run on the same
 * buffers.
 */
function wholeSum(item: KernelItem): Float32Array {
  const spec = kernelSpecOf(item.kernel)!;
  const opts = heuristicOpts(spec, lowerKernel(spec, NO_OPTS));
  assert.ok(opts.kblock, `expected a blocked kernel, got ${item.kernel.opts}`);
  const whole = lowerKernel(spec, { ...opts, kblock: 0 });
  assert.doesNotMatch(whole.opts, /\|k/);
  runItem({ ...item, kernel: whole });
  return item.buffers[0]!.toTypedArray() as Float32Array;
}

const randn = (shape: number[], device: string): Tensor => Tensor.randn(shape, { device }).realize();

for (const device of testDevices().filter((d) => backendOf(d).hostForms)) {
  // small enough for the JS device; 23 blocks of 512 and a last block of 224
  const [m, k, n] = device === "JS" ? [40, 12000, 32] : [96, 20000, 64];

  test(`${device}: g @ W over a long sum runs in blocks and gives the bits of the whole sum`, () => {
    Tensor.manualSeed(11);
    const product = randn([m, k], device).matmul(randn([k, n], device));
    const item = ranKernels(product).at(-1);
    assert.match(item!.kernel.opts, /\|k\d+/, item!.kernel.opts);
    const blocked = Float32Array.from(product.toArray() as Float32Array);
    assert.deepEqual(wholeSum(item!), blocked);
  });

  test(`${device}: a blocked sum's epilogue (scale and bias) sees the finished sums`, () => {
    Tensor.manualSeed(12);
    const bias = randn([n], device);
    const out = randn([m, k], device)
      .matmul(randn([k, n], device))
      .mul(0.5)
      .add(bias);
    const item = ranKernels(out).at(-1);
    assert.match(item!.kernel.opts, /\|k\d+/, item!.kernel.opts);
    const blocked = Float32Array.from(out.toArray() as Float32Array);
    assert.deepEqual(wholeSum(item!), blocked);
  });

  test(`${device}: an in-place accumulate of a blocked sum goes through a temporary`, () => {
    Tensor.manualSeed(13);
    const [g, w] = [randn([m, k], device), randn([k, n], device)];
    const start = randn([m, n], device);
    const acc = start.add(0).contiguous().realize();
    const expected = Float32Array.from(start.add(g.matmul(w)).toArray() as Float32Array);
    acc.assign(acc.add(g.matmul(w)));
    const kernels = ranKernels(acc);
    assert.ok(
      kernels.some((i) => /\|k\d+/.test(i.kernel.opts)),
      kernels.map((i) => i.kernel.opts).join(" "),
    );
    assert.ok(
      !kernels.some((i) => /\|k\d+/.test(i.kernel.opts) && i.buffers.slice(1).includes(i.buffers[0]!)),
      "a blocked kernel reads the buffer it accumulates into",
    );
    assert.deepEqual(Float32Array.from(acc.toArray() as Float32Array), expected);
  });
}

test("JS: a sum the kernel also reads elsewhere (times its own flip) is not blocked, and is right", () => {
  Tensor.manualSeed(14);
  const device = "JS";
  const product = randn([40, 12000], device).matmul(randn([12000, 32], device));
  const sums = Float32Array.from(product.contiguous().toArray() as Float32Array);
  const out = product.mul(product.flip(1));
  const item = ranKernels(out).at(-1);
  // blocked, one output's epilogue would read another's partial sum, or what that epilogue already wrote
  assert.doesNotMatch(item!.kernel.opts, /\|k/, item!.kernel.opts);
  const values = out.toArray() as Float32Array;
  for (let i = 0; i < 40; i++)
    for (let j = 0; j < 32; j++)
      assert.equal(values[i * 32 + j], Math.fround(sums[i * 32 + j]! * sums[i * 32 + 31 - j]!));
});

test("products with many outputs, or short sums, are not blocked", () => {
  const kernelOpts = (a: number[], b: number[]): string =>
    ranKernels(Tensor.empty(a, { device: "JS" }).matmul(Tensor.empty(b, { device: "JS" }))).at(-1)!.kernel.opts;
  assert.doesNotMatch(kernelOpts([512, 1024], [1024, 512]), /\|k/);
  assert.doesNotMatch(kernelOpts([96, 512], [512, 64]), /\|k/);
});

test("a long sum whose tiles share no loads (two norms' partials, each row its own) is not blocked", () => {
  // LAMB's norms of a weight and its update, one reduce over the two stacked: the partials' two rows read the
  // same w, but no two partials read the same w or v
  const [w, v] = [randn([256, 2304], "JS"), randn([256, 2304], "JS")];
  // a scalar from a buffer (a learning rate, a bias correction): every output's loads share it
  const scale = new Tensor([0.5], { device: "JS" }).realize();
  const update = w.mul(scale).add(v);
  const norms = Tensor.stack([w.square().reshape([-1]), update.square().reshape([-1])]).sum({ axis: 1 });
  // a long sum to two outputs: 256 partials of each (split_reduce.ts), then their totals
  const item = ranKernels(norms)
    .filter((k) => k.kernel.outputShape.join() === "2,256,1")
    .at(-1);
  // the two rows share w's loads (the stacked axis upcast whole), each row's sum split into 16 lanes
  assert.match(item!.kernel.opts, /^u0x2\|.*\|s16/, item!.kernel.opts);
  assert.doesNotMatch(item!.kernel.opts, /\|k/);
});
