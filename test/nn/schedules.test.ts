import assert from "node:assert/strict";
import { test } from "node:test";
import { Device, Tensor } from "../../src/index.ts";
import { jit } from "../../src/tensor/index.ts";
import { SGD } from "../../src/nn/optim.ts";
import {
  CosineDecayWithWarmup,
  LRSchedulerGroup,
  PolynomialDecayWithWarmup,
  type PolynomialDecayOptions,
  ReferencePolynomialDecay,
} from "../../src/nn/schedules.ts";
import { assertClose } from "../close.ts";

Device.DEFAULT = process.env.DEVICE ?? "JS";

/** The reference's schedule (tinygrad's MLPerf BERT, after MLCommons) on plain numbers. */
function referenceLr(
  step: number,
  { initialLr, endLr = 0, totalSteps, warmupSteps, power = 1 }: PolynomialDecayOptions,
): number {
  if (step <= warmupSteps) return (step / warmupSteps) * initialLr;
  return (initialLr - endLr) * (1 - (step - warmupSteps) / (totalSteps - warmupSteps + 1)) ** power + endLr;
}

const optimizer = (): SGD => {
  const w = new Tensor([1.5]);
  w.requiresGrad = true;
  return new SGD([w.realize()], { lr: 123 });
};

/** Learning rates are float32 scalars, checked to 1e-6. */
const TOLERANCE = { atol: 1e-6, rtol: 0 };

/** The learning rate before each of the first `steps` steps. */
function lrs(options: PolynomialDecayOptions, steps: number): number[] {
  const opt = optimizer();
  const schedule = new PolynomialDecayWithWarmup(opt, options);
  const seen: number[] = [];
  for (let i = 0; i < steps; i++) {
    seen.push(opt.lr.item());
    schedule.step();
  }
  return seen;
}

test("warmup starts at 0 and rises linearly to the initial rate", () => {
  const options = { initialLr: 0.004, totalSteps: 100, warmupSteps: 4 };
  const seen = lrs(options, 5);
  [0, 0.001, 0.002, 0.003, 0.004].forEach((expected, step) => assertClose(seen[step]!, expected, TOLERANCE));
});

test("after warmup the rate decays linearly (power 1) as the reference computes it", () => {
  const options = { initialLr: 0.004, totalSteps: 20, warmupSteps: 4 };
  const seen = lrs(options, 21);
  seen.forEach((lr, step) => assertClose(lr, referenceLr(step, options), TOLERANCE));
  assertClose(seen[5]!, 0.004 * (1 - 1 / 17), TOLERANCE);
  assertClose(seen[20]!, 0.004 * (1 - 16 / 17), TOLERANCE);
});

test("power 2 squares the decay and a non-zero end rate is the floor it approaches", () => {
  const options = { initialLr: 0.1, endLr: 0.01, totalSteps: 10, warmupSteps: 2, power: 2 };
  lrs(options, 11).forEach((lr, step) => assertClose(lr, referenceLr(step, options), TOLERANCE));
});

test("without warmup the first step already runs at the initial rate", () => {
  const seen = lrs({ initialLr: 0.5, totalSteps: 9, warmupSteps: 0 }, 3);
  assertClose(seen[0]!, 0.5, TOLERANCE);
  assertClose(seen[1]!, 0.5 * (1 - 1 / 10), TOLERANCE);
});

test("a scheduler group steps every scheduler together", () => {
  const [a, b] = [optimizer(), optimizer()];
  const group = new LRSchedulerGroup(
    new PolynomialDecayWithWarmup(a, { initialLr: 1, totalSteps: 10, warmupSteps: 2 }),
    new PolynomialDecayWithWarmup(b, { initialLr: 2, totalSteps: 10, warmupSteps: 2 }),
  );
  group.step();
  assertClose(a.lr.item(), 0.5, TOLERANCE);
  assertClose(b.lr.item(), 1, TOLERANCE);
  assert.deepEqual(Object.keys(group.stateDict()), ["0.step", "1.step"]);
  assert.equal(group.schedulers[1]!.stepCount.item(), 1);
});

