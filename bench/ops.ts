// A small BERT-like encoder block, forward and backward: kernels per step and time per step on each
// device (JS always; CPU where a compiler works). Prints one JSON object.
// Usage: npx tsx bench/ops.ts [--batch 4] [--seq 32] [--hidden 64] [--steps 5]
import { benchArgs } from "./args.ts";
import { GlobalCounters, Tensor } from "../src/index.ts";
import { jit } from "../src/tensor/index.ts";
import { testDevices } from "../test/devices.ts";

const { values } = benchArgs(import.meta.url, {
  batch: { type: "string", default: "4" },
  seq: { type: "string", default: "32" },
  hidden: { type: "string", default: "64" },
  steps: { type: "string", default: "5" },
});
const [B, S, H, steps] = [values.batch, values.seq, values.hidden, values.steps].map(Number) as [
  number,
  number,
  number,
  number,
];
const heads = 2;

function block(device: string) {
  Tensor.manualSeed(0);
  const p = (shape: number[]) => Tensor.normal(shape, 0, 0.02, { device, requiresGrad: true });
  const params = { qkv: p([3 * H, H]), out: p([H, H]), up: p([4 * H, H]), down: p([H, 4 * H]) };
  Tensor.realizeAll(Object.values(params));
  const input = Tensor.randn([B, S, H], { device }).toArray() as Float32Array;
  const step = (x: Tensor): Tensor[] => {
    const [q, k, v] = x
      .linear(params.qkv)
      .reshape([B, S, 3, heads, H / heads])
      .permute([2, 0, 3, 1, 4])
      .split(1, 0)
      .map((t) => t.squeeze(0));
    const attn = q!.scaledDotProductAttention(k!, v!).permute([0, 2, 1, 3]).reshape([B, S, H]);
    const h = x.add(attn.linear(params.out)).layerNorm();
    const y = h.add(h.linear(params.up).gelu().linear(params.down)).layerNorm();
    const loss = y.square().mean();
    for (const t of Object.values(params)) t.grad = null;
    loss.backward();
    return [loss, ...Object.values(params).map((t) => t.grad!)];
  };
  // a fresh input buffer each step: the same graph over the same buffers would be found already computed
  const freshInput = () => new Tensor(input, { device }).reshape([B, S, H]);
  const jitted = jit(step);
  return {
    plain: () => Tensor.realizeAll(step(freshInput())),
    jit: () => Tensor.realizeAll(jitted(freshInput())),
  };
}

function measure(run: () => void): { kernels_per_step: number; median_ms: number; gflop_per_step: number } {
  for (let i = 0; i < 2; i++) run(); // compile, and capture for the JIT
  const times: number[] = [];
  for (let i = 0; i < steps; i++) {
    GlobalCounters.reset();
    const start = performance.now();
    run();
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  return {
    kernels_per_step: GlobalCounters.kernelCount,
    median_ms: +times[Math.floor(times.length / 2)]!.toFixed(2),
    gflop_per_step: +(GlobalCounters.globalOps / 1e9).toFixed(4),
  };
}

const results: Record<string, unknown> = { shape: { batch: B, seq: S, hidden: H, heads } };
for (const device of testDevices()) {
  const runs = block(device);
  const plain = measure(runs.plain);
  const jitted = measure(runs.jit);
  results[device] = { plain, jit: jitted, jit_speedup: +(plain.median_ms / jitted.median_ms).toFixed(2) };
}
console.log(JSON.stringify(results, null, 2));
