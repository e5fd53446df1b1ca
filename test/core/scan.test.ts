// Scans, top-k and sampling (src/tensor/scan.ts) against plain float64 loops, forward and gradients, on every test
// device; what a long cumsum costs; and their errors.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { GlobalCounters, Tensor, TsgradError, dtypes } from "../../src/index.ts";
import { cummax, cumsum, multinomial, topk } from "../../src/tensor/index.ts";
import { testDevices } from "../devices.ts";
import { checkOp, fromNd, values } from "./harness.ts";
import { type Nd, nd, randomNd } from "./ref.ts";

/** Running sum or max along `axis`, element by element. */
function scanRef(a: Nd, axis: number, combine: (acc: number, v: number) => number): Nd {
  const step = a.shape.slice(axis + 1).reduce((p, s) => p * s, 1); // the distance between neighbours on the axis
  const out = [...a.data];
  for (let i = 0; i < out.length; i++)
    if (Math.floor(i / step) % a.shape[axis]! !== 0) out[i] = combine(out[i - step]!, out[i]!);
  return nd(a.shape, out);
}
const cumsumRef = (a: Nd, axis: number): Nd => scanRef(a, axis, (s, v) => s + v);
const cummaxRef = (a: Nd, axis: number): Nd => scanRef(a, axis, Math.max);

/** The k best of each row of the last axis by a stable sort: equal values keep their order (lowest index first). */
function topkRef(a: Nd, k: number, largest: boolean): { values: Nd; indices: Nd } {
  const n = a.shape[a.shape.length - 1]!;
  const [vs, is]: number[][] = [[], []];
  for (let r = 0; r < a.data.length / n; r++) {
    const row = a.data.slice(r * n, (r + 1) * n);
    const order = [...row.keys()]
      .sort((i, j) => (largest ? row[j]! - row[i]! : row[i]! - row[j]!) || i - j)
      .slice(0, k);
    vs.push(...order.map((i) => row[i]!));
    is.push(...order);
  }
  const shape = [...a.shape.slice(0, -1), k];
  return { values: nd(shape, vs), indices: nd(shape, is) };
}

