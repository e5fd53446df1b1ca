import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { GlobalCounters, Tensor, type UOp, dtypes } from "../../src/index.ts";
import { testDevices } from "../devices.ts";
import { assertClose } from "../close.ts";
import { checkOp, fromNd, values } from "./harness.ts";
import { type Nd, matmul, nd, permute, randomNd, softmax } from "./ref.ts";

const batchedMatmul = (a: Nd, b: Nd): Nd => {
  // a [B, m, k] @ b [k, n]
  const [batch, m, k] = a.shape as [number, number, number];
  const data: number[] = [];
  for (let i = 0; i < batch; i++) data.push(...matmul(nd([m, k], a.data.slice(i * m * k, (i + 1) * m * k)), b).data);
  return nd([batch, m, b.shape[1]!], data);
};
const rows = (a: Nd, f: (row: number[]) => number[]): Nd => {
  const n = a.shape[a.shape.length - 1]!;
  const out: number[] = [];
  for (let r = 0; r < a.data.length / n; r++) out.push(...f(a.data.slice(r * n, (r + 1) * n)));
  return nd(a.shape, out);
};

for (const device of testDevices()) {
  describe(`nn ops on ${device}`, () => {
    test("matmul of matrices", () =>
      checkOp(device, [randomNd([3, 4], 1), randomNd([4, 5], 2)], (a, b) => a.matmul(b), matmul));
    test("matmul broadcasts a batch against a matrix", () =>
      checkOp(device, [randomNd([2, 3, 4], 3), randomNd([4, 2], 4)], (a, b) => a.matmul(b), batchedMatmul));
    test("matmul of a vector and a matrix drops the vector axis", () => {
      checkOp(
        device,
        [randomNd([4], 5), randomNd([4, 3], 6)],
        (a, b) => a.matmul(b),
        (a, b) => nd([3], matmul(nd([1, 4], a.data), b).data),
      );
    });
    test("linear uses [out, in] weights", () => {
      checkOp(
        device,
        [randomNd([2, 4], 7), randomNd([3, 4], 8), randomNd([3], 9)],
        (x, w, b) => x.linear(w, b),
        (x, w, b) => {
          const y = matmul(x, permute(w, [1, 0]));
          return nd(
            y.shape,
            y.data.map((v, i) => v + b.data[i % 3]!),
          );
        },
      );
    });
    test("softmax", () => checkOp(device, [randomNd([3, 5], 10, -3, 3)], (x) => x.softmax(), softmax));
    test("logSoftmax", () =>
      checkOp(
        device,
        [randomNd([3, 5], 11, -3, 3)],
        (x) => x.logSoftmax(),
        (a) => nd(a.shape, softmax(a).data.map(Math.log)),
      ));
    test("layerNorm over the last axis", () => {
      checkOp(
        device,
        [randomNd([3, 6], 12, -2, 2)],
        (x) => x.layerNorm({ eps: 1e-5 }),
        (a) =>
          rows(a, (r) => {
            const m = r.reduce((s, v) => s + v, 0) / r.length;
            const v = r.reduce((s, x) => s + (x - m) ** 2, 0) / r.length;
            return r.map((x) => (x - m) / Math.sqrt(v + 1e-5));
          }),
        { gradAtol: 5e-3 },
      );
    });
    test("sparseCategoricalCrossentropy with ignore index and weights", () => {
      const labels = new Tensor([1, -1, 4, 0], { device });
      const weights = new Tensor([1, 1, 0.5, 2], { device, dtype: "float32" });
      checkOp(
        device,
        [randomNd([4, 5], 13, -2, 2)],
        (x) => x.sparseCategoricalCrossentropy(labels, { weights }).reshape([1]),
        (a) => {
          const p = softmax(a);
          const [ls, ws] = [
            [1, -1, 4, 0],
            [1, 0, 0.5, 2],
          ];
          let total = 0;
          ls.forEach((l, i) => {
            if (l >= 0) total -= ws[i]! * Math.log(p.data[i * 5 + l]!);
          });
          return nd([1], [total / 3.5]);
        },
      );
    });
    test("sparseCategoricalCrossentropy reductions none and sum", () => {
      const logits = fromNd(randomNd([2, 3], 14), device);
      const labels = new Tensor([2, 0], { device });
      const none = values(logits.sparseCategoricalCrossentropy(labels, { reduction: "none" }));
      assert.equal(none.length, 2);
      assertClose([logits.sparseCategoricalCrossentropy(labels, { reduction: "sum" }).item()], [none[0]! + none[1]!]);
    });
    test("scaledDotProductAttention with a boolean mask", () => {
      const [q, k, v] = [randomNd([2, 3, 4], 15), randomNd([2, 3, 4], 16), randomNd([2, 3, 4], 17)];
      const maskRows = [
        [true, true, false],
        [true, true, false],
        [true, true, false],
      ];
      const mask = new Tensor(maskRows, { device });
      checkOp(
        device,
        [q, k, v],
        (a, b, c) => a.scaledDotProductAttention(b, c, { mask }),
        (a, b, c) => {
          const out: number[] = [];
          for (let h = 0; h < 2; h++)
            for (let i = 0; i < 3; i++) {
              const s = [0, 1, 2].map((j) =>
                maskRows[i]![j]
                  ? [0, 1, 2, 3].reduce(
                      (acc, d) => acc + a.data[h * 12 + i * 4 + d]! * b.data[h * 12 + j * 4 + d]!,
                      0,
                    ) / 2
                  : -Infinity,
              );
              const m = Math.max(...s);
              const e = s.map((x) => Math.exp(x - m));
              const z = e.reduce((x, y) => x + y, 0);
              for (let d = 0; d < 4; d++)
                out.push([0, 1, 2].reduce((acc, j) => acc + (e[j]! / z) * c.data[h * 12 + j * 4 + d]!, 0));
            }
          return nd([2, 3, 4], out);
        },
      );
    });
    test("oneHot", () =>
      assert.deepEqual(new Tensor([2, 0], { device }).oneHot(3).tolist(), [
        [0, 0, 1],
        [1, 0, 0],
      ]));
    test("embedding picks rows and sums gradients of repeated ids", () => {
      const ids = new Tensor(
        [
          [1, 3],
          [1, 0],
        ],
        { device },
      );
      checkOp(
        device,
        [randomNd([4, 3], 18)],
        (w) => Tensor.embedding(ids, w),
        (w) =>
          nd(
            [2, 2, 3],
            [1, 3, 1, 0].flatMap((i) => w.data.slice(i * 3, i * 3 + 3)),
          ),
      );
    });
    test("dropout is the identity unless training", () => {
      const x = Tensor.ones([1000], { device });
      assert.deepEqual(values(x.dropout(0.5)), values(x));
    });
    test("dropout while training zeroes about p and scales the rest", () => {
      Tensor.training = true;
      try {
        Tensor.manualSeed(3);
        const kept = values(Tensor.ones([4000], { device }).dropout(0.25));
        const zeros = kept.filter((v) => v === 0).length;
        assert.ok(Math.abs(zeros / 4000 - 0.25) < 0.03, `dropped ${zeros} of 4000`);
        assert.ok(kept.every((v) => v === 0 || Math.abs(v - 4 / 3) < 1e-6));
      } finally {
        Tensor.training = false;
      }
    });
    test("a dropout mask is drawn once however many kernels read it (a layer norm after it, its backward)", () => {
      const [rowCount, width] = [64, 256];
      const x = Tensor.randn([rowCount, width], { device }).realize();
      x.requiresGrad = true;
      Tensor.manualSeed(5);
      GlobalCounters.reset();
      Tensor.rand([rowCount, width], { device }).realize();
      const oneDraw = GlobalCounters.globalOps;
      Tensor.training = true;
      try {
        Tensor.manualSeed(5);
        const y = x.dropout(0.1);
        const loss = y.layerNorm().square().sum();
        loss.backward();
        GlobalCounters.reset();
        Tensor.realizeAll([loss, x.grad!]);
        // the layer norm's mean, variance, output and the backward's kernels all read y: without a stored
        // mask each runs Threefry again (about 5 draws' worth of operations)
        assert.ok(
          GlobalCounters.globalOps < oneDraw + 100 * rowCount * width,
          `${GlobalCounters.globalOps} operations, one draw is ${oneDraw}`,
        );
        const grad = values(x.grad!);
        const dropped = values(y).map((v) => v === 0);
        assert.ok(
          grad.every((g, i) => !dropped[i] || g === 0),
          "dropped elements get no gradient",
        );
      } finally {
        Tensor.training = false;
      }
    });
  });

  describe(`random numbers on ${device}`, () => {
    test("manualSeed makes rand reproducible and different seeds differ", () => {
      Tensor.manualSeed(42);
      const a = values(Tensor.rand([64], { device }));
      const b = values(Tensor.rand([64], { device }));
      Tensor.manualSeed(42);
      assert.deepEqual(values(Tensor.rand([64], { device })), a);
      assert.notDeepEqual(a, b);
    });
    test("rand's stream is fixed by the seed (values recorded from the first implementation) and costs one Threefry chain a word", () => {
      Tensor.manualSeed(7);
      GlobalCounters.reset();
      const v = values(Tensor.rand([4096], { device }));
      const expected = [
        0.908480167388916, 0.7352801561355591, 0.6903171539306641, 0.3107234239578247, 0.0949639081954956,
        0.07325685024261475,
      ];
      assert.deepEqual(v.slice(0, 6), expected);
      // a chain is about 120 integer operations; computing both halves' chains at every word was 240 a word
      const perWord = GlobalCounters.globalOps / 4096;
      assert.ok(perWord < 160, `${perWord} operations a word`);
    });
    test("rand is uniform in [0, 1)", () => {
      Tensor.manualSeed(1);
      const v = values(Tensor.rand([20000], { device }));
      assert.ok(v.every((x) => x >= 0 && x < 1));
      const mean = v.reduce((s, x) => s + x, 0) / v.length;
      assert.ok(Math.abs(mean - 0.5) < 0.01, `mean ${mean}`);
    });
    test("randn has mean 0 and std 1", () => {
      Tensor.manualSeed(2);
      const v = values(Tensor.randn([20000], { device }));
      const mean = v.reduce((s, x) => s + x, 0) / v.length;
      const sd = Math.sqrt(v.reduce((s, x) => s + (x - mean) ** 2, 0) / v.length);
      assert.ok(Math.abs(mean) < 0.03 && Math.abs(sd - 1) < 0.03, `mean ${mean} std ${sd}`);
    });
    test("truncNormal stays inside its bounds with the right spread", () => {
      Tensor.manualSeed(4);
      const v = values(Tensor.truncNormal([20000], { std: 0.02 }, { device }));
      assert.ok(v.every((x) => Math.abs(x) <= 0.04 + 1e-7));
      const sd = Math.sqrt(v.reduce((s, x) => s + x * x, 0) / v.length);
      assert.ok(Math.abs(sd - 0.02 * 0.8796) < 0.0006, `std ${sd}`); // std of N(0,1) truncated to [-2, 2] is 0.8796
    });
    test("uniform, normal and randint ranges", () => {
      Tensor.manualSeed(5);
      assert.ok(values(Tensor.uniform([500], -3, -2, { device })).every((x) => x >= -3 && x < -2));
      const ints = values(Tensor.randint([500], 2, 5, { device }));
      assert.deepEqual([...new Set(ints)].sort(), [2, 3, 4]);
      assert.equal(Tensor.randint([2], 0, 3, { device }).dtype, dtypes.int32);
    });
  });
}

