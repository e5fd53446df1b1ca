// What starting host buffers on a 64-byte boundary (runtime/host_memory.ts) is worth: two copies of one BERT
// model and jitted train step in one process, one with every buffer where Node's ArrayBuffers start (16 bytes
// past a 64-byte boundary), one aligned; their steps alternate, so both see the same machine. Prints JSON:
// median ms a step each and their ratio (above 1: alignment is faster).
// Usage: npx tsx bench/host-alignment.ts [--config mini] [--steps 12]
import { benchArgs } from "./args.ts";
import { Device, Tensor } from "../src/index.ts";
import { jit } from "../src/tensor/index.ts";
import { BERT_PRESETS, BertForPretraining } from "../models/bert.ts";
import { createBertOptimizer, makeBertTrainStep } from "../models/bert_train_step.ts";
import { fakeBatch, samplesToTensors } from "../mlperf/bert/data/loader.ts";

const { values } = benchArgs(import.meta.url, {
  config: { type: "string", default: "mini" },
  steps: { type: "string", default: "12" },
});
const preset = values.config as keyof typeof BERT_PRESETS;
const config = BERT_PRESETS[preset];
if (!config) throw new Error(`unknown config ${values.config}; known: ${Object.keys(BERT_PRESETS).join(", ")}`);
const backend = Device.allocator(Device.DEFAULT);
if (!Device.DEFAULT.startsWith("CPU") && !Device.DEFAULT.startsWith("JS"))
  throw new Error(`host devices only (default is ${Device.DEFAULT})`);
const aligned = backend.allocate.bind(backend);
// Node's own placement: a plain ArrayBuffer as a view from its start
const unaligned = (bytes: number): Uint8Array => new Uint8Array(new ArrayBuffer(bytes));

/** A model and its jitted step whose buffers (made on first use: while it runs) come from `allocate`. */
function stepper(allocate: (bytes: number) => unknown): () => number {
  const use = <T>(fn: () => T): T => {
    backend.allocate = allocate;
    try {
      return fn();
    } finally {
      backend.allocate = aligned;
    }
  };
  return use(() => {
    Tensor.manualSeed(0);
    const model = new BertForPretraining(config);
    const state = { model, ...createBertOptimizer(model, { lr: 1e-4, totalSteps: 1000, warmupSteps: 10 }) };
    const step = jit(makeBertTrainStep(state, { lossScale: 1, gradientAccSteps: 1, maxGradNorm: 1 }));
    let seed = 0;
    const run = (): number =>
      use(() => {
        const batch = samplesToTensors(fakeBatch(8, 128, 20, seed++, config.vocabSize));
        const start = performance.now();
        step(...batch).item();
        return performance.now() - start;
      });
    for (let i = 0; i < 3; i++) run(); // uncaptured, captured, one replay
    return run;
  });
}

console.error(`${preset}: building both models and capturing their steps...`);
const runUnaligned = stepper(unaligned),
  runAligned = stepper(aligned);
const times = { unaligned: [] as number[], aligned: [] as number[] };
for (let i = 0; i < Number(values.steps); i++) {
  times.unaligned.push(runUnaligned());
  times.aligned.push(runAligned());
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const [u, a] = [median(times.unaligned), median(times.aligned)];
console.log(
  JSON.stringify(
    {
      device: Device.DEFAULT,
      config: preset,
      batch: 8,
      seq: 128,
      steps: times.aligned.length,
      unaligned_median_ms: +u.toFixed(1),
      aligned_median_ms: +a.toFixed(1),
      ratio: +(u / a).toFixed(3),
    },
    null,
    2,
  ),
);
