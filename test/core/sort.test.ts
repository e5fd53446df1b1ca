// sort and argsort (src/tensor/sort.ts) against a stable sort of plain numbers, on every test device: any axis, lengths
// that are and are not powers of two, descending, ties, ±inf, NaN, int32 and int64 extremes, float16, the values'
// gradient; what a sort costs in kernels; and the errors.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { GlobalCounters, Tensor, TsgradError, dtypes } from "../../src/index.ts";
import type { DType } from "../../src/dtype.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { argsort, sort } from "../../src/tensor/index.ts";
import { NO_64_BIT, has64BitKernels, testDevices } from "../devices.ts";
import { checkOp, fromNd, values } from "./harness.ts";
import { type Nd, map, nd, randomNd } from "./ref.ts";

/** Numbers in order, NaN after everything and equal to itself (numpy's and PyTorch's order). */
const compare = (u: number, v: number): number => {
  if (Number.isNaN(u) || Number.isNaN(v)) return Number.isNaN(u) ? (Number.isNaN(v) ? 0 : 1) : -1;
  return u < v ? -1 : u > v ? 1 : 0;
};

/** Each line along `axis` sorted by Array.prototype.sort, equal values by index (lowest first, either direction). */
function sortRef(a: Nd, axis: number, descending = false): { values: Nd; indices: Nd } {
  const n = a.shape[axis]!;
  const inner = a.shape.slice(axis + 1).reduce((p, s) => p * s, 1);
  const [sorted, indices] = [[...a.data], [...a.data]];
  for (let start = 0; start < a.data.length; start += start % inner === inner - 1 ? (n - 1) * inner + 1 : 1) {
    const at = (j: number): number => start + j * inner;
    const line = Array.from({ length: n }, (_, j) => a.data[at(j)]!);
    const order = [...line.keys()].sort(
      (p, q) => (descending ? compare(line[q]!, line[p]!) : compare(line[p]!, line[q]!)) || p - q,
    );
    order.forEach((from, j) => ((sorted[at(j)] = line[from]!), (indices[at(j)] = from)));
  }
  return { values: nd(a.shape, sorted), indices: nd(a.shape, indices) };
}

/** Random float32 values (rounded, so the reference orders exactly what the device sees). */
const randomF32 = (shape: number[], seed: number): Nd => map(randomNd(shape, seed), Math.fround);

const tensorOf = (a: Nd, device: string, dtype: DType): Tensor =>
  new Tensor(a.data, { device, dtype }).reshape(a.shape);

/** sort(a) in both directions gives the stable reference's values and indices, in a's dtype and int32. */
function checkSort(device: string, a: Nd, dtype: DType, axis: number): void {
  for (const descending of [false, true]) {
    const { values: v, indices: i } = sort(tensorOf(a, device, dtype), { axis, descending });
    const ref = sortRef(a, (axis + a.shape.length) % a.shape.length, descending);
    const what = `${dtype.name} ${JSON.stringify(a.shape)} axis ${axis}${descending ? " descending" : ""}`;
    assert.equal(v.dtype, dtype, what);
    assert.equal(i.dtype, dtypes.int32, what);
    assert.deepEqual(values(i), ref.indices.data, `indices, ${what}`);
    assert.deepEqual(values(v), ref.values.data, `values, ${what}`);
  }
}

