import { test } from "node:test";
import assert from "node:assert/strict";
import { GlobalCounters, Tensor, dtypes } from "../../src/index.ts";
import { MAX_CAPTURES, jit } from "../../src/tensor/index.ts";
import { testDevices } from "../devices.ts";

for (const device of testDevices()) {
  test(`a replayed function gives the same numbers as an uncaptured one (${device})`, () => {
    const w = new Tensor(
      [
        [1, 2],
        [3, 4],
      ],
      { device, dtype: "float32" },
    ).realize();
    const f = (x: Tensor): Tensor => x.matmul(w).relu().sum({ axis: 1 });
    const jf = jit(f);
    for (let i = 0; i < 5; i++) {
      const x = new Tensor(
        [
          [i, -1],
          [2, i * 0.5],
        ],
        { device, dtype: "float32" },
      );
      assert.deepEqual(jf(x).tolist(), f(x).tolist(), `call ${i}`);
    }
    assert.ok(jf.jit.isCaptured);
  });

  test(`a jitted SGD step updates weights in place like the plain step, several steps in a row (${device})`, () => {
    const makeParams = () => [
      new Tensor(
        [
          [0.5, -0.2],
          [0.1, 0.3],
        ],
        { device, dtype: "float32", requiresGrad: true },
      ).realize(),
      new Tensor([0.1, -0.1], { device, dtype: "float32", requiresGrad: true }).realize(),
    ];
    const step =
      (params: Tensor[]) =>
      (x: Tensor, y: Tensor): Tensor => {
        const [w, b] = params as [Tensor, Tensor];
        const loss = x.matmul(w).add(b).sub(y).square().mean();
        w.grad = b.grad = null;
        loss.backward();
        for (const p of params) p.assign(p.sub(p.grad!.mul(0.1)));
        return loss;
      };
    const plain = makeParams();
    const jitted = makeParams();
    const plainStep = step(plain);
    const jitStep = jit(step(jitted));
    for (let i = 0; i < 6; i++) {
      const x = new Tensor(
        [
          [1, i],
          [i * 0.3, -1],
        ],
        { device, dtype: "float32" },
      );
      const y = new Tensor(
        [
          [1, 0],
          [0, 1],
        ],
        { device, dtype: "float32" },
      );
      const a = plainStep(x, y);
      Tensor.realizeAll([a, ...plain]);
      const b = jitStep(x, y);
      assert.equal(b.item(), a.item(), `loss at step ${i}`);
      plain.forEach((p, n) => assert.deepEqual(jitted[n]!.tolist(), p.tolist(), `param ${n} at step ${i}`));
    }
  });
}

test("replay runs the captured kernels without scheduling again", () => {
  const f = jit((x: Tensor) => x.mul(2).add(1).exp().sum());
  for (let i = 0; i < 2; i++) f(new Tensor([1, 2, 3], { device: "JS", dtype: "float32" }));
  GlobalCounters.reset();
  const out = f(new Tensor([0, 0, 0], { device: "JS", dtype: "float32" }));
  assert.equal(GlobalCounters.kernelCount, 1);
  assert.ok(Math.abs(out.item() - 3 * Math.E) < 1e-5);
});

test("dropout inside a replayed step draws new masks each call", () => {
  Tensor.manualSeed(7);
  Tensor.training = true;
  try {
    const f = jit((x: Tensor) => x.dropout(0.5));
    const masks = Array.from({ length: 4 }, () =>
      JSON.stringify(f(Tensor.ones([64], { device: "JS" }).contiguous()).tolist()),
    );
    assert.equal(new Set(masks).size, 4);
  } finally {
    Tensor.training = false;
  }
});

test("each input signature gets a capture of its own (a last batch of another size replays too)", () => {
  let traced = 0; // calls that ran the function itself rather than a replay
  const f = jit((x: Tensor) => (traced++, x.add(1).sum()));
  const run = (n: number): number => f(Tensor.ones([n], { device: "JS" }).contiguous()).item();
  for (let i = 0; i < 2; i++) assert.equal(run(3), 6);
  assert.equal(f.jit.captureCount, 1);
  // a new shape runs normally first, then is recorded; both replay afterwards, interleaved
  assert.equal(run(4), 8);
  assert.equal(f.jit.captureCount, 1);
  assert.equal(run(4), 8);
  assert.equal(f.jit.captureCount, 2);
  assert.equal(traced, 4);
  assert.deepEqual([run(3), run(4), run(3), run(4)], [6, 8, 6, 8]);
  assert.equal(traced, 4, "these calls were replays");
  // another dtype is another signature
  assert.equal(f(Tensor.ones([3], { device: "JS", dtype: dtypes.int32 }).contiguous()).item(), 6);
});

test(`past ${MAX_CAPTURES} signatures, calls run uncaptured with the right results`, () => {
  let traced = 0;
  const f = jit((x: Tensor) => (traced++, x.mul(2).sum()));
  for (let n = 1; n <= MAX_CAPTURES + 2; n++) {
    for (let i = 0; i < 3; i++) assert.equal(f(Tensor.ones([n], { device: "JS" }).contiguous()).item(), 2 * n);
  }
  assert.equal(f.jit.captureCount, MAX_CAPTURES);
  // two calls traced per captured signature (run, record), three for each one past the limit
  assert.equal(traced, 2 * MAX_CAPTURES + 3 * 2);
});

test("reset() captures again, JIT=0 never captures", () => {
  const f = jit((x: Tensor) => x.add(1));
  for (let i = 0; i < 2; i++) f(Tensor.zeros([3], { device: "JS" }));
  f.reset();
  assert.equal(f.jit.isCaptured, false);
  process.env.JIT = "0";
  try {
    const g = jit((x: Tensor) => x.add(1));
    for (let i = 0; i < 3; i++) g(Tensor.zeros([3], { device: "JS" }));
    assert.equal(g.jit.isCaptured, false);
  } finally {
    delete process.env.JIT;
  }
});
