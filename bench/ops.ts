// A small BERT-like encoder block, forward and backward: kernels per step and time per step on each
// device (JS always; CPU where a compiler works). Prints one JSON object.
// Usage: npx tsx bench/ops.ts [--batch 4] [--seq 32] [--hidden 64] [--steps 5]
import { parseArgs } from "node:util";
import { GlobalCounters, Tensor } from "../src/index.ts";
import { testDevices } from "../test/devices.ts";

const { values } = parseArgs({ options: { batch: { type: "string", default: "4" }, seq: { type: "string", default: "32" }, hidden: { type: "string", default: "64" }, steps: { type: "string", default: "5" } } });
const [B, S, H, steps] = [values.batch, values.seq, values.hidden, values.steps].map(Number) as [number, number, number, number];
const heads = 2;

function block(device: string) {
  Tensor.manualSeed(0);
  const p = (shape: number[]) => Tensor.normal(shape, 0, 0.02, { device, requiresGrad: true });
  const params = { qkv: p([3 * H, H]), out: p([H, H]), up: p([4 * H, H]), down: p([H, 4 * H]) };
  Tensor.realizeAll(Object.values(params));
  const input = Tensor.randn([B, S, H], { device }).toArray() as Float32Array;
  return () => {
    // a fresh input buffer each step: the same graph over the same buffers would be found already computed
    const x = new Tensor(input, { device }).reshape([B, S, H]);
    const [q, k, v] = x.linear(params.qkv).reshape([B, S, 3, heads, H / heads]).permute([2, 0, 3, 1, 4]).split(1, 0).map((t) => t.squeeze(0));
    const attn = q!.scaledDotProductAttention(k!, v!).permute([0, 2, 1, 3]).reshape([B, S, H]);
    const h = x.add(attn.linear(params.out)).layerNorm();
    const y = h.add(h.linear(params.up).gelu().linear(params.down)).layerNorm();
    const loss = y.square().mean();
    for (const t of Object.values(params)) t.grad = null;
    loss.backward();
    Tensor.realizeAll([loss, ...Object.values(params).map((t) => t.grad!)]);
  };
}

const results: Record<string, unknown> = { shape: { batch: B, seq: S, hidden: H, heads } };
for (const device of testDevices()) {
  const step = block(device);
  step(); // compile
  const times: number[] = [];
  let kernels = 0;
  for (let i = 0; i < steps; i++) {
    GlobalCounters.reset();
    const start = performance.now();
    step();
    times.push(performance.now() - start);
    kernels = GlobalCounters.kernelCount;
  }
  times.sort((a, b) => a - b);
  results[device] = { kernels_per_step: kernels, median_ms: +times[Math.floor(times.length / 2)]!.toFixed(2), gflop_per_step: +(GlobalCounters.globalOps / 1e9).toFixed(4) };
}
console.log(JSON.stringify(results, null, 2));