for (const device of testDevices()) {
  describe(`sort on ${device}`, () => {
    for (const axis of [0, 1, -1]) {
      test(`random floats sorted along axis ${axis} of a 3-D tensor`, () => {
        checkSort(device, randomF32([5, 6, 7], 1), dtypes.float32, axis);
      });
    }

    test("lengths 1, 2, 5, 7, 16 and 33, powers of two and not", () => {
      for (const n of [1, 2, 5, 7, 16, 33]) checkSort(device, randomF32([3, n], n), dtypes.float32, -1);
    });

    test("ties keep the lower index first, ascending and descending", () => {
      const a = nd([2, 9], [2, 1, 2, 2, 0, 1, 2, 0, 1, 5, 5, 5, 5, 5, 5, 5, 5, 5]);
      checkSort(device, a, dtypes.float32, -1);
      const { indices } = sort(tensorOf(a, device, dtypes.float32), { descending: true });
      assert.deepEqual(values(indices).slice(0, 9), [0, 2, 3, 6, 1, 5, 8, 4, 7]);
    });

    test("±inf sort last and first, before the padding that fills the axis to a power of two", () => {
      checkSort(device, nd([7], [Infinity, -Infinity, 1, Infinity, -Infinity, 0, -2]), dtypes.float32, 0);
      checkSort(
        device,
        nd([2, 3], [Infinity, Infinity, Infinity, -Infinity, -Infinity, -Infinity]),
        dtypes.float32,
        -1,
      );
    });

    test("NaN sorts after +inf, last ascending and first descending, and no element is lost or doubled", () => {
      checkSort(device, nd([7], [3, NaN, 1, -Infinity, NaN, Infinity, 0]), dtypes.float32, 0);
      checkSort(device, nd([2, 5], [NaN, NaN, NaN, NaN, NaN, 2, NaN, -1, NaN, Infinity]), dtypes.float32, -1);
      checkSort(device, nd([3, 3], [NaN, 1, 2, 0, NaN, Infinity, 5, -Infinity, NaN]), dtypes.float32, 0);
      const a = map(
        nd([6], [0.5, NaN, -2, NaN, 65504, -Infinity]),
        (v) => values(new Tensor([v], { dtype: dtypes.float16 }))[0]!,
      );
      checkSort(device, a, dtypes.float16, 0);
    });

    test("int32 with its extremes sorts exactly and stays int32", () => {
      const a = nd([2, 5], [2147483647, -2147483648, 0, 2147483647, -1, -2147483648, 7, -2147483648, 2147483647, 7]);
      checkSort(device, a, dtypes.int32, -1);
      checkSort(device, a, dtypes.int32, 0);
    });

    test("float16 sorts in its own precision and stays float16", () => {
      const a = nd([2, 6], [0.5, -65504, 65504, 0.5, Infinity, -0.25, 3, 3, -Infinity, 1e-3, -2, 0]);
      checkSort(
        device,
        map(a, (v) => values(new Tensor([v], { dtype: dtypes.float16 }))[0]!),
        dtypes.float16,
        -1,
      );
    });

    test("int64 sorts exactly, its extremes and (except on JS, which computes in doubles) values past 2^53 too, and stays int64", () => {
      const past53 = device === "JS" ? [9007199254740996n, 9007199254740992n] : [9007199254740993n, 9007199254740992n];
      const big = [past53[0]!, -9223372036854775808n, 9223372036854775807n, 5n, past53[1]!, -1n, 9223372036854775807n];
      const x = new Tensor(BigInt64Array.from(big), { device });
      if (!has64BitKernels(device)) return assert.throws(() => sort(x).values.tolist(), NO_64_BIT);
      for (const descending of [false, true]) {
        const { values: v, indices: i } = sort(x, { descending });
        const order = [...big.keys()].sort(
          (p, q) => (big[p]! < big[q]! ? -1 : big[p]! > big[q]! ? 1 : 0) * (descending ? -1 : 1) || p - q,
        );
        assert.equal(v.dtype, dtypes.int64);
        assert.deepEqual(Array.from(i.toArray() as Int32Array), order);
        assert.deepEqual(
          Array.from(v.toArray() as BigInt64Array),
          order.map((j) => big[j]!),
        );
      }
    });

    test("uint32 and bool sort by their own order", () => {
      checkSort(device, nd([5], [3, 4294967295, 0, 7, 4294967295]), dtypes.uint32, 0);
      checkSort(device, nd([5], [1, 0, 1, 0, 0]), dtypes.bool, 0);
    });

    test("the values' gradient goes back to the element each came from", () => {
      checkOp(
        device,
        [randomNd([4, 6], 2)],
        (x) => sort(x, { axis: 0 }).values,
        (a) => sortRef(a, 0).values,
      );
      checkOp(
        device,
        [randomNd([3, 5], 3)],
        (x) => sort(x, { descending: true }).values,
        (a) => sortRef(a, 1, true).values,
      );
    });

    test("argsort is sort's indices", () => {
      const x = fromNd(randomF32([4, 9], 4), device);
      for (const options of [{}, { axis: 0 }, { descending: true }])
        assert.deepEqual(values(argsort(x, options)), values(sort(x, options).indices));
    });
  });
}

test("sort of [8, 1000] runs one kernel per compare-exchange stage (55), each a load per key, not a scan of the row", () => {
  const x = Tensor.rand([8, 1000], { device: "JS" }).realize();
  GlobalCounters.reset();
  const { items } = recordItems(() => {
    const { values: v, indices } = sort(x);
    v.realize(indices);
  });
  const names = items.flatMap((item) => (item.kind === "kernel" ? [item.kernel.name] : []));
  // 10 merges of 1, 2, ..., 10 stages; then the indices shrunk back to 1000 and the values gathered by them
  assert.equal(names.length, 55 + 2, names.join(", "));
  assert.ok(GlobalCounters.globalOps < 8 * 1024 * 57 * 100, `${GlobalCounters.globalOps} operations`);
});

test("an empty axis sorts to empty values and int32 indices of the same shape", () => {
  const { values: v, indices } = sort(Tensor.zeros([3, 0]), { axis: 0 });
  assert.deepEqual([v.shape, indices.shape, indices.dtype], [[3, 0], [3, 0], dtypes.int32]);
});

test("sort errors name the op, the axis and the shape", () => {
  const expectError = (f: () => unknown, text: string) =>
    assert.throws(f, (e: Error) => e instanceof TsgradError && e.message.includes(text), text);
  const x = Tensor.zeros([2, 3]);
  expectError(() => sort(x, { axis: 2 }), "sort: axis 2 is out of range for a tensor of shape [2, 3]");
  expectError(() => argsort(x, { axis: -3 }), "argsort: axis -3 is out of range for a tensor of shape [2, 3]");
  expectError(() => sort(x, { axis: 0.5 }), "sort: axis 0.5 is out of range");
  expectError(() => sort(Tensor.full([], 1)), "sort: a 0-d tensor (shape []) has no axis to sort");
});

test("Tensor.sort and Tensor.argsort are these functions", () => {
  const x = new Tensor(
    [
      [3, 1, 2],
      [0, 5, 5],
    ],
    { device: "JS" },
  );
  const { values: v, indices } = x.sort({ descending: true });
  assert.deepEqual(
    [v.tolist(), indices.tolist()],
    [
      [
        [3, 2, 1],
        [5, 5, 0],
      ],
      [
        [0, 2, 1],
        [1, 2, 0],
      ],
    ],
  );
  assert.deepEqual(x.argsort({ axis: 0 }).tolist(), [
    [1, 0, 0],
    [0, 1, 1],
  ]);
});
