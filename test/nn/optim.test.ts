import assert from "node:assert/strict";
import { test } from "node:test";
import { Device, Tensor } from "../../src/index.ts";
import { AdamW, LAMB, OptimizerGroup, SGD, clipGradNorm, type Optimizer } from "../../src/nn/optim.ts";
import { assertClose } from "../close.ts";

Device.DEFAULT = process.env.DEVICE ?? "JS";

// ---------------------------------------------------------------- plain-JS references, one tensor each

type Vec = number[];
const norm = (x: Vec): number => Math.sqrt(x.reduce((s, v) => s + v * v, 0));

/** PyTorch's SGD (dampening 0): g += wd*w; buf = momentum*buf + g; w -= lr * (nesterov ? g + momentum*buf : buf). */
function sgdReference(
  w: Vec,
  grads: Vec[],
  {
    lr,
    momentum = 0,
    weightDecay = 0,
    nesterov = false,
  }: { lr: number; momentum?: number; weightDecay?: number; nesterov?: boolean },
): Vec {
  let buf = w.map(() => 0);
  for (const grad of grads) {
    const g = grad.map((gi, i) => gi + weightDecay * w[i]!);
    buf = buf.map((b, i) => momentum * b + g[i]!);
    const d = momentum ? g.map((gi, i) => (nesterov ? gi + momentum * buf[i]! : buf[i]!)) : g;
    w = w.map((wi, i) => wi - lr * d[i]!);
  }
  return w;
}

/** LAMB as the MLPerf BERT reference (adam: true gives AdamW): bias-corrected moments, trust ratio per tensor. */
function lambReference(
  w: Vec,
  grads: Vec[],
  {
    lr,
    b1 = 0.9,
    b2 = 0.999,
    eps = 1e-6,
    weightDecay = 0,
    adam = false,
    layerAdaptation = true,
  }: {
    lr: number;
    b1?: number;
    b2?: number;
    eps?: number;
    weightDecay?: number;
    adam?: boolean;
    layerAdaptation?: boolean;
  },
): Vec {
  let m = w.map(() => 0);
  let v = w.map(() => 0);
  grads.forEach((g, t) => {
    m = m.map((mi, i) => b1 * mi + (1 - b1) * g[i]!);
    v = v.map((vi, i) => b2 * vi + (1 - b2) * g[i]! * g[i]!);
    const up = w.map(
      (wi, i) => m[i]! / (1 - b1 ** (t + 1)) / (Math.sqrt(v[i]! / (1 - b2 ** (t + 1))) + eps) + weightDecay * wi,
    );
    const [wn, un] = [norm(w), norm(up)];
    const ratio = adam || !layerAdaptation || wn === 0 || un === 0 ? 1 : wn / un;
    w = w.map((wi, i) => wi - lr * ratio * up[i]!);
  });
  return w;
}

/** Float32 results against float64 references. */
const TOLERANCE = { rtol: 1e-5, atol: 1e-6 };

// ---------------------------------------------------------------- driving an optimizer with given gradients

const W0 = [0.5, -1.25, 2, 0.125, -0.75, 1.5];
const GRADS = [
  [0.3, -0.2, 0.1, 0.05, -0.4, 0.25],
  [-0.1, 0.35, 0.2, -0.15, 0.05, 0.3],
  [0.2, 0.1, -0.3, 0.4, 0.15, -0.05],
];

const param = (values: Vec): Tensor => {
  const t = new Tensor(values, { dtype: "float32" });
  t.requiresGrad = true;
  return t.realize();
};

/** Sets `p.grad` to each of `grads` in turn and steps. */
function run(make: (p: Tensor) => Optimizer, grads: Vec[], w0 = W0): Float32Array {
  const p = param(w0);
  const opt = make(p);
  for (const g of grads) {
    p.grad = new Tensor(g, { dtype: "float32" });
    opt.step();
  }
  return p.toArray() as Float32Array;
}

test("SGD takes plain gradient steps", () => {
  assertClose(
    run((p) => new SGD([p], { lr: 0.1 }), GRADS),
    sgdReference(W0, GRADS, { lr: 0.1 }),
    TOLERANCE,
  );
});

