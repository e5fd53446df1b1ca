// float16 GEMM throughput of tsgrad's CUDA kernels: C = A @ B for each shape, the matmul kernel timed alone with CUDA
// events (best of --runs launches). First, the tensor-core kernels' results against the JS device on small odd shapes
// (partial tiles, transposed and computed factors, bfloat16, batches): the op suite runs float32 only, so this is where
// tensor-core correctness is checked. With --tiles, each shape is timed again at every tile BEAM may choose (block and
// warp shapes, pipeline depths; on an H100/H200 the wgmma tiles too). `--checks-only` runs the checks alone (gpu-check
// runs them so under TC_TILE for wgmma tiles). Prints one JSON object. Usage: node gemm.mjs [--shapes
// 4096x4096x4096,16384x1024x4096] [--runs 20] [--device CUDA] [--tiles] [--no-checks | --checks-only]
import { argsWithUsage } from "../args.ts";
import { Tensor, dtypes } from "../../src/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { f16BitsToF32 } from "../../src/dtype.ts";
import type { ExecItem } from "../../src/engine/schedule.ts";
import { cudaDevice } from "../../src/runtime/cuda.ts";
import { deviceTile, timeTiles } from "../../src/engine/cuda_programs.ts";
import { backendOf } from "../../src/engine/backend.ts";
import { cudaForm } from "../../src/codegen/cuda_forms.ts";
import { tileCandidates, tileName } from "../../src/renderer/cuda_matmul.ts";

const BERT_SHAPES = "16384x1024x1024,16384x4096x1024,16384x1024x4096,4096x4096x4096,8192x8192x8192";
const { values } = argsWithUsage(
  "Usage: gemm [--shapes MxNxK,...] [--runs N] [--device CUDA] [--no-checks | --checks-only]   (float16 A[M,K] @ B[K,N], float32 accumulation;\n" +
    "TC_STAGES=2..8 sets the tensor-core pipeline's depth, else the GPU's shared memory does; TC_TILE the tile (e.g. 128x256x32:2x4, 128x128x64:wgmma);\n" +
    "--tiles times each shape at every tile BEAM may choose)",
  {
    shapes: { type: "string", default: BERT_SHAPES },
    runs: { type: "string", default: "20" },
    device: { type: "string", default: "CUDA" },
    "no-checks": { type: "boolean" },
    "checks-only": { type: "boolean" },
    tiles: { type: "boolean" },
  },
);

/** The last kernel `build` runs, with its buffers, so that it can be launched again on its own. */
function lastKernel(build: () => Tensor): ExecItem & { kind: "kernel" } {
  const last = recordItems(() => build().realize())
    .items.filter((item) => item.kind === "kernel")
    .at(-1);
  if (!last) throw new Error("no kernel ran");
  return last as ExecItem & { kind: "kernel" };
}

/** Largest |cuda - js| / (1 + |js|) over the elements of `build`'s result on both devices (same inputs). */
function maxError(shapes: number[][], dtype: typeof dtypes.float16, build: (...xs: Tensor[]) => Tensor): number {
  const inputs = shapes.map((shape) => Tensor.rand(shape, { device: "JS" }).sub(0.5).cast(dtype).realize());
  const on = (device: string) =>
    Array.from(
      build(...inputs.map((t) => t.to(device)))
        .cast(dtypes.float32)
        .toArray() as Float32Array,
    );
  const [gpu, js] = [on(values.device), on("JS")];
  return gpu.reduce((worst, g, i) => Math.max(worst, Math.abs(g - js[i]!) / (1 + Math.abs(js[i]!))), 0);
}

const checks: Record<string, number> = values["no-checks"]
  ? {}
  : {
      plain_odd_sizes: maxError(
        [
          [257, 200],
          [200, 385],
        ],
        dtypes.float16,
        (a, b) => a.matmul(b),
      ),
      transposed_factor: maxError(
        [
          [200, 257],
          [200, 385],
        ],
        dtypes.float16,
        (a, b) => a.T.matmul(b),
      ),
      transposed_aligned: maxError(
        [
          [200, 256],
          [200, 384],
        ],
        dtypes.float16,
        (a, b) => a.T.matmul(b),
      ),
      computed_factor_and_epilogue: maxError([[3, 130, 64], [64]], dtypes.float16, (x, bias) => {
        const q = x.add(bias);
        return q.matmul(q.transpose(-1, -2)).gelu();
      }),
      bfloat16_batched: maxError(
        [
          [4, 136, 72],
          [4, 72, 144],
        ],
        dtypes.bfloat16,
        (a, b) => a.matmul(b),
      ),
      both_along_k: maxError(
        [
          [136, 200],
          [264, 200],
        ],
        dtypes.float16,
        (a, b) => a.matmul(b.T),
      ),
      split_k_weight_gradient: maxError(
        [
          [1000, 136],
          [1000, 200],
        ],
        dtypes.float16,
        (a, b) => a.T.matmul(b),
      ),
    };
