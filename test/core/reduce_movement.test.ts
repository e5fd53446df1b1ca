import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, dtypes } from "../../src/index.ts";
import { testDevices } from "../devices.ts";
import { checkOp, fromNd, values } from "./harness.ts";
import { type Nd, flip, map, nd, pad, permute, randomNd, reduce, slice, unravel, ravel } from "./ref.ts";

const x = randomNd([2, 3, 4], 11, -2, 2);
const sum = (a: Nd, axes: number[], keepdim = false): Nd => reduce(a, axes, (s, v) => s + v, 0, keepdim);
const mean = (a: Nd, axes: number[], keepdim = false): Nd =>
  map(sum(a, axes, keepdim), (v) => v / axes.reduce((p, i) => p * a.shape[i]!, 1));
const variance = (a: Nd, axes: number[], correction = 1): Nd => {
  const m = mean(a, axes, true);
  const n = axes.reduce((p, i) => p * a.shape[i]!, 1);
  const sq = nd(
    a.shape,
    a.data.map(
      (v, i) =>
        (v -
          m.data[
            ravel(
              unravel(i, a.shape).map((u, d) => (axes.includes(d) ? 0 : u)),
              m.shape,
            )
          ]!) **
        2,
    ),
  );
  return map(sum(sq, axes), (v) => v / (n - correction));
};

