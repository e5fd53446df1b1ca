import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, GlobalCounters, Tensor, TsgradError, type UOp } from "../../src/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { allReduce, allReduceMany, jit } from "../../src/tensor/index.ts";
import { assertClose } from "../close.ts";
import { values } from "./harness.ts";

const devs = (n: number): string[] => Array.from({ length: n }, (_, i) => `JS:${i}`);
const data = (n: number, seed = 1): number[] => Array.from({ length: n }, (_, i) => Math.sin(i * 0.7 + seed));

test("shard splits the batch axis and reading gathers it back", () => {
  const t = new Tensor(data(12), { device: "JS" }).reshape([6, 2]);
  const s = t.shard(devs(3), 0);
  assert.deepEqual(s.devices, ["JS", "JS:1", "JS:2"]);
  assert.deepEqual(s.shape, [6, 2]);
  assert.deepEqual(s.tolist(), t.tolist());
});

test("to(devices) replicates", () => {
  const r = new Tensor([1, 2, 3], { device: "JS" }).to(devs(2));
  assert.deepEqual(r.devices, ["JS", "JS:1"]);
  assert.deepEqual(r.mul(2).tolist(), [2, 4, 6]);
});

test("ops on a sharded and a replicated tensor run per device", () => {
  const x = new Tensor(data(8), { device: "JS" }).reshape([4, 2]);
  const w = new Tensor(
    [
      [1, 2],
      [3, 4],
    ],
    { device: "JS", dtype: "float32" },
  );
  const expected = values(x.matmul(w).relu());
  assertClose(
    values(
      x
        .shard(devs(2))
        .matmul(w.to(devs(2)))
        .relu(),
    ),
    expected,
  );
});

test("a reduction over the sharded axis all-reduces; over another axis it stays sharded", () => {
  const x = new Tensor(data(24), { device: "JS" }).reshape([6, 4]);
  const s = x.shard(devs(3));
  assertClose(values(s.sum({ axis: 0 })), values(x.sum({ axis: 0 })));
  assertClose([s.mean().item()], [x.mean().item()]);
  const rows = s.max({ axis: 1 });
  assert.equal((rows.node as { axis: number | null }).axis, 0);
  assertClose(values(rows), values(x.max({ axis: 1 })));
});

test("a ring all-reduce sums exactly, for sizes that do not split evenly", () => {
  for (const n of [2, 3, 4]) {
    for (const size of [1, 5, 17]) {
      const parts = devs(n).map((d, i) => new Tensor(data(size, i), { device: d, dtype: "float32" }).node as UOp);
      const sums = allReduce("ADD", parts);
      const expected = data(size, 0).map((_, j) => devs(n).reduce((s, _, i) => s + Math.fround(data(size, i)[j]!), 0));
      for (const u of sums) assertClose(values(new Tensor(u)), expected, { atol: 1e-5 });
    }
  }
});

test("unit axes added in front of the sharded axis keep it sharded (unsqueeze, einsum's alignment)", () => {
  const x = new Tensor(data(12), { device: "JS" }).reshape([4, 3]);
  const s = x.shard(devs(2));
  const lifted = s.unsqueeze(0).reshape([1, 1, 4, 3]);
  assert.equal((lifted.node as { axis: number | null }).axis, 2);
  assertClose(values(lifted.mul(2).sum({ axis: [0, 1] })), values(x.mul(2)));
  assertClose(
    values(Tensor.einsum("ij,j->i", s, new Tensor([1, 2, 3], { device: "JS", dtype: "float32" }).to(devs(2)))),
    values(x.matmul(new Tensor([1, 2, 3], { device: "JS", dtype: "float32" }))),
  );
});

test("an uneven batch split is rejected naming the batch and the device count", () => {
  assert.throws(
    () => Tensor.zeros([5, 2], { device: "JS" }).shard(devs(2)),
    (e: unknown) =>
      e instanceof TsgradError && e.message.includes("5 is not a multiple of 2") && e.message.includes("[5, 2]"),
  );
});

test("mixing tensors on mismatched device sets is a clear error", () => {
  const a = Tensor.zeros([4], { device: "JS" }).shard(devs(2));
  const b = Tensor.zeros([4], { device: "JS" }).shard(["JS", "JS:2"]);
  assert.throws(
    () => a.add(b),
    (e: unknown) => e instanceof TsgradError && e.message.includes("JS,JS:1") && e.message.includes("JS,JS:2"),
  );
  assert.throws(
    () => a.add(Tensor.zeros([4], { device: "JS:3" })),
    (e: unknown) => e instanceof TsgradError && e.message.includes("JS,JS:1") && e.message.includes("JS:3"),
  );
});