for (const [name, error] of Object.entries(checks))
  console.error(`check ${name}: max relative error ${error.toExponential(2)}`);

const results = values["checks-only"]
  ? []
  : values.shapes.split(",").map((shape) => {
      const [m, n, k] = shape.split("x").map(Number) as [number, number, number];
      const a = Tensor.rand([m, k], { device: values.device }).cast(dtypes.float16).realize();
      const b = Tensor.rand([k, n], { device: values.device }).cast(dtypes.float16).realize();
      const item = lastKernel(() => a.matmul(b));
      const program = backendOf(values.device).compile(item.kernel);
      let best = Infinity;
      for (let run = 0; run < Number(values.runs); run++)
        best = Math.min(best, program.run(item.buffers, { wait: true }) ?? Infinity);
      const tflops = (2 * m * n * k) / best / 1e12;
      console.error(`gemm ${shape}: ${(best * 1e3).toFixed(3)} ms, ${tflops.toFixed(1)} TFLOP/s (${item.kernel.name})`);
      return {
        shape,
        m,
        n,
        k,
        ms: +(best * 1e3).toFixed(4),
        tflops: +tflops.toFixed(2),
        kernel: item.kernel.name,
        ...(values.tiles ? byTile(item, 2 * m * n * k) : {}),
      };
    });

/**
 * TFLOP/s of the kernel at each tile BEAM may choose (best of three launches each, on the GEMM's own
 * buffers; null where one failed), and how far each tile's output is from the default tile's (the largest
 * |difference| / (1 + |value|) over a million evenly spaced outputs: summation order only, so about
 * float16 rounding at most).
 */
function byTile(
  item: ExecItem & { kind: "kernel" },
  flops: number,
): { tflops_by_tile?: Record<string, number | null>; difference_by_tile?: Record<string, number | null> } {
  const form = cudaForm(item.kernel);
  if (form.kind !== "tensorCores") return {};
  const device = cudaDevice(Number(values.device.split(":")[1] ?? 0));
  // a strided sample: a whole 16384 x 4096 output is 67M values to convert each time
  const output = (): Float32Array => {
    const bits = item.buffers[0]!.toTypedArray() as Uint16Array;
    const stride = Math.max(1, Math.floor(bits.length / 2 ** 20));
    return Float32Array.from({ length: Math.floor(bits.length / stride) }, (_, i) => f16BitsToF32(bits[i * stride]!));
  };
  const reference = output();
  const tflops: Record<string, number | null> = {},
    difference: Record<string, number | null> = {};
  for (const tile of tileCandidates(device.sharedPerMultiprocessor, form.pattern, device.arch)) {
    const [seconds] = timeTiles(device, item.kernel, form.pattern, [tile], item.buffers);
    const ok = Number.isFinite(seconds!);
    tflops[tileName(tile)] = ok ? +(flops / seconds! / 1e12).toFixed(2) : null;
    difference[tileName(tile)] = ok
      ? +output()
          .reduce((worst, x, i) => Math.max(worst, Math.abs(x - reference[i]!) / (1 + Math.abs(reference[i]!))), 0)
          .toExponential(2)
      : null;
    // each as it comes: a run cut short by its time limit still reports the tiles it timed
    console.error(`  ${tileName(tile)}: ${tflops[tileName(tile)]} TFLOP/s, difference ${difference[tileName(tile)]}`);
  }
  console.error(
    `  by tile: ${JSON.stringify(tflops)}\n  difference from the default tile: ${JSON.stringify(difference)}`,
  );
  return { tflops_by_tile: tflops, difference_by_tile: difference };
}
// 16-bit outputs round at 2^-11 (float16) or 2^-8 (bfloat16) relative; summation order differs
const checksPass = Object.entries(checks).every(
  ([name, error]) => error <= (name.startsWith("bfloat16") ? 2e-2 : 4e-3),
);
const tcTile = values.device.startsWith("CUDA")
  ? deviceTile(cudaDevice(Number(values.device.split(":")[1] ?? 0)))
  : null;
console.log(
  JSON.stringify({
    device: values.device,
    dtype: "float16",
    tc_stages: tcTile?.stages ?? null,
    tc_tile: tcTile && tileName(tcTile),
    checks,
    checks_pass: values["no-checks"] ? null : checksPass,
    gemm: results,
  }),
);
