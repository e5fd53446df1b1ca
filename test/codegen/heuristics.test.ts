// The hand-written kernel options: register tiles for matmul, nothing that blows up code size, threads for big kernels.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, Tensor, UOp } from "../../src/index.ts";
import { createSchedule } from "../../src/engine/schedule.ts";
import type { KernelIR } from "../../src/codegen/ir.ts";

/**
 * The kernels that would compute `t`, lowered with the default options (the last one stores `t`; before it, any packed
 * copies of a matmul's operands).
 */
function kernelsFor(t: Tensor): KernelIR[] {
  assert.ok(t.node instanceof UOp);
  return createSchedule([t.node]).items.flatMap((item) => (item.kind === "kernel" ? [item.kernel] : []));
}

/** Upcast amounts by axis from a kernel's options key (`u1x8,0x4|r1|p1`). */
const upcasts = (k: KernelIR): number[] =>
  (k.opts.split("|")[0]!.slice(1) || "")
    .split(",")
    .filter(Boolean)
    .map((u) => Number(u.split("x")[1]));

test("a matmul is tiled in registers along both output axes", () => {
  const a = Tensor.empty([64, 32], { device: "JS" });
  const b = Tensor.empty([32, 48], { device: "JS" });
  const [kernel] = kernelsFor(a.matmul(b)).slice(-1);
  assert.deepEqual(upcasts(kernel!), [16, 8]);
});

test("an axis with one factor of two takes 6 or 3 lanes, not 2; a long vector axis takes 16, ragged", () => {
  // 102 = 2 x 3 x 17 outputs along the vector axis, 24 = 3 x 8 rows
  const [small] = kernelsFor(
    Tensor.empty([24, 64], { device: "JS" }).matmul(Tensor.empty([64, 102], { device: "JS" })),
  ).slice(-1);
  assert.deepEqual(upcasts(small!), [6, 8], small!.opts);
  const [rows] = kernelsFor(
    Tensor.empty([30, 64], { device: "JS" }).matmul(Tensor.empty([64, 64], { device: "JS" })),
  ).slice(-1);
  assert.deepEqual(upcasts(rows!), [16, 6], rows!.opts);
  // logits = hidden @ embeddings^T on host backends: the table (1500 times hidden) is read in place and the lanes
  // go across hidden's 20 positions (16, the last tile 4 wide), 6 of 30522 = 2 x 3 x 5087 words a tile
  const hidden = Tensor.empty([20, 64], { device: "JS" });
  const table = Tensor.empty([30522, 64], { device: "JS" });
  const [logits] = kernelsFor(hidden.matmul(table.transpose(0, 1))).slice(-1);
  assert.deepEqual(upcasts(logits!), [16, 6], logits!.opts);
  assert.match(logits!.opts, /^u0x16,1x6\|/);
  // a size with factors 4 and 6 keeps 4-wide vectors on its vector axis
  const [narrow] = kernelsFor(
    Tensor.empty([12, 40], { device: "JS" }).matmul(Tensor.empty([40, 12], { device: "JS" })),
  ).slice(-1);
  assert.ok(upcasts(narrow!).includes(4), narrow!.opts);
});

test("a reduce over a long fused expression is upcast little", () => {
  // a column sum reads neighbours along its output: 16 lanes, unless each lane copies a long body
  const plain = Tensor.empty([64, 32], { device: "JS" });
  const [short] = kernelsFor(plain.sum({ axis: 0 }));
  assert.deepEqual(upcasts(short!), [16], short!.opts);
  let a = plain;
  for (let i = 0; i < 40; i++) a = a.mul(1.5).add(0.25);
  const kernels = kernelsFor(a.sum({ axis: 0 }));
  assert.equal(kernels.length, 1);
  assert.ok(upcasts(kernels[0]!).reduce((w, u) => w * u, 1) <= 4, kernels[0]!.opts);
});

test("elementwise kernels are not upcast, and big ones run on threads", () => {
  const [big] = kernelsFor(Tensor.empty([512, 512], { device: "JS" }).mul(2)).slice(-1);
  assert.equal(big!.opts, "u|r1|p1");
  const [small] = kernelsFor(Tensor.empty([8, 8], { device: "JS" }).mul(2)).slice(-1);
  assert.equal(small!.opts, "u|r1|p0");
  // a permute that keeps the innermost axis in place reads neighbours already
  const [heads] = kernelsFor(Tensor.empty([4, 16, 8, 32], { device: "JS" }).permute([0, 2, 1, 3]).contiguous()).slice(
    -1,
  );
  assert.deepEqual(upcasts(heads!), []);
});