test("SGD with momentum and weight decay matches PyTorch's update over three steps", () => {
  const options = { lr: 0.05, momentum: 0.9, weightDecay: 0.01 };
  assertClose(
    run((p) => new SGD([p], options), GRADS),
    sgdReference(W0, GRADS, options),
    TOLERANCE,
  );
});

test("SGD with Nesterov momentum matches PyTorch's update over three steps", () => {
  const options = { lr: 0.05, momentum: 0.8, nesterov: true };
  assertClose(
    run((p) => new SGD([p], options), GRADS),
    sgdReference(W0, GRADS, options),
    TOLERANCE,
  );
});

test("AdamW applies bias-corrected Adam steps with decoupled weight decay", () => {
  const options = { lr: 0.01, weightDecay: 0.1, eps: 1e-8 };
  assertClose(
    run((p) => new AdamW([p], options), GRADS),
    lambReference(W0, GRADS, { ...options, adam: true }),
    TOLERANCE,
  );
});

test("LAMB's first step matches the reference", () => {
  const options = { lr: 0.02, weightDecay: 0.01 };
  assertClose(
    run((p) => new LAMB([p], options), GRADS.slice(0, 1)),
    lambReference(W0, GRADS.slice(0, 1), options),
    TOLERANCE,
  );
});

test("LAMB matches the reference over three steps with the MLPerf hyper-parameters", () => {
  const options = { lr: 0.004, b1: 0.9, b2: 0.999, eps: 1e-6, weightDecay: 0.01 };
  assertClose(
    run((p) => new LAMB([p], options), GRADS),
    lambReference(W0, GRADS, options),
    TOLERANCE,
  );
});

test("LAMB without layer adaptation (the reference's biases and LayerNorm) steps as bias-corrected Adam", () => {
  const options = { lr: 0.004, layerAdaptation: false };
  const stepped = run((p) => new LAMB([p], options), GRADS);
  assertClose(stepped, lambReference(W0, GRADS, options), TOLERANCE);
  // and not as with the trust ratio, which scales these steps by ||w|| / ||u||
  const adapted = lambReference(W0, GRADS, { lr: 0.004 });
  assert.ok(Math.abs(stepped[0]! - adapted[0]!) > 1e-3, `${stepped[0]} vs ${adapted[0]}`);
});

test("LAMB uses a trust ratio of 1 for an all-zero weight (a zero-initialised bias)", () => {
  const zeros = W0.map(() => 0);
  const stepped = run((p) => new LAMB([p], { lr: 0.1 }), GRADS.slice(0, 1), zeros);
  // ratio 1: the first Adam step moves each element by lr * sign(g) (eps aside)
  assertClose(stepped, lambReference(zeros, GRADS.slice(0, 1), { lr: 0.1 }), TOLERANCE);
  assertClose(
    stepped,
    GRADS[0]!.map((g) => -0.1 * Math.sign(g)),
    { ...TOLERANCE, rtol: 1e-4 },
  );
});

test("LAMB leaves a weight unchanged, without NaN, when its update is all zero", () => {
  const stepped = run((p) => new LAMB([p], { lr: 0.1 }), [W0.map(() => 0)]);
  assertClose(stepped, W0, TOLERANCE);
});

test("LAMB keeps each tensor's trust ratio separate", () => {
  const [a, b] = [param([3, 4]), param([0.01, -0.02])];
  const opt = new LAMB([a, b], { lr: 0.1 });
  a.grad = new Tensor([1, 1], { dtype: "float32" });
  b.grad = new Tensor([1, -1], { dtype: "float32" });
  opt.step();
  assertClose(a.toArray() as Float32Array, lambReference([3, 4], [[1, 1]], { lr: 0.1 }), TOLERANCE);
  assertClose(b.toArray() as Float32Array, lambReference([0.01, -0.02], [[1, -1]], { lr: 0.1 }), TOLERANCE);
});

