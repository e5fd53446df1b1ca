// Eager calls of one graph structure on new buffers reuse the first call's schedule (engine/schedule.ts): what
// the key must tell apart (aliasing, constants, views, assigns) gives the numbers an uncached schedule gives.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, tidy } from "../../src/index.ts";
import { scheduleCacheStats } from "../../src/engine/schedule.ts";
import { testDevices } from "../devices.ts";

const data = (n: number, seed: number): Float32Array =>
  Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + seed));
const uncached = <T>(fn: () => T): T => {
  process.env.SCHEDULE_CACHE = "0";
  try {
    return fn();
  } finally {
    delete process.env.SCHEDULE_CACHE;
  }
};
const same = (got: Float32Array, want: Float32Array, what: string): void => {
  assert.equal(got.length, want.length, what);
  got.forEach((g, i) => assert.ok(Object.is(g, want[i]), `${what}[${i}]: ${g} vs ${want[i]}`));
};

for (const device of testDevices().filter((d) => d.startsWith("CPU") || d.startsWith("JS"))) {
  test(`repeated eager calls hit the schedule cache and compute what an uncached schedule does (${device})`, () => {
    const w = new Tensor(data(24 * 16, 1), { device }).reshape([24, 16]).realize();
    const step = (seed: number, scale: number): Float32Array =>
      tidy(() => {
        const x = new Tensor(data(8 * 24, seed), { device }).reshape([8, 24]);
        return x.matmul(w).relu().mul(scale).softmax(-1).sum({ axis: 0 }).toArray() as Float32Array;
      });
    step(0, 2);
    const before = { ...scheduleCacheStats };
    for (let seed = 1; seed < 6; seed++)
      same(
        step(seed, 2),
        uncached(() => step(seed, 2)),
        `seed ${seed}`,
      );
    assert.ok(scheduleCacheStats.hits - before.hits >= 5, `hits ${scheduleCacheStats.hits - before.hits}`);
    // another constant is another schedule, with its own numbers
    same(
      step(7, 3),
      uncached(() => step(7, 3)),
      "scale 3",
    );
  });

  test(`the schedule cache tells one buffer read twice from two buffers, and views apart (${device})`, () => {
    const a = new Tensor(data(64, 2), { device }).reshape([8, 8]).realize();
    const b = new Tensor(data(64, 3), { device }).reshape([8, 8]).realize();
    const f = (x: Tensor, y: Tensor) => x.add(y.transpose()).mul(x).toArray() as Float32Array;
    for (let round = 0; round < 2; round++) {
      same(
        f(a, b),
        uncached(() => f(a, b)),
        `a, b round ${round}`,
      );
      same(
        f(a, a),
        uncached(() => f(a, a)),
        `a, a round ${round}`,
      );
      same(
        f(b, a),
        uncached(() => f(b, a)),
        `b, a round ${round}`,
      );
      // two leaves of one graph over one buffer: the same structure as (a, b) but for the aliasing
      same(
        f(a, a.detach()),
        uncached(() => f(a, a.detach())),
        `a, a.detach() round ${round}`,
      );
      // the same buffer under another view: a flat [64] reshaped
      const flat = new Tensor(data(64, 4), { device }).realize();
      same(
        f(flat.reshape([8, 8]), b),
        uncached(() => f(flat.reshape([8, 8]), b)),
        `flat round ${round}`,
      );
    }
  });

  test(`in-place updates in a loop stay in place with cached schedules (${device})`, () => {
    const run = (): Float32Array => {
      const p = new Tensor(data(32, 5), { device }).realize();
      for (let i = 0; i < 6; i++) {
        const g = new Tensor(data(32, i), { device });
        p.assign(p.sub(g.mul(0.1)).flip(0)).realize(); // reads its target elsewhere: computed through a temporary
      }
      return p.toArray() as Float32Array;
    };
    same(run(), uncached(run), "after six updates");
  });
}
