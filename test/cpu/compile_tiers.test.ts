// Tiered compilation (src/runtime/compile_tiers.ts): a large round of missing kernels runs first as quick builds
// while their -O3 builds compile in the background; each kernel, and each graph replaying it, switches to the -O3
// build once it is in the cache, computing the same bits; a later process finds the -O3 build at once.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import { jit } from "../../src/tensor/index.ts";
import { Buffer } from "../../src/device.ts";
import { type CFunction, atLevel, compileStats, findCompiler } from "../../src/runtime/compiler_cache.ts";
import { PROBES, runProbe } from "../../src/runtime/compiler_bugs.ts";
import { QUICK_LEVEL, tierStats, waitForFinalBuilds } from "../../src/runtime/compile_tiers.ts";
import { CpuKernel, captureCpuGraph, compileCpu } from "../../src/runtime/cpu.ts";
import { cpuGraphStats } from "../../src/runtime/cpu_graph.ts";

const skip = Device.isAvailable("CPU") ? false : "no working C compiler";

// a cache folder of its own, and every round tiered however small
const saved = { cache: process.env.TSGRAD_CACHE, tiered: process.env.CPU_TIERED };
let root = "";
before(() => {
  root = mkdtempSync(join(tmpdir(), "tsgrad-tiers-"));
  process.env.TSGRAD_CACHE = join(root, "tiered");
  process.env.CPU_TIERED = "2";
});
after(() => {
  waitForFinalBuilds(60_000);
  for (const [key, value] of [
    ["TSGRAD_CACHE", saved.cache],
    ["CPU_TIERED", saved.tiered],
  ] as const)
    if (value === undefined) delete process.env[key];
    else process.env[key] = value;
  rmSync(root, { recursive: true, force: true });
});

// a loop gcc vectorises at -O3 and not at the quick level, with a library call and a square root in it
const source: CFunction = {
  prelude: "#include <stdint.h>\n#include <math.h>\n",
  code: `void tg_kernel(float* restrict b0, const float* restrict b1, int threads) {
  (void)threads;
  for (int32_t i = 0; i < 4096; i++) b0[i] = expf(b1[i] * 0.01f) * 1.5f + sqrtf(b1[i] * b1[i] + 3.0f) / (b1[i] + 7.0f);
}`,
};

const floats = (n: number): Float32Array => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37) * 40);
const bits = (b: Buffer): number[] => Array.from(new Uint32Array((b.toTypedArray() as Float32Array).buffer));

test("a quick build runs at once and switches, in a graph too, to its -O3 build: same bits, kept in the cache", {
  skip,
}, () => {
  captureCpuGraph(() => {}, { devices: ["CPU"] }); // the graphs' runner built first: the build must not finish before the replay
  const [library] = compileCpu([source], { tiered: true });
  assert.ok(library && !("error" in library));
  const final = library.final;
  assert.ok(final, "a tiered round gives a quick build with its final build under way");
  assert.equal(final.state, "building");
  assert.notEqual(library.path, final.compiled.path);
  assert.ok(existsSync(library.path), "the quick build is in the cache");

  const input = new Buffer("CPU", 4096, dtypes.float32).copyin(floats(4096));
  const output = new Buffer("CPU", 4096, dtypes.float32);
  const kernel = new CpuKernel(library, 2);
  const replay = captureCpuGraph(() => kernel.run([output, input]), { devices: ["CPU"] });
  assert.ok(replay, "the graph builds");
  assert.ok(kernel.upgrading, "recorded while its final build compiles");
  replay();
  const quick = bits(output);

  assert.ok(waitForFinalBuilds(60_000), "the background build finishes");
  assert.equal(final.state, "ready");
  assert.ok(existsSync(final.compiled.path), "the -O3 build is in the cache");
  const switched = cpuGraphStats.switched;
  output.copyin(new Float32Array(4096));
  replay();
  assert.equal(cpuGraphStats.switched, switched + 1, "the replay points the graph at the -O3 build");
  assert.equal(kernel.compiled.path, final.compiled.path);
  assert.ok(!kernel.upgrading);
  assert.deepEqual(bits(output), quick, "the -O3 build computes the same bits");
  kernel.run([output, input]);
  assert.deepEqual(bits(output), quick);

  // the next process finds the -O3 build: nothing compiles, nothing tiers
  const compiled = compileStats.compiled;
  const [again] = compileCpu([source], { tiered: true });
  assert.ok(again && !("error" in again));
  assert.equal(again.path, final.compiled.path);
  assert.equal(again.final, undefined);
  assert.equal(compileStats.compiled, compiled);
});

/**
 * The losses and weights of `steps` steps of a small jitted training step (matmuls, GELU, a log-softmax, in-place
 * updates), waiting for the background builds before step `waitAt`.
 */
function trainSteps(steps: number, waitAt = -1): number[][] {
  Tensor.manualSeed(11);
  const w1 = Tensor.randn([24, 40], { device: "CPU", requiresGrad: true }).realize();
  const w2 = Tensor.randn([40, 10], { device: "CPU", requiresGrad: true }).realize();
  const step = jit((x: Tensor): Tensor => {
    const loss = x.matmul(w1).gelu().matmul(w2).logSoftmax(-1).mean().neg();
    w1.grad = w2.grad = null;
    loss.backward();
    for (const w of [w1, w2]) w.assign(w.sub(w.grad!.mul(0.05)));
    return loss;
  });
  const out: number[][] = [];
  for (let i = 0; i < steps; i++) {
    if (i === waitAt) assert.ok(waitForFinalBuilds(60_000));
    const x = Tensor.arange(0, 48 * 24, 1, { device: "CPU", dtype: dtypes.float32 })
      .reshape([48, 24])
      .mul(0.003 * (i + 1))
      .cos();
    out.push([step(x).item(), ...(w1.toArray() as Float32Array), ...(w2.toArray() as Float32Array)]);
  }
  return out;
}

test("a jitted train step compiled in two tiers computes what one compiled at -O3 at once does, bit for bit", {
  skip,
}, () => {
  const [started, switched] = [tierStats.started, cpuGraphStats.switched];
  const tiered = trainSteps(6, 3);
  assert.ok(tierStats.started > started, "its kernels were tiered");
  assert.ok(cpuGraphStats.switched > switched, "its graph switched to -O3 builds");

  process.env.TSGRAD_CACHE = join(root, "direct");
  process.env.CPU_TIERED = "0";
  try {
    assert.deepEqual(tiered, trainSteps(6));
  } finally {
    process.env.TSGRAD_CACHE = join(root, "tiered");
    process.env.CPU_TIERED = "2";
  }
});

test("the quick level gets the -O3 flags, workarounds included, and gcc's wrong vectorisation does not show there", {
  skip,
}, () => {
  const compiler = findCompiler()!;
  const quick = atLevel(compiler, QUICK_LEVEL);
  assert.deepEqual(
    quick.flags,
    compiler.flags.map((f) => (f === "-O3" ? QUICK_LEVEL : f)),
  );
  assert.notEqual(quick.identity, compiler.identity);
  // the probes built as the quick level builds kernels (the marker as the -O3 probes left it, or empty)
  const codegen = quick.flags.filter((f) => /^-[OmD]/.test(f) || (f.startsWith("-f") && f !== "-fPIC"));
  for (const probe of PROBES)
    for (const flags of [codegen, [...codegen.filter((f) => !f.startsWith("-D")), "-DTG_FRAGILE_LOOPS="]])
      assert.equal(runProbe(compiler.command, flags, probe.source, join(root, "probes")), probe.expected, probe.name);
});
