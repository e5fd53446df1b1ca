// The gradient of an embedding or a gather (a one-hot sum whose hot index is an output row) lowers as a
// scatter on host backends: the rows zeroed, then each summed row added where its index points. Same values
// as the dense sum (the same additions in the same order), without a loop over every row for every index.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GlobalCounters, Tensor, dtypes } from "../../src/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { lowerKernel, kernelSpecOf } from "../../src/codegen/lower.ts";
import { clearKernelCache, searchStats } from "../../src/engine/search.ts";
import { testDevices } from "../devices.ts";
import { backendOf } from "../../src/engine/backend.ts";

const VOCAB = 3000;
const DIM = 24;

/** Deterministic values in [-1, 1). */
const data = (count: number, seed: number): number[] =>
  Array.from({ length: count }, (_, i) => Math.fround(Math.sin(i * 12.9898 + seed * 78.233) * 0.9));

/** The dense sum, in float32 and in the same order: grad[id] += g[token] over the tokens in order. */
function embeddingGrad(ids: readonly number[], g: readonly number[], vocab: number, dim: number): Float32Array {
  const out = new Float32Array(vocab * dim);
  ids.forEach((id, t) => {
    if (id < 0 || id >= vocab) return;
    for (let h = 0; h < dim; h++) out[id * dim + h] = Math.fround(out[id * dim + h]! + g[t * dim + h]!);
  });
  return out;
}

/** A realized tensor that collects gradients. */
function leaf(t: Tensor): Tensor {
  const out = t.contiguous().realize();
  out.requiresGrad = true;
  return out;
}

/** The names of the kernels realizing `t`. */
function kernelNames(t: Tensor): string[] {
  return recordItems(() => t.realize()).items.flatMap((item) => (item.kind === "kernel" ? [item.kernel.name] : []));
}

// scatters are a host form (engine/backend.ts hostForms): GPUs keep the dense one-hot product
for (const device of testDevices().filter((d) => backendOf(d).hostForms)) {
  test(`an embedding's gradient is one scatter kernel with the dense sum's values (${device})`, () => {
    const ids = [5, 2999, 5, 0, 1234, 5, 17, 2999];
    const g = data(ids.length * DIM, 1);
    const weight = leaf(Tensor.zeros([VOCAB, DIM], { device }));
    const idsT = new Tensor(ids, { dtype: dtypes.int32, device }).reshape([2, 4]);
    const gT = new Tensor(g, { device }).reshape([2, 4, DIM]);
    Tensor.realizeAll([weight, idsT, gT]);
    Tensor.embedding(idsT, weight).mul(gT).sum().backward();
    GlobalCounters.reset();
    const names = kernelNames(weight.grad!);
    assert.deepEqual(names, [`s_${VOCAB}_${DIM}`]);
    assert.ok(
      GlobalCounters.globalOps < 4 * ids.length * DIM,
      `about one addition per summed element, got ${GlobalCounters.globalOps} operations`,
    );
    assert.deepEqual(weight.grad!.toArray(), embeddingGrad(ids, g, VOCAB, DIM));
  });

  test(`ids outside the rows add nothing (${device})`, () => {
    const ids = [-1, VOCAB, 7, 7, VOCAB + 5];
    const g = data(ids.length * DIM, 2);
    const weight = leaf(Tensor.zeros([VOCAB, DIM], { device }));
    Tensor.embedding(new Tensor(ids, { dtype: dtypes.int32, device }), weight)
      .mul(new Tensor(g, { device }).reshape([ids.length, DIM]))
      .sum()
      .backward();
    const grad = weight.grad!.toArray() as Float32Array;
    assert.deepEqual(grad, embeddingGrad(ids, g, VOCAB, DIM));
    assert.equal(grad.filter((x) => x !== 0).length, DIM, "only row 7");
  });

  test(`a tied weight's gradient: the scatter in a kernel of its own, added in the matmul's epilogue (${device})`, () => {
    // word embeddings shared with an output projection, as BERT's decoder is
    const [vocab, dim, tokens] = [40, 8, 6];
    const ids = [3, 39, 3, 0, 11, 3];
    const w = data(vocab * dim, 3),
      h = data(tokens * dim, 4);
    const weight = leaf(new Tensor(w, { device }).reshape([vocab, dim]));
    const idsT = new Tensor(ids, { dtype: dtypes.int32, device });
    const hidden = new Tensor(h, { device }).reshape([tokens, dim]);
    Tensor.realizeAll([weight, idsT, hidden]);
    const embedded = Tensor.embedding(idsT, weight);
    const logits = hidden.matmul(weight.transpose(0, 1));
    embedded.sum().add(logits.sum()).backward();
    const names = kernelNames(weight.grad!);
    // the matmul tiled as a matmul, not computed element by element inside the scatter (a naive loop nest)
    assert.deepEqual(names, [`s_${vocab}_${dim}`, `r_${vocab}_${dim}`], `the gradient's kernels: ${names.join(", ")}`);
    const grad = weight.grad!.toArray() as Float32Array;
    // d/dw of sum(embedded): the count of each id; of sum(h @ w^T): every row gets the column sums of h
    const colSums = Array.from({ length: dim }, (_, j) => h.filter((_, i) => i % dim === j).reduce((a, b) => a + b, 0));
    for (let v = 0; v < vocab; v++) {
      const count = ids.filter((id) => id === v).length;
      for (let j = 0; j < dim; j++)
        assert.ok(
          Math.abs(grad[v * dim + j]! - (count + colSums[j]!)) < 1e-5,
          `row ${v} col ${j}: ${grad[v * dim + j]} vs ${count + colSums[j]!}`,
        );
    }
  });

  test(`a gather's gradient scatters rows per batch (${device})`, () => {
    // BERT's masked positions: hidden [batch, seq, dim] gathered at [batch, predictions]
    const [batch, seq, dim, preds] = [3, 32, 8, 5];
    const positions = [
      [0, 4, 4, 31, 9],
      [1, 1, 1, 2, 30],
      [17, 0, 31, 16, 3],
    ];
    const g = data(batch * preds * dim, 5);
    const hidden = leaf(Tensor.zeros([batch, seq, dim], { device }));
    const index = new Tensor(positions.flat(), { dtype: dtypes.int32, device })
      .reshape([batch, preds, 1])
      .expand([batch, preds, dim]);
    Tensor.realizeAll([hidden]);
    hidden
      .gather(1, index)
      .mul(new Tensor(g, { device }).reshape([batch, preds, dim]))
      .sum()
      .backward();
    assert.deepEqual(kernelNames(hidden.grad!), [`s_${batch}_${seq}_${dim}`]);
    const grad = hidden.grad!.toArray() as Float32Array;
    const expected = new Float32Array(batch * seq * dim);
    positions.forEach((row, b) =>
      row.forEach((s, p) => {
        for (let j = 0; j < dim; j++)
          expected[(b * seq + s) * dim + j] = Math.fround(
            expected[(b * seq + s) * dim + j]! + g[(b * preds + p) * dim + j]!,
          );
      }),
    );
    assert.deepEqual(grad, expected);
  });

  test(`a scatter that adds into a buffer it reads goes through a temporary (${device})`, () => {
    const ids = [2, 2, 9, 100];
    const acc = Tensor.ones([VOCAB, DIM], { device }).contiguous().realize();
    const weight = leaf(Tensor.zeros([VOCAB, DIM], { device }));
    Tensor.embedding(new Tensor(ids, { dtype: dtypes.int32, device }), weight)
      .sum()
      .backward();
    acc.assign(acc.add(weight.grad!)).realize();
    acc.assign(acc.add(weight.grad!)).realize();
    const values = acc.toArray() as Float32Array;
    assert.equal(values[2 * DIM], 5, "1 + 2 + 2");
    assert.equal(values[9 * DIM + 3], 3);
    assert.equal(values[100 * DIM + DIM - 1], 3);
    assert.equal(values[0], 1);
    assert.equal(values[(VOCAB - 1) * DIM], 1);
  });

  test(`a float16 gradient stays a dense sum: its float32 accumulator cannot live in the output (${device})`, () => {
    const ids = [1, 1, 1, 1, 3];
    const weight = leaf(Tensor.zeros([64, DIM], { device, dtype: dtypes.float16 }));
    Tensor.realizeAll([weight]);
    Tensor.embedding(new Tensor(ids, { dtype: dtypes.int32, device }), weight)
      .mul(1.001)
      .sum()
      .backward();
    const names = kernelNames(weight.grad!);
    assert.ok(
      names.every((n) => !n.startsWith("s_")),
      names.join(", "),
    );
    const grad = Array.from(weight.grad!.toArray() as Uint16Array).length;
    assert.equal(grad, 64 * DIM);
    assert.ok(Math.abs((weight.grad!.float().toArray() as Float32Array)[DIM]! - 4.004) < 4e-3);
  });
}