for (const device of testDevices()) {
  describe(`scans on ${device}`, () => {
    for (const axis of [0, 1, 2, -1]) {
      test(`cumsum along axis ${axis} of a 3-D tensor, with its gradient`, () => {
        checkOp(
          device,
          [randomNd([3, 4, 5], 1)],
          (x) => cumsum(x, axis),
          (a) => cumsumRef(a, (axis + 3) % 3),
        );
      });
    }

    test("cumsum of a long axis (blocked) matches float64, with its gradient", () => {
      checkOp(
        device,
        [randomNd([2, 2000], 2)],
        (x) => cumsum(x, 1),
        (a) => cumsumRef(a, 1),
        { atol: 1e-3, rtol: 1e-3 },
      );
    });

    test("cumsum of a long leading axis, not a whole number of blocks", () => {
      checkOp(
        device,
        [randomNd([601, 3], 3)],
        (x) => cumsum(x, 0),
        (a) => cumsumRef(a, 0),
        { grad: false, atol: 1e-4 },
      );
    });

    test("int32 cumsum is exact and stays int32, short and blocked", () => {
      for (const n of [7, 1500]) {
        const data = Array.from({ length: n }, (_, i) => ((i * 7919) % 200001) - 100000);
        const out = cumsum(new Tensor(Int32Array.from(data), { device }), 0);
        assert.equal(out.dtype, dtypes.int32);
        assert.deepEqual(values(out), cumsumRef(nd([n], data), 0).data, `length ${n}`);
      }
    });

    test("a scan along an axis of a tensor with no elements is empty, and so is its gradient", () => {
      for (const scan of [cumsum, cummax])
        for (const [shape, axis] of [
          [[2, 0], 0],
          [[0, 2], 1],
          [[4, 0, 3], 2],
          [[0], 0],
        ] as [number[], number][]) {
          const x = Tensor.zeros(shape, { device, requiresGrad: true });
          const out = scan(x, axis);
          assert.deepEqual(out.shape, shape);
          out.sum().backward();
          assert.deepEqual(x.grad!.shape, shape);
          assert.equal(x.grad!.toArray().length, 0);
        }
    });

    test("bool cumsum counts in int32", () => {
      const out = cumsum(new Tensor([true, false, true, true], { device }), 0);
      assert.equal(out.dtype, dtypes.int32);
      assert.deepEqual(values(out), [1, 1, 2, 3]);
    });

    test("cummax holds the running maximum, ties and ints included", () => {
      assert.deepEqual(
        values(cummax(new Tensor([1, 3, 2, 3, 5, -1], { device, dtype: dtypes.float32 }), 0)),
        [1, 3, 3, 3, 5, 5],
      );
      const ints = new Tensor(
        [
          [-5, -7, -2],
          [-2147483648, 4, 4],
        ],
        { device, dtype: dtypes.int32 },
      );
      assert.deepEqual(values(cummax(ints, -1)), [-5, -5, -2, -2147483648, 4, 4]);
    });

    test("cummax gradient goes to each running maximum (no ties)", () => {
      checkOp(
        device,
        [randomNd([3, 4, 5], 4)],
        (x) => cummax(x, 1),
        (a) => cummaxRef(a, 1),
      );
    });

    test("cummax of a long axis (blocked)", () => {
      checkOp(
        device,
        [randomNd([1000], 5)],
        (x) => cummax(x, 0),
        (a) => cummaxRef(a, 0),
        { grad: false },
      );
    });

    for (const largest of [true, false]) {
      test(`topk values and indices match a stable sort (largest: ${largest}), on the last and a leading axis`, () => {
        const a = randomNd([4, 9], 6);
        const ref = topkRef(a, 4, largest);
        const { values: v, indices: i } = topk(fromNd(a, device), 4, { largest });
        assert.equal(i.dtype, dtypes.int32);
        assert.deepEqual(values(i), ref.indices.data);
        assert.deepEqual(values(v), ref.values.data.map(Math.fround));
        const lead = topk(fromNd(a, device).T, 2, { axis: 0, largest });
        assert.deepEqual(lead.indices.shape, [2, 4]);
        assert.deepEqual(values(lead.indices.T), values(i.shrink([null, [0, 2]])));
      });
    }

    test("topk breaks ties by the lowest index, whichever end it takes", () => {
      const x = new Tensor([3, 1, 3, 2, 1, 3], { device, dtype: dtypes.float32 });
      assert.deepEqual(values(topk(x, 4).indices), [0, 2, 5, 3]);
      assert.deepEqual(values(topk(x, 3, { largest: false }).indices), [1, 4, 3]);
      assert.deepEqual(values(topk(Tensor.full([4], -Infinity, { device }), 3).indices), [0, 1, 2]);
    });

    test("topk ranks NaN as +inf: taken first among the largest (ties by index), last among the smallest", () => {
      const x = new Tensor([2, Infinity, NaN, -1, NaN, 7], { device, dtype: dtypes.float32 });
      assert.deepEqual(values(topk(x, 4).indices), [1, 2, 4, 5]);
      assert.deepEqual(values(topk(x, 4).values), [Infinity, NaN, NaN, 7]);
      assert.deepEqual(values(topk(x, 5, { largest: false }).indices), [3, 0, 5, 1, 2]);
      assert.deepEqual(values(topk(Tensor.full([3], NaN, { device }), 2).indices), [0, 1]);
    });

    test("topk of int32 extremes, smallest first", () => {
      const x = new Tensor(Int32Array.from([5, 2147483647, -2147483648, 0, -2147483648]), { device });
      const { values: v, indices: i } = topk(x, 5, { largest: false });
      assert.equal(v.dtype, dtypes.int32);
      assert.deepEqual(values(v), [-2147483648, -2147483648, 0, 5, 2147483647]);
      assert.deepEqual(values(i), [2, 4, 3, 0, 1]);
    });

    test("topk with more rounds than a kernel takes inputs (k = 60 > MAX_KERNEL_INPUTS): its cat of 60 reduces is split", () => {
      const a = randomNd([2, 70], 11);
      const { values: v, indices: i } = topk(fromNd(a, device), 60);
      const ref = topkRef(a, 60, true);
      assert.deepEqual(values(i), ref.indices.data);
      assert.deepEqual(values(v), ref.values.data.map(Math.fround));
    });

    test("topk values carry gradients to the chosen elements only", () => {
      checkOp(
        device,
        [randomNd([3, 6], 7)],
        (x) => topk(x, 3).values,
        (a) => topkRef(a, 3, true).values,
      );
    });

    test("multinomial is reproducible under manualSeed, int32 [numSamples] or [rows, numSamples]", () => {
      const weights = new Tensor(
        [
          [1, 2, 3],
          [3, 0, 1],
        ],
        { device, dtype: dtypes.float32 },
      );
      Tensor.manualSeed(11);
      const first = multinomial(weights, 50);
      assert.deepEqual(first.shape, [2, 50]);
      assert.equal(first.dtype, dtypes.int32);
      const firstValues = values(first);
      Tensor.manualSeed(11);
      assert.deepEqual(values(multinomial(weights, 50)), firstValues);
      assert.notDeepEqual(values(multinomial(weights, 50)), firstValues, "the next draw differs");
      assert.deepEqual(multinomial(weights.index(0), 4).shape, [4]);
      assert.deepEqual(multinomial(weights, 1, { replacement: false }).shape, [2, 1]);
      Tensor.manualSeed(12);
      const without = values(multinomial(weights, 3, { replacement: false }));
      Tensor.manualSeed(12);
      assert.deepEqual(values(multinomial(weights, 3, { replacement: false })), without);
    });

    test("multinomial without replacement draws distinct categories, each round in proportion to the weights left", () => {
      // 4000 rows of the same weights, two samples each: the first is a draw from the weights; the pair holds
      // category i with probability p_i + sum over j != i of p_j p_i / (1 - p_j)
      const p = [0.1, 0, 0.2, 0.4, 0.3];
      const rows = 4000;
      Tensor.manualSeed(5);
      const samples = values(
        multinomial(new Tensor([p], { device, dtype: dtypes.float32 }).expand([rows, 5]), 2, { replacement: false }),
      );
      const [first, held] = [p.map(() => 0), p.map(() => 0)];
      for (let r = 0; r < rows; r++) {
        const [a, b] = [samples[2 * r]!, samples[2 * r + 1]!];
        assert.notEqual(a, b, `row ${r} drew ${a} twice`);
        first[a]! += 1;
        held[a]! += 1;
        held[b]! += 1;
      }
      p.forEach((pi, i) => {
        const pair = pi === 0 ? 0 : pi + p.reduce((s, pj, j) => (j === i ? s : s + (pj * pi) / (1 - pj)), 0);
        for (const [count, prob, what] of [
          [first[i]!, pi, "first draw"],
          [held[i]!, pair, "the pair"],
        ] as const) {
          if (prob === 0) assert.equal(count, 0, `category ${i} has weight 0 (${what})`);
          // six standard errors: seeded, and unseeded a miss once in ~5e8 checks
          else
            assert.ok(
              Math.abs(count / rows - prob) <= 6 * Math.sqrt((prob * (1 - prob)) / rows),
              `category ${i}, ${what}: ${count / rows}, expected ${prob}`,
            );
        }
      });
      // fewer positive weights than samples: the rest are n
      assert.deepEqual(
        values(multinomial(new Tensor([0, 3, 0], { device, dtype: dtypes.float32 }), 3, { replacement: false })),
        [1, 3, 3],
      );
    });

    test("multinomial frequencies approach the weights; zero weights are never drawn", () => {
      const weights = [
        [1, 0, 2, 4, 3],
        [0, 5, 0, 0, 5],
      ];
      const draws = 10000;
      Tensor.manualSeed(3);
      const samples = values(multinomial(new Tensor(weights, { device, dtype: dtypes.float32 }), draws));
      weights.forEach((row, r) => {
        const total = row.reduce((s, w) => s + w, 0);
        const counts = row.map(() => 0);
        for (const s of samples.slice(r * draws, (r + 1) * draws)) counts[s]! += 1;
        row.forEach((w, c) => {
          const p = w / total;
          if (p === 0) return assert.equal(counts[c], 0, `row ${r}: category ${c} has weight 0`);
          // six standard errors: the draw is seeded, and unseeded it would miss once in ~5e8 checks
          const tolerance = 6 * Math.sqrt((p * (1 - p)) / draws);
          assert.ok(
            Math.abs(counts[c]! / draws - p) <= tolerance,
            `row ${r}, category ${c}: frequency ${counts[c]! / draws}, probability ${p}`,
          );
        });
      });
    });
  });
}

