// Giving memory back without the garbage collector: Tensor.dispose() and tidy(). In one synchronous loop nothing
// is ever collected, so these are what keep an eager loop's memory flat; using what they freed must throw.
import { test } from "node:test";
import assert from "node:assert/strict";
import koffi from "koffi";
import { GlobalCounters, Tensor, keep, nn, tidy } from "../../src/index.ts";
import { jit } from "../../src/tensor/index.ts";
import { storedBuffer } from "../../src/engine/schedule.ts";
import type { UOp } from "../../src/uop.ts";
import { testDevices } from "../devices.ts";

const close = (got: ArrayLike<number>, want: ArrayLike<number>, what: string, tol = 1e-4): void => {
  assert.equal(got.length, want.length, what);
  for (let i = 0; i < want.length; i++)
    assert.ok(Math.abs(got[i]! - want[i]!) <= tol * (1 + Math.abs(want[i]!)), `${what}[${i}]: ${got[i]} vs ${want[i]}`);
};
const bufferOf = (t: Tensor) => storedBuffer(t.node as UOp)!;
const data = (n: number, seed: number): Float32Array => Float32Array.from({ length: n }, (_, i) => Math.sin(i * seed));

for (const device of testDevices().filter((d) => d.startsWith("CPU") || d.startsWith("JS"))) {
  test(`dispose() gives a tensor's memory back at once, and any later use throws (${device})`, () => {
    const x = new Tensor(data(4096, 1), { device }).reshape([64, 64]);
    const view = x.transpose(); // made before the dispose: reads the same buffer
    const before = GlobalCounters.memUsed;
    x.dispose();
    assert.equal(before - GlobalCounters.memUsed, 4096 * 4, "the buffer's bytes are given back");
    assert.ok(x.isDisposed);
    assert.throws(() => x.add(1), /this \[64, 64\] tensor was disposed/);
    assert.throws(
      () => view.realize(),
      /reads a float32 buffer of 4096 elements on .* that was disposed: .*tidy\(\)/,
      "a view of freed memory must not read whatever the pool put there",
    );
    assert.match(String(x), /disposed/);
    x.dispose(); // a second dispose is a no-op
  });

  test(`a lazy tensor's dispose frees nothing, and a buffer two tensors were realized onto lives until both go (${device})`, () => {
    const a = new Tensor(data(256, 2), { device });
    const lazy = a.mul(3);
    lazy.dispose();
    close(a.toArray() as Float32Array, data(256, 2), "a is untouched");
    // equal lazy values realized by two tensors share one buffer
    const p = a.add(1),
      q = a.add(1);
    Tensor.realizeAll([p, q]);
    assert.equal(bufferOf(p), bufferOf(q));
    p.dispose();
    close(
      q.toArray() as Float32Array,
      Array.from(data(256, 2), (v) => v + 1),
      "q still holds its values",
    );
    q.dispose();
    assert.ok(bufferOf(a).disposed === false && storedBuffer(a.add(1).node as UOp) === undefined);
  });

  test(`tidy() keeps an eager loop's memory flat and what it returns intact (${device})`, () => {
    const w = new Tensor(data(64 * 64, 3), { device }).reshape([64, 64]).realize();
    const want = (x: Float32Array): number[] => {
      const out: number[] = [];
      const wv = w.toArray() as Float32Array;
      for (let r = 0; r < 16; r++)
        for (let c = 0; c < 64; c++) {
          let s = 0;
          for (let k = 0; k < 64; k++) s += x[r * 64 + k]! * wv[k * 64 + c]!;
          out.push(Math.tanh(s) * 2);
        }
      return out;
    };
    const used: number[] = [];
    for (let step = 0; step < 12; step++) {
      const input = data(16 * 64, step + 5);
      const result = tidy(() => {
        const x = new Tensor(input, { device }).reshape([16, 64]);
        const h = x.matmul(w).tanh().realize(); // an intermediate realized inside: freed at the end
        return h.mul(2).realize();
      });
      close(result.toArray() as Float32Array, want(input), `step ${step}`, 1e-4);
      result.dispose();
      used.push(GlobalCounters.memUsed);
    }
    // after the first steps (the RNG-free loop allocates the same every step) nothing grows
    assert.equal(used.at(-1), used[2], `memory in use by step: ${used.join(", ")}`);
  });

  test(`tidy() keeps what outside tensors came to hold inside it: assigns, gradients, optimizer state, RNG (${device})`, () => {
    const weight = new Tensor(
      Array.from({ length: 4 }, (_, r) => Array.from(data(8, r + 13))),
      { device, requiresGrad: true },
    );
    const bias = new Tensor(data(4, 17), { device, requiresGrad: true });
    const params = [weight, bias];
    const opt = new nn.AdamW(params, { lr: 1e-2 });
    const x = new Tensor(data(32, 7), { device }).reshape([4, 8]);
    const losses: number[] = [];
    const lazyState = new Tensor(data(8, 9), { device }).mul(2); // made outside, realized inside
    for (let step = 0; step < 4; step++) {
      tidy(() => {
        opt.zeroGrad();
        const loss = x.matmul(weight.transpose()).add(bias).dropout(0.1).square().mean();
        loss.backward();
        Tensor.realizeAll([...opt.scheduleStep(), loss]);
        losses.push(loss.item());
        lazyState.realize();
      });
    }
    // the parameters' gradients were set inside: they stay readable
    for (const p of params) assert.ok(p.grad && (p.grad.toArray() as Float32Array).every(Number.isFinite));
    close(
      lazyState.toArray() as Float32Array,
      Array.from(data(8, 9), (v) => v * 2),
      "outer tensor realized inside",
    );
    assert.ok(losses.every(Number.isFinite) && losses[3]! < losses[0]!, `losses ${losses.join(", ")}`);
    // a draw after the scopes still works: the RNG's counter made inside the first scope was kept
    assert.equal((Tensor.rand([5], { device }).toArray() as Float32Array).length, 5);
  });

  test(`tidy() leaves a JIT's buffers to it, frees what is not returned, and nests (${device})`, () => {
    const w = new Tensor(data(32 * 32, 11), { device }).reshape([32, 32]).realize();
    const f = jit((x: Tensor) => x.matmul(w).relu().sum({ axis: 1 }));
    for (let call = 0; call < 5; call++) {
      const input = data(4 * 32, call + 1);
      const got = tidy(() => f(new Tensor(input, { device }).reshape([4, 32])).toArray() as Float32Array);
      const x = new Tensor(input, { device }).reshape([4, 32]);
      close(got, x.matmul(w).relu().sum({ axis: 1 }).toArray() as Float32Array, `call ${call}`);
    }
    assert.ok(f.jit.isCaptured, "replays ran inside scopes");
    const scoped: Tensor[] = [];
    const outer = tidy(() => {
      const inner = tidy(() => w.add(1).realize());
      scoped.push(
        inner,
        tidy(() => w.add(2).realize()),
      );
      const kept = keep(w.mul(5).realize());
      return { kept, sum: inner.sum() };
    });
    // what an inner scope returns belongs to the outer one: kept there only if its result reads it
    const [inner, dropped] = scoped as [Tensor, Tensor];
    assert.throws(() => dropped.toArray(), /float32 buffer of 1024 elements on .* disposed/);
    assert.equal(inner.shape.join(), "32,32");
    close(
      [outer.sum.item()],
      [(w.toArray() as Float32Array).reduce((s, v) => s + v + 1, 0)],
      "sum read inner's buffer",
    );
    close(
      outer.kept.toArray() as Float32Array,
      Array.from(w.toArray() as Float32Array, (v) => v * 5),
      "kept",
    );
    assert.throws(() => tidy(async () => 1), /synchronous/);
  });
}

test("a disposed buffer's host memory goes to the next tensor of its size", () => {
  const a = new Tensor(data(1 << 16, 1), { device: "CPU" }).realize();
  const address = koffi.address(bufferOf(a).handle as Uint8Array);
  a.dispose();
  const b = new Tensor(data(1 << 16, 2), { device: "CPU" }).realize();
  assert.equal(koffi.address(bufferOf(b).handle as Uint8Array), address, "the pool handed the same memory out");
  close(b.toArray() as Float32Array, data(1 << 16, 2), "b's own values");
});
