// All-reduce over virtual devices, with the ring schedule of src/tensor/multi.ts, jitted, for 2..6 devices:
// algorithm bandwidth (bytes per device / total time) and the time per device (virtual devices run
// one after another on one host, so the total grows with n while the per-device share should not).
// BERT-large's gradient is 335M floats (1.34 GB per device); the default is a slice of it to fit a
// shared machine: --numel 335000000 measures the full size.
// Usage: npx tsx bench/allreduce.ts [--numel 16777216] [--device CPU] [--repeats 3]
import { benchArgs } from "./args.ts";
import { Device, Tensor } from "../src/index.ts";
import { jit } from "../src/tensor/index.ts";

const { values } = benchArgs(import.meta.url, {
  numel: { type: "string", default: String(16 * 1024 * 1024) },
  device: { type: "string" },
  repeats: { type: "string", default: "3" },
});
const numel = Number(values.numel);
const kind = values.device ?? Device.DEFAULT.split(":")[0]!;
const repeats = Number(values.repeats);

const results: Record<string, unknown>[] = [];
for (let n = 2; n <= 6; n++) {
  const devices = Array.from({ length: n }, (_, i) => `${kind}:${i}`);
  // one different gradient per device: a sharded tensor of n blocks, summed over the sharded axis
  const grads = Tensor.rand([n, numel], { device: devices[0] }).shard(devices, 0).realize();
  const reduce = jit((g: Tensor) => g.sum({ axis: 0 }));
  for (let i = 0; i < 2; i++) reduce(grads).realize(); // compile and capture
  const times: number[] = [];
  for (let i = 0; i < repeats; i++) {
    const start = performance.now();
    reduce(grads).realize();
    times.push((performance.now() - start) / 1000);
  }
  times.sort((a, b) => a - b);
  const seconds = times[Math.floor(times.length / 2)]!;
  // virtual devices share one host and run one after another: the time per device is what a real
  // device set (running side by side) would each spend, and it is what the ring keeps flat as n grows
  results.push({
    devices: n,
    numel,
    bytes_per_device: numel * 4,
    median_s: +seconds.toFixed(4),
    algbw_GBps: +((numel * 4) / seconds / 1e9).toFixed(3),
    per_device_ms: +((seconds / n) * 1000).toFixed(2),
  });
}
console.log(JSON.stringify({ device: kind, schedule: "ring", results }, null, 2));