test("scatter lowering only where the device asks for it: the same kernel lowered dense for a GPU", () => {
  const weight = leaf(Tensor.zeros([VOCAB, DIM], { device: "JS" }));
  Tensor.embedding(new Tensor([4, 8], { dtype: dtypes.int32, device: "JS" }), weight)
    .sum()
    .backward();
  const item = recordItems(() => weight.grad!.realize()).items.find((i) => i.kind === "kernel");
  assert.ok(item?.kind === "kernel");
  const spec = kernelSpecOf(item.kernel)!;
  assert.equal(item.kernel.opts, "scatter");
  const dense = lowerKernel({ ...spec, host: false });
  assert.ok(dense.name.startsWith("r_"), dense.name);
  assert.ok(dense.flops >= VOCAB * DIM * 2, `the dense sum tests every row: ${dense.flops} operations`);
});

test("BEAM leaves a scatter as it is: it has no options to search", { skip: !testDevices().includes("CPU") }, () => {
  const saved = { BEAM: process.env.BEAM, TSGRAD_CACHE: process.env.TSGRAD_CACHE };
  const scratch = mkdtempSync(join(tmpdir(), "tsgrad-cache-"));
  Object.assign(process.env, { BEAM: "2", TSGRAD_CACHE: scratch });
  try {
    clearKernelCache();
    const ids = [3, 3, 60, 1];
    const weight = leaf(Tensor.zeros([64, 40], { device: "CPU" }));
    const idsT = new Tensor(ids, { dtype: dtypes.int32, device: "CPU" }).realize();
    Tensor.embedding(idsT, weight).mul(2).sum().backward();
    const before = { ...searchStats };
    assert.deepEqual(kernelNames(weight.grad!), ["s_64_40"]);
    assert.deepEqual(searchStats, before, "searched or looked up options for a scatter");
    const grad = weight.grad!.toArray() as Float32Array;
    assert.equal(grad[3 * 40], 4);
    assert.equal(grad[60 * 40 + 39], 2);
  } finally {
    for (const [key, value] of Object.entries(saved))
      value === undefined ? delete process.env[key] : (process.env[key] = value);
    clearKernelCache();
    rmSync(scratch, { recursive: true, force: true });
  }
});
