// The CPU backend compiles lazily: everything a schedule will run is compiled in one round of compiler runs
// (each run costs ~0.1 s of start-up and headers however small its kernel), including the variants for
// in-place updates (a buffer in two slots is not promised to the compiler as unaliased), the parameters of a
// model built inside `initialisedTogether`, and an optimizer's state.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import { compileStats } from "../../src/runtime/compiler_cache.ts";
import { LAMB } from "../../src/nn/optim.ts";
import { ReferencePolynomialDecay } from "../../src/nn/schedules.ts";
import { Linear, parameter, truncatedNormal } from "../../src/nn/layers.ts";
import { initialisedTogether } from "../../src/nn/together.ts";

const hasCpu = Device.isAvailable("CPU");
const device = "CPU";

// a cache folder of its own: nothing this file runs was compiled before
let cache = "";
let saved: string | undefined;
before(() => {
  saved = process.env.TSGRAD_CACHE;
  cache = mkdtempSync(join(tmpdir(), "tsgrad-rounds-"));
  process.env.TSGRAD_CACHE = cache;
});
after(() => {
  if (saved === undefined) delete process.env.TSGRAD_CACHE;
  else process.env.TSGRAD_CACHE = saved;
  rmSync(cache, { recursive: true, force: true });
});

/** Compiler rounds and compiled functions while `fn` runs. */
function rounds(fn: () => void): { rounds: number; compiled: number } {
  const [r, c] = [compileStats.rounds, compileStats.compiled];
  fn();
  return { rounds: compileStats.rounds - r, compiled: compileStats.compiled - c };
}

test("in-place updates compile with the rest of their schedule, in one round", { skip: !hasCpu }, () => {
  const a = new Tensor([1, 2, 3, 4, 5, 6, 7], { dtype: dtypes.float32, device }).contiguous().realize();
  const b = new Tensor(
    [
      [1, 2, 3],
      [4, 5, 6],
    ],
    { dtype: dtypes.float32, device },
  )
    .contiguous()
    .realize();
  const c = Tensor.full([5], 3, { dtype: dtypes.float32, device }).contiguous().realize();
  // two in-place updates (the target is read and written: the aliased variant) and a plain kernel
  a.assign(a.mul(3).add(0.25));
  b.assign(b.sqrt().mul(b));
  const d = c.mul(c).add(7.5);
  const seen = rounds(() => Tensor.realizeAll([a, b, d]));
  assert.equal(seen.rounds, 1, "one round of compiler runs");
  assert.ok(seen.compiled >= 3, `the three kernels compiled (${seen.compiled})`);
  assert.deepEqual(
    Array.from(a.toArray() as Float32Array),
    [1, 2, 3, 4, 5, 6, 7].map((x) => x * 3 + 0.25),
  );
  assert.deepEqual(
    b.tolist(),
    [
      [1, 2, 3],
      [4, 5, 6],
    ].map((row) => row.map((x) => Math.fround(Math.fround(Math.sqrt(x)) * x))),
  );
  assert.deepEqual(Array.from(d.toArray() as Float32Array), [16.5, 16.5, 16.5, 16.5, 16.5]);
});

/** A small model with parameters of several shapes (each shape its own initialiser kernel). */
function build(): { layers: Linear[]; extra: Tensor } {
  const init = truncatedNormal(0.02);
  const layers = [
    new Linear(5, 7, { weightInit: init }),
    new Linear(7, 3, { weightInit: init }),
    new Linear(3, 9, { weightInit: init }),
  ];
  return { layers, extra: parameter(init, [4, 11]) };
}
const valuesOf = (m: { layers: Linear[]; extra: Tensor }): number[][] =>
  [...m.layers.flatMap((l) => [l.weight, l.bias!]), m.extra].map((t) => Array.from(t.toArray() as Float32Array));

test("initialisedTogether realizes a model's parameters in one round, with the values made one at a time", {
  skip: !hasCpu,
}, () => {
  Tensor.manualSeed(7);
  let together!: { layers: Linear[]; extra: Tensor };
  const seen = rounds(() => (together = initialisedTogether(() => build())));
  assert.equal(seen.rounds, 1);
  assert.ok(seen.compiled >= 4, `the initialisers compiled (${seen.compiled})`);
  Tensor.manualSeed(7);
  const alone = build();
  assert.deepEqual(valuesOf(together), valuesOf(alone));
  // each parameter owns its buffer: equal values (the zero biases of two layers) do not share one
  const [first, second] = [together.layers[0]!.bias!, together.layers[1]!.bias!];
  first.assign(first.add(1)).realize();
  assert.notDeepEqual(first.tolist(), valuesOf(alone)[1]);
  assert.deepEqual(second.tolist(), valuesOf(alone)[3]);
});

test("LAMB's moments are zeros in buffers of their own, made in one round", { skip: !hasCpu }, () => {
  const params = [[6, 5], [6], [13, 2]].map((shape) =>
    Tensor.ones(shape, { dtype: dtypes.float32, device }).mul(0.5).contiguous().realize(),
  );
  for (const p of params) p.requiresGrad = true;
  let opt!: LAMB;
  const seen = rounds(() => (opt = new LAMB(params, { lr: 0.1 })));
  assert.equal(seen.rounds, 1);
  const buffers = [...opt.m, ...opt.v];
  assert.ok(buffers.every((t) => (t.toArray() as Float32Array).every((x) => x === 0)));
  // m and v of one parameter have equal lazy values; writing one must leave the other alone
  opt.m[0]!.assign(opt.m[0]!.add(2)).realize();
  assert.ok((opt.v[0]!.toArray() as Float32Array).every((x) => x === 0));
  assert.ok((opt.m[0]!.toArray() as Float32Array).every((x) => x === 2));
});

test("optimizers and schedules made inside initialisedTogether join its one round, nested ones too", {
  skip: !hasCpu,
}, () => {
  const made = () => {
    const model = initialisedTogether(() => build()); // nested: joins the outer scope
    const params = [...model.layers.flatMap((l) => [l.weight, l.bias!]), model.extra];
    const optimizers = [new LAMB(params.slice(0, 3), { lr: 0.5 }), new LAMB(params.slice(3), { lr: 0.25 })];
    const schedules = optimizers.map(
      (o) =>
        new ReferencePolynomialDecay(o, {
          initialLr: o === optimizers[0] ? 0.5 : 0.25,
          totalSteps: 10,
          warmupSteps: 4,
        }),
    );
    return { model, optimizers, schedules };
  };
  Tensor.manualSeed(3);
  let together!: ReturnType<typeof made>;
  const seen = rounds(() => (together = initialisedTogether(made)));
  assert.equal(seen.rounds, 1, "parameters, moments and first rates in one round");
  // the same values as made one at a time (warmup from 0: the first rate is 0)
  Tensor.manualSeed(3);
  const apart = made();
  assert.deepEqual(valuesOf(together.model), valuesOf(apart.model));
  for (const [i, o] of together.optimizers.entries()) {
    assert.equal(o.lr.item(), apart.optimizers[i]!.lr.item());
    assert.equal(o.lr.item(), 0);
    assert.ok([...o.m, ...o.v].every((t) => (t.toArray() as Float32Array).every((x) => x === 0)));
  }
  // the first step's rate: warmup step 1 of 4
  together.schedules[0]!.step();
  assert.equal(together.optimizers[0]!.lr.item(), Math.fround(0.5 / 4));
});