test("a transposing copy is tiled: 8 lanes along the axis its loads step along, by 8 along the innermost", () => {
  const data = Float32Array.from({ length: 48 * 40 }, (_, i) => i);
  const w = new Tensor(data, { device: "JS" }).reshape([48, 40]).realize();
  const t = w.T.contiguous();
  const [copy] = kernelsFor(t).slice(-1);
  assert.equal(copy!.opts.split("|")[0], "u0x8,1x8", "40 rows of W^T take 8 lanes, 48 columns 8");
  // the values, on JS and (where a C compiler works) on the CPU
  for (const device of Device.isAvailable("CPU") ? ["JS", "CPU"] : ["JS"]) {
    const got = new Tensor(data, { device }).reshape([48, 40]).T.contiguous().toArray() as Float32Array;
    for (let i = 0; i < 40; i++)
      for (let j = 0; j < 48; j++) assert.equal(got[i * 48 + j], data[j * 40 + i], `${device} [${i}, ${j}]`);
  }
  const [copy4] = kernelsFor(Tensor.empty([64, 36], { device: "JS" }).T.contiguous()).slice(-1);
  assert.deepEqual(upcasts(copy4!), [4, 8], "36 rows of W^T take 4 lanes (8 does not divide 36)");
});

test("a panel copy whose runs continue along a merged axis (through a modulo) reads whole stretches of the source", () => {
  // an attention head's panel: out[i0, i1, i2, i3] = x[i1, i0 / 8, i2, i0 % 8, i3], runs of 8 (i3) continued by
  // i0 % 8: upcasting i0 by 8 beside i3 reads 64 neighbours at once (it read 32 bytes of every 256 before)
  const shape = [4, 3, 16, 8, 8];
  const data = Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, (_, i) => i);
  const copyOf = (device: string): Tensor =>
    new Tensor(data, { device }).reshape(shape).permute([1, 3, 0, 2, 4]).reshape([24, 4, 16, 8]).contiguous();
  const [copy] = kernelsFor(copyOf("JS")).slice(-1);
  assert.equal(copy!.opts.split("|")[0], "u0x8,3x8");
  for (const device of Device.isAvailable("CPU") ? ["JS", "CPU"] : ["JS"]) {
    const got = copyOf(device).toArray() as Float32Array;
    for (let i0 = 0; i0 < 24; i0++)
      for (let i1 = 0; i1 < 4; i1++)
        for (let i2 = 0; i2 < 16; i2++)
          for (let i3 = 0; i3 < 8; i3++) {
            const at = i1 * 3 * 16 * 64 + Math.floor(i0 / 8) * 16 * 64 + i2 * 64 + (i0 % 8) * 8 + i3;
            assert.equal(got[((i0 * 4 + i1) * 16 + i2) * 8 + i3], data[at], `${device} [${i0}, ${i1}, ${i2}, ${i3}]`);
          }
  }
});

/** The output axis a kernel's loops walk outermost (its options key's `o` part, the last axis listed). */
const outermostTile = (k: KernelIR): number => Number(/\|o([\d,]+)/.exec(k.opts)![1]!.split(",").at(-1));
/** The output axis a kernel walks in chunks (its options key's `c` part), if any. */
const chunkedAxis = (k: KernelIR): number | undefined => {
  const match = /\|c(\d+)x(\d+)/.exec(k.opts);
  return match ? Number(match[1]) : undefined;
};

