// CPU graphs: a jitted function's replays on the CPU device run as one native call over a table of kernel
// calls (src/runtime/cpu_graph.ts), computing what kernel-by-kernel replays compute.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, GlobalCounters, Tensor, dtypes } from "../../src/index.ts";
import { jit } from "../../src/tensor/index.ts";
import { storedBuffer } from "../../src/engine/schedule.ts";
import { cpuGraphStats } from "../../src/runtime/cpu_graph.ts";

const hasCpu = Device.isAvailable("CPU");

function withEnv<T>(key: string, value: string, fn: () => T): T {
  const old = process.env[key];
  process.env[key] = value;
  try {
    return fn();
  } finally {
    if (old === undefined) delete process.env[key];
    else process.env[key] = old;
  }
}

/**
 * A small training step (matmul, GELU, softmax cross-entropy-like sum, in-place updates): many kernels, one aliased.
 */
function makeStep(seed: number) {
  Tensor.manualSeed(seed);
  const w1 = Tensor.randn([16, 32], { device: "CPU", requiresGrad: true }).realize();
  const w2 = Tensor.randn([32, 8], { device: "CPU", requiresGrad: true }).realize();
  const step = (x: Tensor): Tensor => {
    const loss = x.matmul(w1).gelu().matmul(w2).logSoftmax(-1).mean().neg();
    w1.grad = w2.grad = null;
    loss.backward();
    for (const w of [w1, w2]) w.assign(w.sub(w.grad!.mul(0.05)));
    return loss;
  };
  return { step, params: [w1, w2] };
}

const input = (i: number): Tensor =>
  Tensor.arange(0, 64 * 16, 1, { device: "CPU", dtype: dtypes.float32 })
    .reshape([64, 16])
    .mul(0.001 * (i + 1))
    .sin();

test("a jitted step replays as one CPU graph, bit for bit what kernel-by-kernel replays compute", {
  skip: !hasCpu,
}, () => {
  const graphed = makeStep(3);
  const plain = makeStep(3);
  const graphedStep = jit(graphed.step);
  const plainStep = jit(plain.step);
  const before = { ...cpuGraphStats };
  for (let i = 0; i < 5; i++) {
    GlobalCounters.reset();
    const a = graphedStep(input(i)).item();
    const { kernelCount, timeSumS } = GlobalCounters;
    const b = withEnv("CPU_GRAPH", "0", () => plainStep(input(i)).item());
    assert.equal(a, b, `loss at step ${i}`);
    graphed.params.forEach((p, n) =>
      assert.deepEqual(p.tolist(), plain.params[n]!.tolist(), `param ${n} after step ${i}`),
    );
    // replays count their kernels and time as before (the graph's time is the kernels' time)
    if (i >= 2) {
      assert.ok(kernelCount > 5, `kernels counted: ${kernelCount}`);
      assert.ok(timeSumS > 0, "a graph's replay adds its seconds");
    }
  }
  // calls 3, 4 and 5 replay; the graph is built once
  assert.equal(cpuGraphStats.built - before.built, 1);
  assert.equal(cpuGraphStats.replays - before.replays, 3);
});

test("CPU_GRAPH=0 replays kernel by kernel", { skip: !hasCpu }, () => {
  const { step } = makeStep(5);
  const jitted = jit(step);
  const before = cpuGraphStats.replays;
  withEnv("CPU_GRAPH", "0", () => {
    for (let i = 0; i < 4; i++) jitted(input(i)).item();
  });
  assert.equal(cpuGraphStats.replays, before);
});

test("a buffer given back and allocated again between replays is seen: the graph writes the new memory", {
  skip: !hasCpu,
}, () => {
  const w = Tensor.randn([8, 8], { device: "CPU" }).realize();
  const f = jit((x: Tensor) => x.matmul(w).relu().add(1));
  const x = (i: number) => Tensor.full([4, 8], i, { device: "CPU", dtype: dtypes.float32 });
  for (let i = 0; i < 3; i++) f(x(i)).tolist();
  const out = f(x(3));
  const expected = x(4).matmul(w).relu().add(1).tolist();
  // the output's memory goes back; the next replay must not write into what the graph saw before
  storedBuffer(out.node as never)!.release();
  const replays = cpuGraphStats.replays;
  assert.deepEqual(f(x(4)).tolist(), expected);
  assert.equal(cpuGraphStats.replays, replays + 1, "the graph ran");
});

test("a data-parallel step over virtual CPU devices replays as one graph, copies included, bit for bit", {
  skip: !hasCpu,
}, () => {
  const devices = ["CPU:1", "CPU:2"];
  const makeShardedStep = () => {
    Tensor.manualSeed(11);
    const w = Tensor.randn([16, 4], { device: devices.join(","), requiresGrad: true }).realize();
    return {
      w,
      step: jit((x: Tensor): Tensor => {
        const loss = x.matmul(w).tanh().square().mean();
        w.grad = null;
        loss.backward();
        w.assign(w.sub(w.grad!.mul(0.1)));
        return loss;
      }),
    };
  };
  const graphed = makeShardedStep();
  const plain = makeShardedStep();
  const before = { ...cpuGraphStats };
  for (let i = 0; i < 5; i++) {
    const x = input(i).shard(devices, 0);
    const a = graphed.step(x).item();
    const b = withEnv("CPU_GRAPH", "0", () => plain.step(input(i).shard(devices, 0)).item());
    assert.equal(a, b, `loss at step ${i}`);
    assert.deepEqual(graphed.w.tolist(), plain.w.tolist(), `weights after step ${i}`);
  }
  assert.equal(cpuGraphStats.built - before.built, 1);
  assert.equal(cpuGraphStats.replays - before.replays, 3);
});

test("a CPU graph reads each call's inputs where they are: no copy into buffers of its own", { skip: !hasCpu }, () => {
  const f = jit((x: Tensor) => x.add(1));
  const x = (i: number) => Tensor.full([1024], i, { device: "CPU", dtype: dtypes.float32 }).realize();
  for (let i = 0; i < 3; i++) f(x(i)).tolist();
  const input = x(7);
  const replays = cpuGraphStats.replays;
  GlobalCounters.reset();
  const out = f(input);
  // the kernel reads 4 KB and writes 4 KB; a copy of the input into the graph's own buffer would add 4 KB
  assert.equal(GlobalCounters.globalMem, 2 * 1024 * 4);
  assert.equal(cpuGraphStats.replays, replays + 1);
  assert.deepEqual(out.tolist(), Array(1024).fill(8));
});