for (const device of testDevices()) {
  describe(`reductions on ${device}`, () => {
    test("sum over all axes", () =>
      checkOp(
        device,
        [x],
        (t) => t.sum(),
        (a) => sum(a, [0, 1, 2]),
      ));
    test("sum over one axis", () =>
      checkOp(
        device,
        [x],
        (t) => t.sum({ axis: 1 }),
        (a) => sum(a, [1]),
      ));
    test("sum over negative axes with keepdim", () =>
      checkOp(
        device,
        [x],
        (t) => t.sum({ axis: [-1, 0], keepdim: true }),
        (a) => sum(a, [0, 2], true),
      ));
    test("max picks the largest and routes the gradient to it", () =>
      checkOp(
        device,
        [x],
        (t) => t.max({ axis: 2 }),
        (a) => reduce(a, [2], Math.max, -Infinity),
      ));
    test("min", () =>
      checkOp(
        device,
        [x],
        (t) => t.min({ axis: 0 }),
        (a) => reduce(a, [0], Math.min, Infinity),
      ));
    test("mean", () =>
      checkOp(
        device,
        [x],
        (t) => t.mean({ axis: [1, 2] }),
        (a) => mean(a, [1, 2]),
      ));
    test("var with Bessel's correction", () =>
      checkOp(
        device,
        [x],
        (t) => t.var({ axis: 2 }),
        (a) => variance(a, [2]),
      ));
    test("std of the population", () =>
      checkOp(
        device,
        [x],
        (t) => t.std({ axis: 1, correction: 0 }),
        (a) => map(variance(a, [1], 0), Math.sqrt),
      ));
    test("max splits the gradient between ties", () => {
      const t = new Tensor([1, 3, 3], { device, dtype: "float32", requiresGrad: true });
      t.max().backward();
      assert.deepEqual(t.grad!.tolist(), [0, 0.5, 0.5]);
    });
    test("argmax and argmin return the first extreme index", () => {
      const t = new Tensor(
        [
          [1, 5, 5, 0],
          [7, 2, 7, -1],
        ],
        { device },
      );
      assert.deepEqual(t.argmax({ axis: 1 }).tolist(), [1, 0]);
      assert.deepEqual(t.argmin({ axis: 1 }).tolist(), [3, 3]);
      assert.deepEqual(t.argmax({ axis: 0, keepdim: true }).tolist(), [[1, 0, 1, 0]]);
      assert.equal(t.argmax().item(), 4);
    });
    test("argmax and argmin of a row holding NaN return its first NaN, as PyTorch does (the max is NaN)", () => {
      const t = new Tensor(
        [
          [1, NaN, 9, NaN],
          [3, 2, 4, 0],
        ],
        { device, dtype: "float32" },
      );
      assert.deepEqual(t.argmax({ axis: 1 }).tolist(), [1, 2]);
      assert.deepEqual(t.argmin({ axis: 1 }).tolist(), [1, 3]);
      assert.equal(t.argmax().item(), 1);
    });
    test("sums of small ints widen, of float16 accumulate in float32", () => {
      assert.equal(new Tensor([100, 100], { device, dtype: "int8" }).sum().item(), 200);
      const halves = Tensor.full([4096], 1, { device, dtype: "float16" });
      assert.equal(halves.sum().item(), 4096); // float16 alone would stop at 2048
      assert.equal(halves.sum().dtype, dtypes.float16);
    });
  });

  describe(`movement on ${device}`, () => {
    test("reshape with -1", () =>
      checkOp(
        device,
        [x],
        (t) => t.reshape([4, -1]),
        (a) => nd([4, 6], a.data),
      ));
    test("permute", () =>
      checkOp(
        device,
        [x],
        (t) => t.permute([2, 0, 1]),
        (a) => permute(a, [2, 0, 1]),
      ));
    test("transpose swaps the last two axes by default", () =>
      checkOp(
        device,
        [x],
        (t) => t.transpose(),
        (a) => permute(a, [0, 2, 1]),
      ));
    test("expand broadcasts size-1 axes", () =>
      checkOp(
        device,
        [randomNd([3, 1], 3)],
        (t) => t.expand([2, 3, 4]),
        (a) =>
          nd(
            [2, 3, 4],
            Array.from({ length: 24 }, (_, i) => a.data[Math.floor(i / 4) % 3]!),
          ),
      ));
    test("pad with zeros", () =>
      checkOp(
        device,
        [x],
        (t) => t.pad([[1, 0], null, [2, 1]]),
        (a) =>
          pad(a, [
            [1, 0],
            [0, 0],
            [2, 1],
          ]),
      ));
    test("pad with a value", () =>
      checkOp(
        device,
        [x],
        (t) => t.pad([null, [1, 1], null], 2.5),
        (a) =>
          pad(
            a,
            [
              [0, 0],
              [1, 1],
              [0, 0],
            ],
            2.5,
          ),
      ));
    test("gather keeps the dtype of what it gathers (bool, int8)", () => {
      const g = new Tensor([[true, false]], { device }).gather(1, new Tensor([[1, 0]], { device }));
      assert.equal(g.dtype, dtypes.bool);
      assert.deepEqual(g.tolist(), [[false, true]]);
      const i8 = new Tensor([[-5, 7]], { device, dtype: dtypes.int8 }).gather(1, new Tensor([[1, 1, 0]], { device }));
      assert.equal(i8.dtype, dtypes.int8);
      assert.deepEqual(i8.tolist(), [[7, 7, -5]]);
    });
    test("pad modes reflect, replicate and circular (numpy's reflect, edge and wrap), with gradients", () => {
      const m = new Tensor(
        [
          [1, 2, 3],
          [4, 5, 6],
        ],
        { device },
      );
      // np.pad(x, ((1, 1), (2, 1)), mode=...)
      assert.deepEqual(
        m
          .pad(
            [
              [1, 1],
              [2, 1],
            ],
            0,
            "reflect",
          )
          .tolist(),
        [
          [6, 5, 4, 5, 6, 5],
          [3, 2, 1, 2, 3, 2],
          [6, 5, 4, 5, 6, 5],
          [3, 2, 1, 2, 3, 2],
        ],
      );
      assert.deepEqual(
        m
          .pad(
            [
              [1, 1],
              [2, 1],
            ],
            0,
            "replicate",
          )
          .tolist(),
        [
          [1, 1, 1, 2, 3, 3],
          [1, 1, 1, 2, 3, 3],
          [4, 4, 4, 5, 6, 6],
          [4, 4, 4, 5, 6, 6],
        ],
      );
      assert.deepEqual(
        m
          .pad(
            [
              [1, 1],
              [2, 1],
            ],
            0,
            "circular",
          )
          .tolist(),
        [
          [5, 6, 4, 5, 6, 4],
          [2, 3, 1, 2, 3, 1],
          [5, 6, 4, 5, 6, 4],
          [2, 3, 1, 2, 3, 1],
        ],
      );
      // along the last axis, element j of the padded row reads source index `from(j)` of the row
      const along = (a: Nd, width: number, from: (j: number, n: number) => number): Nd => {
        const n = a.shape[2]!;
        const out: number[] = [];
        for (let r = 0; r < a.data.length / n; r++)
          for (let j = 0; j < width; j++) out.push(a.data[r * n + from(j, n)]!);
        return nd([...a.shape.slice(0, 2), width], out);
      };
      const reflect = (j: number, n: number): number => {
        const i = Math.abs(j - 2);
        return i < n ? i : 2 * (n - 1) - i;
      };
      checkOp(
        device,
        [x],
        (t) => t.pad([null, null, [2, 3]], 0, "reflect"),
        (a) => along(a, 9, reflect),
      );
      checkOp(
        device,
        [x],
        (t) => t.pad([null, null, [2, 3]], 0, "replicate"),
        (a) => along(a, 9, (j, n) => Math.min(Math.max(j - 2, 0), n - 1)),
      );
      checkOp(
        device,
        [x],
        (t) => t.pad([null, null, [2, 3]], 0, "circular"),
        (a) => along(a, 9, (j, n) => (((j - 2) % n) + n) % n),
      );
      assert.throws(
        () => m.pad([null, [3, 0]], 0, "reflect"),
        /pad \(reflect\): \[3, 0\] on axis 1 of \[2, 3\]: at most 2 a side/,
      );
      assert.throws(() => m.pad([null, [1, 0]], 0, "mirror" as "reflect"), /pad: unknown mode "mirror"/);
    });
    test("shrink", () =>
      checkOp(
        device,
        [x],
        (t) =>
          t.shrink([
            [1, 2],
            [0, 2],
            [1, 4],
          ]),
        (a) =>
          slice(a, [
            [1, 2],
            [0, 2],
            [1, 4],
          ]),
      ));
    test("flip", () =>
      checkOp(
        device,
        [x],
        (t) => t.flip([0, 2]),
        (a) => flip(a, [0, 2]),
      ));
    test("index with ints, strided and reversed slices, new axes", () => {
      checkOp(
        device,
        [x],
        (t) => t.index(1, [null, null, -1], null, [0, 4, 2]),
        (a) => {
          const picked = slice(a, [
            [1, 2],
            [0, 3],
            [0, 4],
          ]);
          const rev = flip(picked, [1]);
          const data: number[] = [];
          for (let j = 0; j < 3; j++) for (const k of [0, 2]) data.push(rev.data[j * 4 + k]!);
          return nd([3, 1, 2], data);
        },
      );
    });
    test("index with an ellipsis", () => assert.deepEqual(fromNd(x, device).index("...", 0).shape, [2, 3]));
    test("cat joins along an axis", () =>
      checkOp(
        device,
        [randomNd([2, 2], 1), randomNd([2, 3], 2)],
        (p, q) => Tensor.cat([p, q], 1),
        (p, q) => nd([2, 5], [...p.data.slice(0, 2), ...q.data.slice(0, 3), ...p.data.slice(2), ...q.data.slice(3)]),
      ));
    test("stack adds an axis", () => {
      const [p, q] = [new Tensor([1, 2], { device }), new Tensor([3, 4], { device })];
      assert.deepEqual(Tensor.stack([p, q]).tolist(), [
        [1, 2],
        [3, 4],
      ]);
      assert.deepEqual(Tensor.stack([p, q], 1).tolist(), [
        [1, 3],
        [2, 4],
      ]);
    });
    test("split and chunk", () => {
      const t = Tensor.arange(7, undefined, 1, { device });
      assert.deepEqual(
        t.split(3).map((s) => s.tolist()),
        [[0, 1, 2], [3, 4, 5], [6]],
      );
      assert.deepEqual(
        t.split([2, 5]).map((s) => s.tolist()),
        [
          [0, 1],
          [2, 3, 4, 5, 6],
        ],
      );
      assert.deepEqual(
        t.chunk(2).map((s) => s.shape),
        [[4], [3]],
      );
    });
    test("squeeze, unsqueeze, flatten", () => {
      const t = Tensor.zeros([2, 1, 3], { device });
      assert.deepEqual(t.squeeze().shape, [2, 3]);
      assert.deepEqual(t.squeeze(1).shape, [2, 3]);
      assert.deepEqual(t.unsqueeze(-1).shape, [2, 1, 3, 1]);
      assert.deepEqual(t.flatten().shape, [6]);
      assert.deepEqual(t.flatten(1).shape, [2, 3]);
    });
    test("contiguous keeps values", () =>
      checkOp(
        device,
        [x],
        (t) => t.transpose().contiguous(),
        (a) => permute(a, [0, 2, 1]),
      ));
    test("gather along an axis", () => {
      const idx = [
        [2, 0],
        [1, 1],
        [0, 2],
      ];
      const index = new Tensor(idx, { device });
      checkOp(
        device,
        [randomNd([3, 3], 5)],
        (t) => t.gather(1, index),
        (a) =>
          nd(
            [3, 2],
            idx.flatMap((row, i) => row.map((j) => a.data[i * 3 + j]!)),
          ),
      );
    });
  });

  describe(`creation on ${device}`, () => {
    test("zeros, ones, full, empty", () => {
      assert.deepEqual(Tensor.zeros([2], { device }).tolist(), [0, 0]);
      assert.deepEqual(Tensor.ones([2], { device, dtype: "int32" }).tolist(), [1, 1]);
      assert.deepEqual(Tensor.full([2, 1], 7.5, { device }).tolist(), [[7.5], [7.5]]);
      assert.deepEqual(Tensor.empty([3], { device }).shape, [3]);
    });
    test("arange with float steps and negative steps", () => {
      assert.deepEqual(Tensor.arange(0, 1, 0.25, { device }).tolist(), [0, 0.25, 0.5, 0.75]);
      assert.deepEqual(Tensor.arange(5, 0, -2, { device }).tolist(), [5, 3, 1]);
      assert.equal(Tensor.arange(3, undefined, 1, { device }).dtype, dtypes.int32);
    });
    test("eye", () =>
      assert.deepEqual(Tensor.eye(2, 3, { device }).tolist(), [
        [1, 0, 0],
        [0, 1, 0],
      ]));
    test("nested arrays infer bool, int32 and float", () => {
      assert.equal(new Tensor([true], { device }).dtype, dtypes.bool);
      assert.equal(new Tensor([1, 2], { device }).dtype, dtypes.int32);
      assert.equal(new Tensor([1.5], { device }).dtype, dtypes.float32);
      assert.deepEqual(values(new Tensor(Float32Array.from([1, 2]), { device })), [1, 2]);
    });
  });
}