test("a long cumsum costs about n^1.5 operations, not n^2", () => {
  const n = 4096;
  GlobalCounters.reset();
  cumsum(Tensor.ones([n], { device: "JS" }), 0).realize();
  assert.ok(
    GlobalCounters.globalOps < n * Math.sqrt(n) * 4,
    `${GlobalCounters.globalOps} operations in ${GlobalCounters.kernelCount} kernels`,
  );
});

test("scan errors name the op, the axis or k, and the shape", () => {
  const expectError = (f: () => unknown, text: string) =>
    assert.throws(f, (e: Error) => e instanceof TsgradError && e.message.includes(text), text);
  const x = Tensor.zeros([2, 3]);
  expectError(() => cumsum(x, 2), "cumsum: axis 2 is out of range for a tensor of shape [2, 3]");
  expectError(() => cummax(x, -3), "cummax: axis -3 is out of range for a tensor of shape [2, 3]");
  expectError(() => topk(x, 1, { axis: 5 }), "topk: axis 5 is out of range");
  expectError(() => topk(x, 4), "topk: k = 4 must be an integer from 1 to 3, the size of axis 1 of [2, 3]");
  expectError(
    () => topk(x, 0, { axis: 0 }),
    "topk: k = 0 must be an integer from 1 to 2, the size of axis 0 of [2, 3]",
  );
  expectError(() => topk(x, 1.5), "topk: k = 1.5 must be an integer");
  expectError(
    () => multinomial(Tensor.ones([2, 2, 2]), 1),
    "multinomial of weights [2, 2, 2]: expected 1-D [categories] or 2-D [rows, categories] weights",
  );
  expectError(() => multinomial(x, 0), "multinomial of weights [2, 3]: numSamples must be a positive integer, got 0");
  expectError(
    () => multinomial(x, 4, { replacement: false }),
    "multinomial of weights [2, 3]: without replacement at most 3 samples (the categories), got 4",
  );
});

test("the Tensor methods are these functions", () => {
  const x = new Tensor(
    [
      [1, 5, 2],
      [3, 3, 9],
    ],
    { device: "JS" },
  );
  assert.deepEqual(x.cumsum(1).tolist(), [
    [1, 6, 8],
    [3, 6, 15],
  ]);
  assert.deepEqual(x.cumsum().tolist(), [
    [1, 5, 2],
    [4, 8, 11],
  ]);
  assert.deepEqual(x.cummax(1).tolist(), [
    [1, 5, 5],
    [3, 3, 9],
  ]);
  const { values: v, indices } = x.topk(2, { axis: 1, largest: false });
  assert.deepEqual(
    [v.tolist(), indices.tolist()],
    [
      [
        [1, 2],
        [3, 3],
      ],
      [
        [0, 2],
        [0, 1],
      ],
    ],
  );
  Tensor.manualSeed(4);
  const drawn = new Tensor([0, 1, 0], { device: "JS", dtype: dtypes.float32 }).multinomial(5);
  assert.deepEqual(drawn.tolist(), [1, 1, 1, 1, 1]);
});
