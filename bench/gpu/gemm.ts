// float16 GEMM throughput of tsgrad's CUDA kernels: C = A @ B for each shape, the matmul kernel timed
// alone with CUDA events (best of --runs launches). Prints one JSON object.
// Usage: node gemm.mjs [--shapes 4096x4096x4096,16384x1024x4096] [--runs 20] [--device CUDA]
import { parseArgs } from "node:util";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import { execObservers } from "../../src/engine/realize.ts";
import type { ExecItem } from "../../src/engine/schedule.ts";

const BERT_SHAPES = "16384x1024x1024,16384x4096x1024,16384x1024x4096,4096x4096x4096,8192x8192x8192";
const { values } = parseArgs({ options: { shapes: { type: "string", default: BERT_SHAPES }, runs: { type: "string", default: "20" }, device: { type: "string", default: "CUDA" }, help: { type: "boolean" } } });
if (values.help) {
  console.log("Usage: gemm [--shapes MxNxK,...] [--runs N] [--device CUDA]   (float16 A[M,K] @ B[K,N], float32 accumulation)");
  process.exit(0);
}

/** The last kernel `build` runs, with its buffers, so that it can be launched again on its own. */
function lastKernel(build: () => Tensor): ExecItem & { kind: "kernel" } {
  let last: (ExecItem & { kind: "kernel" }) | undefined;
  const observe = (item: ExecItem) => { if (item.kind === "kernel") last = item; };
  execObservers.add(observe);
  try {
    build().realize();
  } finally {
    execObservers.delete(observe);
  }
  if (!last) throw new Error("no kernel ran");
  return last;
}

const results = values.shapes.split(",").map((shape) => {
  const [m, n, k] = shape.split("x").map(Number) as [number, number, number];
  const a = Tensor.rand([m, k], { device: values.device }).cast(dtypes.float16).realize();
  const b = Tensor.rand([k, n], { device: values.device }).cast(dtypes.float16).realize();
  const item = lastKernel(() => a.matmul(b));
  const program = Device.backend(values.device).compile(item.kernel);
  let best = Infinity;
  for (let run = 0; run < Number(values.runs); run++) best = Math.min(best, program.run(item.buffers, { wait: true }) ?? Infinity);
  const tflops = (2 * m * n * k) / best / 1e12;
  console.error(`gemm ${shape}: ${(best * 1e3).toFixed(3)} ms, ${tflops.toFixed(1)} TFLOP/s (${item.kernel.name})`);
  return { shape, m, n, k, ms: +(best * 1e3).toFixed(4), tflops: +tflops.toFixed(2), kernel: item.kernel.name };
});
console.log(JSON.stringify({ device: values.device, dtype: "float16", gemm: results }));