/** A small MLP regression trained with SGD; the batch sharded over `devices`, weights replicated. */
function train(devices: string[], steps: number, useJit: boolean): { losses: number[]; weights: number[][] } {
  Tensor.manualSeed(0);
  const device = devices.length === 1 ? devices[0]! : devices.join(",");
  const w1 = Tensor.normal([3, 8], 0, 0.5, { device, requiresGrad: true });
  const w2 = Tensor.normal([8, 1], 0, 0.5, { device, requiresGrad: true });
  Tensor.realizeAll([w1, w2]);
  const step = (x: Tensor, y: Tensor): Tensor => {
    const loss = x.matmul(w1).tanh().matmul(w2).sub(y).square().mean();
    w1.grad = w2.grad = null;
    loss.backward();
    for (const w of [w1, w2]) w.assign(w.sub(w.grad!.mul(0.1)));
    return loss;
  };
  const run = useJit ? jit(step) : step;
  const losses: number[] = [];
  for (let i = 0; i < steps; i++) {
    let x = new Tensor(data(36, i), { device: "JS", dtype: "float32" }).reshape([12, 3]);
    let y = new Tensor(data(12, i + 100), { device: "JS", dtype: "float32" }).reshape([12, 1]);
    if (devices.length > 1) [x, y] = [x.shard(devices), y.shard(devices)];
    else [x, y] = [x.to(devices[0]!), y.to(devices[0]!)];
    const loss = run(x, y);
    Tensor.realizeAll([loss, w1, w2]);
    losses.push(loss.item());
  }
  return { losses, weights: [values(w1), values(w2)] };
}

test("data-parallel training on 2 and 3 devices matches one device, step for step", () => {
  const one = train(["JS"], 4, false);
  for (const n of [2, 3]) {
    const many = train(devs(n), 4, false);
    assertClose(many.losses, one.losses, { atol: 1e-6, what: `losses on ${n} devices` });
    many.weights.forEach((w, i) =>
      assertClose(w, one.weights[i]!, { atol: 1e-6, what: `weights ${i} on ${n} devices` }),
    );
  }
});

test("a jitted data-parallel step replays on every device", () => {
  const one = train(["JS"], 5, false);
  const many = train(devs(2), 5, true);
  assertClose(many.losses, one.losses, { atol: 1e-6, what: "losses" });
  many.weights.forEach((w, i) => assertClose(w, one.weights[i]!, { atol: 1e-6, what: `weights ${i}` }));
});

test("replicated weights stay identical on every device", () => {
  train(devs(3), 2, false);
  const w = Tensor.normal([2, 2], 0, 1, { device: devs(3).join(",") }).realize();
  const copies = (w.node as unknown as { shards: UOp[] }).shards.map((u) => values(new Tensor(u)));
  for (const c of copies.slice(1)) assert.deepEqual(c, copies[0]);
});

test("a random draw over several devices copies nothing: the others key it by mirrors of the first device's counter, advanced with it", () => {
  Tensor.manualSeed(9);
  const devices = devs(3);
  Tensor.rand([3], { device: devices[0] }).realize(); // the first device's stream is in use before the mirrors exist
  const draws: number[][] = [];
  for (let step = 0; step < 3; step++) {
    // as a jitted step: the draw, then the counters advanced past it
    const { result, items } = recordItems(() => {
      const r = Tensor.rand([4, 5], { device: devices.join(",") });
      Tensor.realizeAll([r, ...Tensor.rngState()]);
      return r;
    });
    assert.equal(items.filter((item) => item.kind === "copy").length, 0, `step ${step}: copies between devices`);
    const replicas = (result.node as unknown as { shards: UOp[] }).shards.map((u) => values(new Tensor(u)));
    for (const r of replicas.slice(1)) assert.deepEqual(r, replicas[0], `step ${step}: replicas differ`);
    draws.push(replicas[0]!);
  }
  assert.notDeepEqual(draws[1], draws[0]);
  assert.notDeepEqual(draws[2], draws[1]);
  // the same numbers as draws on the first device alone
  Tensor.manualSeed(9);
  Tensor.rand([3], { device: devices[0] }).realize();
  for (let step = 0; step < 3; step++) {
    const r = Tensor.rand([4, 5], { device: devices[0] });
    Tensor.realizeAll([r, ...Tensor.rngState()]);
    assert.deepEqual(values(r), draws[step], `step ${step}: not the first device's numbers`);
  }
});

/**
 * The gradients of a replicated weight [inner, outer] and bias from a batch sharded over `n` devices: ops counted,
 * items recorded.
 */
function gradientWork(n: number, inner = 16, outer = 16) {
  Tensor.manualSeed(1);
  const x = Tensor.randn([8, 4, inner], { device: "JS" }).realize();
  const w = Tensor.randn([inner, outer], { device: "JS", requiresGrad: true }).realize();
  const b = Tensor.randn([outer], { device: "JS", requiresGrad: true }).realize();
  const xs = n > 1 ? x.shard(devs(n), 0) : x;
  if (n > 1) for (const p of [w, b]) p.node = p.to(devs(n)).realize().node;
  xs.matmul(w).add(b).square().sum().backward();
  GlobalCounters.reset();
  const { items } = recordItems(() => Tensor.realizeAll([w.grad!, b.grad!]));
  return { ops: GlobalCounters.globalOps, items, grads: [values(w.grad!), values(b.grad!)] };
}

