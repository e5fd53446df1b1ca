// An eager loop in its steady state: float32 matmuls on the CPU device, new input tensors every call, the previous
// call's tensors collected by the garbage collector before the next (as a loop that drops them gets), with the host
// memory pool (TSGRAD_HOST_POOL_MB) on and off, alternating in child processes. Prints JSON: medians of wall and
// kernel ms a call, and their ratios pool off / pool on.
// Usage: npx tsx bench/eager_loop.ts [--n 1024] [--reps 12] [--pairs 2]
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { benchArgs } from "./args.ts";
import { GlobalCounters, Tensor } from "../src/index.ts";

const { values } = benchArgs(import.meta.url, {
  n: { type: "string", default: "1024" },
  reps: { type: "string", default: "12" },
  pairs: { type: "string", default: "2" },
  child: { type: "boolean", default: false },
  help: { type: "boolean", default: false },
});
const median = (v: readonly number[]): number => [...v].sort((p, q) => p - q)[v.length >> 1]!;
const [n, reps] = [Number(values.n), Number(values.reps)];

if (values.child) {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error("bench/eager_loop.ts --child needs node --expose-gc");
  const a = Float32Array.from({ length: n * n }, (_, i) => Math.sin(i));
  const walls: number[] = [];
  const kernels: number[] = [];
  for (let rep = 0; rep < reps; rep++) {
    gc();
    await new Promise((resolve) => setTimeout(resolve, 0)); // FinalizationRegistry callbacks run here
    const start = performance.now();
    const x = new Tensor(a, { device: "CPU" }).reshape([n, n]);
    const w = new Tensor(a, { device: "CPU" }).reshape([n, n]);
    GlobalCounters.reset();
    x.matmul(w).realize();
    // the first two calls compile and warm up
    if (rep >= 2) {
      walls.push(performance.now() - start);
      kernels.push(GlobalCounters.timeSumS * 1e3);
    }
  }
  console.log(JSON.stringify({ wall_ms: median(walls), kernel_ms: median(kernels) }));
} else {
  const run = (poolMb: string) => {
    const child = spawnSync(
      process.execPath,
      ["--expose-gc", "--import", "tsx", fileURLToPath(import.meta.url), "--child", "--n", `${n}`, "--reps", `${reps}`],
      { encoding: "utf8", env: { ...process.env, TSGRAD_HOST_POOL_MB: poolMb } },
    );
    if (child.status !== 0) throw new Error(`child failed: ${child.stderr}`);
    return JSON.parse(child.stdout.trim().split("\n").at(-1)!) as { wall_ms: number; kernel_ms: number };
  };
  const on: { wall_ms: number; kernel_ms: number }[] = [];
  const off: { wall_ms: number; kernel_ms: number }[] = [];
  for (let pair = 0; pair < Number(values.pairs); pair++) {
    on.push(run("2048"));
    off.push(run("0"));
  }
  const summary = (runs: typeof on) => ({
    wall_ms: +median(runs.map((r) => r.wall_ms)).toFixed(1),
    kernel_ms: +median(runs.map((r) => r.kernel_ms)).toFixed(1),
    gflops_kernels: +((2 * n ** 3) / median(runs.map((r) => r.kernel_ms)) / 1e6).toFixed(1),
  });
  const [pool, noPool] = [summary(on), summary(off)];
  console.log(
    JSON.stringify(
      {
        bench: "eager_loop",
        n,
        pool,
        no_pool: noPool,
        ratio_off_over_on: {
          wall: +(noPool.wall_ms / pool.wall_ms).toFixed(2),
          kernel: +(noPool.kernel_ms / pool.kernel_ms).toFixed(2),
        },
      },
      null,
      1,
    ),
  );
}