test("threefry2x32 matches the Random123 known-answer vectors", async () => {
  const { threefry2x32 } = await import("../../src/tensor/index.ts");
  const word = (v: number) => new Tensor(Uint32Array.from([v]), { device: "JS" }).node as UOp;
  const run = (x0: number, x1: number, k0: number, k1: number) =>
    threefry2x32(word(x0), word(x1), word(k0), word(k1)).map((u) => new Tensor(u).item());
  assert.deepEqual(run(0, 0, 0, 0), [0x6b200159, 0x99ba4efe]);
  assert.deepEqual(run(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff), [0x1cb996fc, 0xbb002be7]);
  assert.deepEqual(run(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), [0xc4923a9c, 0x483df7a0]);
});

test("the same seed gives the same numbers on every device", () => {
  const devices = testDevices();
  const draws = devices.map((device) => {
    Tensor.manualSeed(9);
    return values(Tensor.randn([32], { device }));
  });
  for (const d of draws.slice(1)) assertClose(d, draws[0]!, { atol: 1e-6 });
});

test("tril and triu keep the elements on and below (above) a diagonal, batched, any dtype", () => {
  for (const device of testDevices()) {
    const x = new Tensor(
      Array.from({ length: 2 * 3 * 4 }, (_, i) => i + 1),
      { device },
    ).reshape([2, 3, 4]);
    const expect = (keep: (r: number, c: number) => boolean) =>
      Array.from({ length: 24 }, (_, i) => (keep(Math.floor(i / 4) % 3, i % 4) ? i + 1 : 0));
    assert.deepEqual(
      Array.from(x.tril().toArray() as Int32Array),
      expect((r, c) => c <= r),
    );
    assert.deepEqual(
      Array.from(x.tril(1).toArray() as Int32Array),
      expect((r, c) => c <= r + 1),
    );
    assert.deepEqual(
      Array.from(x.tril(-1).toArray() as Int32Array),
      expect((r, c) => c < r),
    );
    assert.deepEqual(
      Array.from(x.triu().toArray() as Int32Array),
      expect((r, c) => c >= r),
    );
    assert.deepEqual(
      Array.from(x.triu(2).toArray() as Int32Array),
      expect((r, c) => c >= r + 2),
    );
    assert.equal(x.tril().dtype.name, "int32");
  }
  assert.throws(() => Tensor.ones([3]).tril(), /tril needs at least 2 axes, got \[3\]/);
});