test("data parallelism does no redundant work: weight and bias gradients on 2 devices cost one device's operations", () => {
  const one = gradientWork(1);
  const two = gradientWork(2);
  two.grads.forEach((g, i) => assertClose(g, one.grads[i]!, { atol: 1e-4, what: `gradient ${i}` }));
  // a replicated operand broadcast over the batch (the bias) met the sharded batch as a slice of the full-size
  // broadcast: its gradient was a padded full batch on every device (120080 operations here instead of 36352)
  assert.ok(two.ops <= one.ops * 1.05, `2 devices: ${two.ops} operations, 1 device: ${one.ops}`);
});

test("replicated gradients are all-reduced together, each device's partial stored whole: the ring's kernels only add", () => {
  // a weight of 160 x 512 floats and its bias: one bucket of 82432 floats, big enough for the ring
  const { items, grads } = gradientWork(2, 160, 512);
  const one = gradientWork(1, 160, 512);
  grads.forEach((g, i) => assertClose(g, one.grads[i]!, { atol: 1e-3, what: `gradient ${i}` }));
  const half = (160 * 512 + 512) / 2;
  // the ring moves halves of the bucket: one copy each way to reduce, one each way to gather (not a ring per tensor)
  const copies = items.filter((item) => item.kind === "copy" && item.src.nbytes === half * 4);
  assert.equal(
    copies.length,
    4,
    `copies: ${items.flatMap((item) => (item.kind === "copy" ? [item.src.nbytes] : [])).join(", ")}`,
  );
  // a half's kernel that did more than an addition an element computed its slice of a partial gradient (a matmul
  // cut through a flat view, lowered as plain loops: 10240 operations for 128 values before)
  const halves = items.flatMap((item) =>
    item.kind === "kernel" && item.kernel.outputShape.reduce((a, b) => a * b, 1) === half ? [item.kernel] : [],
  );
  assert.ok(halves.length >= 2, `the ring's kernels: ${halves.map((k) => k.name).join(", ")}`);
  for (const k of halves) assert.ok(k.flops <= half, `${k.name}: ${k.flops} operations`);
});

test("a sharded batch's dropout draws only each device's slice of the one logical mask", () => {
  const drop = (devices: string[] | null): { values: number[]; ops: number } => {
    Tensor.manualSeed(5);
    Tensor.training = true;
    try {
      let x = new Tensor(data(6 * 7 * 5), { device: "JS", dtype: "float32" }).reshape([6, 7, 5]);
      if (devices) x = x.shard(devices, 0);
      x.realize();
      const out = x.dropout(0.3);
      GlobalCounters.reset();
      out.realize();
      return { values: values(out), ops: GlobalCounters.globalOps };
    } finally {
      Tensor.training = false;
    }
  };
  const one = drop(null);
  for (const n of [2, 3]) {
    const many = drop(devs(n));
    assert.deepEqual(many.values, one.values, `${n} devices: the mask of one device`);
    // each device runs Threefry for its own rows only: the same operations as one device, not n times them
    assert.ok(many.ops <= one.ops * 1.1, `${n} devices: ${many.ops} operations, one device: ${one.ops}`);
  }
});

test("allReduceMany sums each tensor over its own devices: buckets never mix dtypes or device lists", () => {
  const shard = (device: string, n: number, seed: number, dtype: "float32" | "int32" = "float32") =>
    new Tensor(
      data(n, seed).map((v) => (dtype === "int32" ? Math.round(v * 10) : v)),
      { device, dtype },
    ).realize().node as UOp;
  const sets = [devs(2), ["JS:2", "JS:3"], devs(2)];
  const tensors = [
    sets[0]!.map((d, i) => shard(d, 6, i)),
    sets[1]!.map((d, i) => shard(d, 6, 10 + i)),
    sets[2]!.map((d, i) => shard(d, 5, 20 + i, "int32")),
  ];
  const reduced = allReduceMany("ADD", tensors);
  reduced.forEach((shards, t) => {
    const want = tensors[t]!.map((u) => values(new Tensor(u))).reduce((acc, v) => acc.map((x, i) => x + v[i]!));
    shards.forEach((u, d) => {
      assert.equal(u.device, Device.canonicalize(sets[t]![d]!), `tensor ${t} shard ${d}'s device`);
      assertClose(values(new Tensor(u)), want, { atol: 1e-6, what: `tensor ${t} on ${u.device}` });
    });
  });
});

test("replicated parameters own their buffers: the first update writes in place like every later one", async () => {
  const { replicateParameters } = await import("../../src/nn/parallel.ts");
  const model = { w: Tensor.randn([4, 4], { device: "JS" }).realize() };
  replicateParameters(model, devs(2));
  const update = (): number => {
    GlobalCounters.reset();
    model.w.assign(model.w.mul(0.5)).realize();
    return GlobalCounters.kernelCount;
  };
  // a buffer still shared with the tensor it was replicated from made the first assign copy every replica first
  assert.equal(update(), update());
});