test("a learning rate assigned to the lr tensor applies from the next step", () => {
  const p = param(W0);
  const opt = new SGD([p], { lr: 0.1 });
  opt.lr.assign(new Tensor([0.5], { dtype: "float32" })).realize();
  p.grad = new Tensor(GRADS[0]!, { dtype: "float32" });
  opt.step();
  assertClose(p.toArray() as Float32Array, sgdReference(W0, GRADS.slice(0, 1), { lr: 0.5 }), TOLERANCE);
});

test("an OptimizerGroup steps every member with its own settings", () => {
  const [a, b] = [param(W0), param(W0)];
  const group = new OptimizerGroup(
    new LAMB([a], { lr: 0.01, weightDecay: 0.01 }),
    new LAMB([b], { lr: 0.01, weightDecay: 0 }),
  );
  assert.deepEqual(group.params, [a, b]);
  for (const g of GRADS) {
    a.grad = new Tensor(g, { dtype: "float32" });
    b.grad = new Tensor(g, { dtype: "float32" });
    group.step();
  }
  assertClose(a.toArray() as Float32Array, lambReference(W0, GRADS, { lr: 0.01, weightDecay: 0.01 }), TOLERANCE);
  assertClose(b.toArray() as Float32Array, lambReference(W0, GRADS, { lr: 0.01, weightDecay: 0 }), TOLERANCE);
});

test("zeroGrad clears the gradients of every member of a group", () => {
  const [a, b] = [param(W0), param(W0)];
  const group = new OptimizerGroup(new SGD([a]), new SGD([b]));
  a.grad = Tensor.onesLike(a);
  b.grad = Tensor.onesLike(b);
  group.zeroGrad();
  assert.equal(a.grad, null);
  assert.equal(b.grad, null);
});

test("SGD on a real backward pass descends a quadratic", () => {
  const p = param([2, -3]);
  const opt = new SGD([p], { lr: 0.25 });
  for (let i = 0; i < 3; i++) {
    opt.zeroGrad();
    p.square().sum().backward();
    opt.step();
  }
  assertClose(p.toArray() as Float32Array, [2 * 0.5 ** 3, -3 * 0.5 ** 3], TOLERANCE); // w -= 0.25 * 2w halves w each step
});

test("stepping without gradients names the parameter", () => {
  const opt = new SGD([param(W0)]);
  assert.throws(() => opt.step(), /parameter 0 \(\[6\]\) has no gradient/);
});

test("optimizers refuse tensors that do not require grad", () => {
  assert.throws(() => new LAMB([new Tensor([1.5, 2])]), /does not require grad/);
});

test("optimizer state dicts name the learning rate and every moment", () => {
  const [a, b] = [param(W0), param([1, 2])];
  assert.deepEqual(Object.keys(new LAMB([a, b]).stateDict()), ["lr", "b1Power", "b2Power", "m.0", "m.1", "v.0", "v.1"]);
  assert.deepEqual(Object.keys(new SGD([a], { momentum: 0.9 }).stateDict()), ["lr", "momentum.0"]);
  assert.deepEqual(Object.keys(new OptimizerGroup(new SGD([a]), new SGD([b])).stateDict()), ["0.lr", "1.lr"]);
});

test("clipGradNorm scales every gradient by maxNorm / (global norm) when above it, and returns the norm", () => {
  const [a, b] = [param([1, 2]), param([3])];
  a.mul(new Tensor([3, 0]))
    .sum()
    .add(b.mul(4).sum())
    .backward(); // gradients [3, 0] and [4]: norm 5
  const norm = clipGradNorm([a, b], 2.5);
  assertClose(norm.toArray() as Float32Array, [5], TOLERANCE);
  assertClose(a.grad!.toArray() as Float32Array, [1.5, 0], TOLERANCE);
  assertClose(b.grad!.toArray() as Float32Array, [2], TOLERANCE);
  // below the bound nothing changes
  const c = param([1]);
  c.mul(0.5).sum().backward();
  clipGradNorm([c], 1);
  assertClose(c.grad!.toArray() as Float32Array, [0.5], TOLERANCE);
  assert.throws(() => clipGradNorm([param([1])], 1), /clipGradNorm: no parameter has a gradient/);
  assert.throws(() => clipGradNorm([c], 0), /clipGradNorm: maxNorm must be positive, got 0/);
});