test("a register tile walks outermost the axis whose order reads the least memory", () => {
  // BERT's tied-weight gradient g^T @ h: out [30522, 128], g [160, 30522] (19.5 MB), h [160, 128] (80 KB).
  // Vector tiles (along 128) outermost would read all of g once per tile; rows outermost read g once, h from cache
  const g = Tensor.empty([160, 30522], { device: "JS" });
  const h = Tensor.empty([160, 128], { device: "JS" });
  const [grad] = kernelsFor(g.transpose(0, 1).matmul(h)).slice(-1);
  assert.equal(upcasts(grad!)[0], 16, grad!.opts);
  assert.equal(outermostTile(grad!), 0, grad!.opts);
  assert.equal(chunkedAxis(grad!), undefined, grad!.opts);
  // BERT-base's: h [160, 768] (480 KB) no longer stays in a core's cache, g would stream once per tile of 16
  // columns: rows outermost in two chunks of 24 column tiles (each chunk of h stays), g streams twice
  const [base] = kernelsFor(g.transpose(0, 1).matmul(Tensor.empty([160, 768], { device: "JS" }))).slice(-1);
  assert.equal(outermostTile(base!), 0, base!.opts);
  assert.match(base!.opts, /\|c1x24/, base!.opts);
  // square and BERT-FFN-shaped products keep a panel of the right operand in cache: the vector axis outermost,
  // or the rows outermost inside chunks of the vector axis
  for (const [m, k, n] of [
    [1024, 1024, 1024],
    [1024, 3072, 768],
    [1024, 768, 3072],
  ] as const) {
    const [kernel] = kernelsFor(
      Tensor.empty([m, k], { device: "JS" }).matmul(Tensor.empty([k, n], { device: "JS" })),
    ).slice(-1);
    assert.ok(outermostTile(kernel!) === 1 || chunkedAxis(kernel!) === 1, `${m}x${k}x${n}: ${kernel!.opts}`);
  }
  // so does the logits product over the vocabulary (h @ W^T: W is the big operand, h is read from cache)
  const [logits] = kernelsFor(h.matmul(Tensor.empty([30522, 128], { device: "JS" }).transpose(0, 1))).slice(-1);
  assert.equal(outermostTile(logits!), 1, logits!.opts);
});

test("neighbouring output axes merge where indices stay simple and the tile keeps its lanes", () => {
  // logits over a batch of sequences of masked positions: [8, 20] rows read as 160, tiled 8 rows at a time
  const hidden = Tensor.empty([8, 20, 64], { device: "JS" });
  const table = Tensor.empty([1030, 64], { device: "JS" });
  const [logits] = kernelsFor(hidden.matmul(table.transpose(0, 1))).slice(-1);
  assert.equal(logits!.name, "r_160_1030");
  assert.deepEqual(upcasts(logits!), [16, 8], logits!.opts);
  // a weight gradient over heads: [2 x 64, 128] stays two axes (one merged axis would lose the 2-D tile)
  const x = Tensor.empty([1024, 2, 64], { device: "JS" });
  const g = Tensor.empty([1024, 128], { device: "JS" });
  const [grad] = kernelsFor(x.reshape([1024, 128]).transpose(0, 1).matmul(g)).slice(-1);
  assert.equal(upcasts(grad!).length, 2, grad!.opts);
  // rows summed against a vector every row shares (a bias along the sum) split the sum into 16 partial sums,
  // the loop vectorised along it, and the rows merge into one axis of 160: no tile across rows to keep
  const scores = Tensor.randn([8, 20, 1030], { device: "JS" }).realize();
  const bias = Tensor.randn([1030], { device: "JS" }).realize();
  const [rows] = kernelsFor(scores.add(bias).exp().sum({ axis: -1 })).slice(-1);
  assert.equal(rows!.name, "r_160", rows!.opts);
  assert.match(rows!.opts, /^u\|.*\|s16$/, rows!.opts);
  // an elementwise op over [8, 128, 64] is one loop
  const [flat] = kernelsFor(Tensor.empty([8, 128, 64], { device: "JS" }).exp()).slice(-1);
  assert.equal(flat!.name, "E_65536");
});

test("a sum down columns reads wide strips on host backends: 128 or 64 lanes, 4 strips or more", () => {
  const sumRows = (rows: number, cols: number): KernelIR =>
    kernelsFor(Tensor.empty([rows, cols], { device: "JS" }).sum({ axis: 0 })).at(-1)!;
  assert.deepEqual(upcasts(sumRows(1024, 1024)), [128], sumRows(1024, 1024).opts);
  assert.deepEqual(upcasts(sumRows(512, 256)), [64], sumRows(512, 256).opts);
  // 96 columns: no width leaves 4 strips, so the usual 16 lanes
  assert.deepEqual(upcasts(sumRows(512, 96)), [16], sumRows(512, 96).opts);
  // a column sum scaled by a value per row (a LayerNorm weight's gradient: dy * (x - mean) * rstd)
  const [x, dy, row] = [
    Tensor.empty([512, 768], { device: "JS" }),
    Tensor.empty([512, 768], { device: "JS" }),
    Tensor.empty([512, 1], { device: "JS" }),
  ];
  const weighted = kernelsFor(dy.mul(x.sub(row)).mul(row).sum({ axis: 0 })).at(-1)!;
  assert.ok(upcasts(weighted)[0]! >= 64, weighted.opts);
});
