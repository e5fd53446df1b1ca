// Convolution speed on the default device: a jitted conv2d forward, and forward + backward (input and weight
// gradients), beside numpy doing the same in the same run (windows by sliding_window_view, products by
// tensordot onto OpenBLAS, the input gradient by adding each kernel tap's shifted slice). Medians of --reps
// runs, wall time (each tsgrad call reads its result back). Prints JSON on stdout.
// Usage: npx tsx bench/conv.ts [--reps 10]
import { spawnSync } from "node:child_process";
import { argsWithUsage } from "./args.ts";
import { Device, Tensor, dtypes, jit } from "../src/index.ts";

interface Case {
  readonly name: string;
  readonly batch: number;
  readonly channels: number;
  readonly filters: number;
  readonly size: number;
  readonly kernel: number;
  readonly padding: number;
}

const CASES: readonly Case[] = [
  { name: "3x3 64->64 at 32x32", batch: 8, channels: 64, filters: 64, size: 32, kernel: 3, padding: 1 },
  { name: "3x3 16->32 at 64x64", batch: 8, channels: 16, filters: 32, size: 64, kernel: 3, padding: 1 },
  { name: "5x5 3->32 at 64x64 (a first layer)", batch: 8, channels: 3, filters: 32, size: 64, kernel: 5, padding: 2 },
];

const NUMPY_SCRIPT = `
import json, sys, time
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
cases, reps = json.loads(sys.argv[1]), int(sys.argv[2])
def median(f):
    f(); f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2] * 1e3
out = []
for c in cases:
    rng = np.random.default_rng(0)
    n, ci, co, s, k, p = c["batch"], c["channels"], c["filters"], c["size"], c["kernel"], c["padding"]
    x = rng.standard_normal((n, ci, s, s), dtype=np.float32)
    w = rng.standard_normal((co, ci, k, k), dtype=np.float32)
    def forward():
        xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
        win = sliding_window_view(xp, (k, k), axis=(2, 3))          # [n, ci, oh, ow, k, k]
        return np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
    def step():
        xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
        win = sliding_window_view(xp, (k, k), axis=(2, 3))
        y = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
        g = 2 * y                                                       # d(sum(y^2))/dy
        dw = np.tensordot(g, win, axes=([0, 2, 3], [0, 2, 3]))          # [co, ci, k, k]
        dxp = np.zeros_like(xp)
        oh, ow = y.shape[2], y.shape[3]
        for i in range(k):
            for j in range(k):
                dxp[:, :, i:i + oh, j:j + ow] += np.tensordot(g, w[:, :, i, j], axes=([1], [0])).transpose(0, 3, 1, 2)
        return dw, dxp[:, :, p:p + s, p:p + s]
    out.append({"forward_ms": median(forward), "step_ms": median(step)})
print(json.dumps(out))
`;

function median(f: () => void, reps: number): number {
  f();
  f();
  f();
  const times: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t = performance.now();
    f();
    times.push(performance.now() - t);
  }
  return times.sort((a, b) => a - b)[times.length >> 1]!;
}

const { values } = argsWithUsage("Usage: npx tsx bench/conv.ts [--reps 10]", {
  reps: { type: "string", default: "10" },
});
const reps = Number(values.reps);
if (!(Number.isInteger(reps) && reps >= 1))
  throw new Error(`--reps ${values.reps}: expected a whole number, 1 or more`);

const numpy = spawnSync("python3", ["-c", NUMPY_SCRIPT, JSON.stringify(CASES), String(reps)], {
  encoding: "utf8",
  env: { ...process.env, OPENBLAS_NUM_THREADS: "2" },
});
const reference = numpy.status === 0 ? (JSON.parse(numpy.stdout) as { forward_ms: number; step_ms: number }[]) : null;
if (!reference) console.error(`numpy reference unavailable: ${numpy.stderr.trim().split("\n").pop()}`);

const results = CASES.map((c, i) => {
  console.error(`conv ${c.name}`);
  Tensor.manualSeed(0);
  const x = Tensor.randn([c.batch, c.channels, c.size, c.size], { dtype: dtypes.float32 }).realize();
  const w = Tensor.randn([c.filters, c.channels, c.kernel, c.kernel], {
    dtype: dtypes.float32,
    requiresGrad: true,
  }).realize();
  const xg = x.contiguous().realize();
  xg.requiresGrad = true;
  const forward = jit((x: Tensor) => x.conv2d(w, { padding: c.padding }).realize());
  const step = jit((x: Tensor) => {
    w.grad = null;
    x.grad = null;
    x.conv2d(w, { padding: c.padding }).square().sum().backward();
    Tensor.realizeAll([w.grad!, x.grad!]);
    return w.grad!;
  });
  const forwardMs = median(() => void forward(x).toArray(), reps);
  const stepMs = median(() => void step(xg).toArray(), reps);
  const flop = 2 * c.batch * c.filters * c.size * c.size * c.channels * c.kernel * c.kernel;
  const ref = reference?.[i];
  return {
    case: c.name,
    forward_ms: +forwardMs.toFixed(2),
    forward_gflops: +(flop / forwardMs / 1e6).toFixed(1),
    step_ms: +stepMs.toFixed(2),
    step_gflops: +((3 * flop) / stepMs / 1e6).toFixed(1),
    ...(ref
      ? {
          numpy_forward_ms: +ref.forward_ms.toFixed(2),
          numpy_step_ms: +ref.step_ms.toFixed(2),
          forward_vs_numpy: +(ref.forward_ms / forwardMs).toFixed(2),
          step_vs_numpy: +(ref.step_ms / stepMs).toFixed(2),
        }
      : {}),
  };
});
console.log(
  JSON.stringify(
    { device: Device.DEFAULT, reps, note: "vs_numpy: numpy's time / tsgrad's (above 1: tsgrad faster)", results },
    null,
    1,
  ),
);