test("a jitted function that reads the learning rate sees each scheduled change", () => {
  const opt = optimizer();
  const schedule = new PolynomialDecayWithWarmup(opt, { initialLr: 0.4, totalSteps: 100, warmupSteps: 4 });
  const scaled = jit((x: Tensor) => x.mul(opt.lr));
  const x = new Tensor([10]);
  const seen: number[] = [];
  for (let i = 0; i < 5; i++) {
    seen.push(scaled(x).item());
    schedule.step();
  }
  [0, 1, 2, 3, 4].forEach((expected, i) => assertClose(seen[i]!, expected, TOLERANCE));
  assert.ok(scaled.jit.isCaptured, "the function was captured and replayed");
});

test("bad schedule settings are refused", () => {
  assert.throws(
    () => new PolynomialDecayWithWarmup(optimizer(), { initialLr: 1, totalSteps: 0, warmupSteps: 1 }),
    /totalSteps 0 must be > 0/,
  );
});

test("cosine decay warms up linearly, then follows half a cosine down to the end rate and stays there", () => {
  const opt = optimizer();
  const schedule = new CosineDecayWithWarmup(opt, { initialLr: 0.3, endLr: 0.01, totalSteps: 10, warmupSteps: 2 });
  const seen: number[] = [];
  for (let i = 0; i < 13; i++) {
    seen.push(opt.lr.item());
    schedule.step();
  }
  const expected = seen.map((_, s) =>
    s < 2 ? (0.3 * s) / 2 : 0.01 + (0.29 * (1 + Math.cos(Math.PI * Math.min((s - 2) / 8, 1)))) / 2,
  );
  seen.forEach((lr, s) => assertClose(lr, expected[s]!, TOLERANCE));
  assertClose(seen[2]!, 0.3, TOLERANCE);
  assertClose(seen[6]!, 0.155, TOLERANCE); // halfway down
  assertClose(seen[12]!, 0.01, TOLERANCE);
  const flat = optimizer();
  new CosineDecayWithWarmup(flat, { initialLr: 0.5, totalSteps: 4 });
  assertClose(flat.lr.item(), 0.5, TOLERANCE);
  assert.throws(
    () => new CosineDecayWithWarmup(optimizer(), { initialLr: 1, totalSteps: -1 }),
    /CosineDecayWithWarmup: totalSteps -1 must be > 0/,
  );
});

/** The MLPerf reference's schedule (TensorFlow's polynomial_decay, a linear warmup replacing it) on numbers. */
function tfLr(step: number, initialLr: number, totalSteps: number, warmupSteps: number, power = 1, start = 0): number {
  if (warmupSteps > 0 && step - start < warmupSteps) return (initialLr * (step - start)) / warmupSteps;
  return initialLr * (1 - Math.min(step, totalSteps) / totalSteps) ** power;
}

test("ReferencePolynomialDecay follows the reference: decay from step 0, the warmup replacing it", () => {
  for (const [total, warmup, power, start] of [
    [10, 3, 1, 0],
    [10, 0, 1, 0],
    [20, 4, 2, 1],
  ] as const) {
    const opt = optimizer();
    const schedule = new ReferencePolynomialDecay(opt, {
      initialLr: 0.5,
      totalSteps: total,
      warmupSteps: warmup,
      power,
      startWarmupStep: start,
    });
    const lrs: number[] = [];
    for (let step = 0; step <= total + 2; step++) {
      lrs.push(opt.lr.item());
      schedule.step();
    }
    const expected = lrs.map((_, step) => tfLr(step, 0.5, total, warmup, power, start));
    assertClose(lrs, expected, { atol: 1e-7, rtol: 1e-6, what: `total ${total}, warmup ${warmup}, power ${power}` });
  }
  // where the seed differs: the step after the warmup runs with the decayed rate, not the peak
  const opt = optimizer();
  const schedule = new ReferencePolynomialDecay(opt, { initialLr: 1, totalSteps: 10, warmupSteps: 2 });
  schedule.step();
  schedule.step();
  assertClose(opt.lr.item(), 0.8, { atol: 1e-7, what: "LR at step 2 of 10 after a warmup of 2" });
});
