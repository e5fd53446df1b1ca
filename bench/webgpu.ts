// tsgrad's WEBGPU device beside TensorFlow.js's WebGPU backend, in one process on the same adapter (Dawn from npm's
// `webgpu` package; SwiftShader where there is no GPU): float32 GEMMs, and a small training step (a two-layer MLP,
// softmax cross-entropy, SGD) that both frameworks can express. Each timing is one call and the read-back of its
// result (tfjs's `await data()`, tsgrad's `toArray()`), the median of --reps after a warm-up; the frameworks take
// turns, shape by shape. Prints JSON on stdout: per case both times and tfjs_ms / tsgrad_ms (above 1: tsgrad ahead).
//
// usage: node --import tsx bench/webgpu.ts [--reps 7] [--sizes 256,512,1024] [--no-mlp] [--no-bert]
//
// The BERT case is a BERT-tiny train step (2 layers, hidden 128, batch 8, sequence 128, 20 predictions): tsgrad's
// models/bert.ts with LAMB against the same network in tfjs ops with Adam (bench/webgpu_tfjs_bert.ts; tfjs has no
// LAMB). Its reps are at most 3: a step takes seconds on SwiftShader.
//
// TensorFlow.js is not a dependency (about 300 MB installed): install it for the bench, without saving it,
//   npm install --no-save @tensorflow/tfjs@4.22.0 @tensorflow/tfjs-backend-webgpu@4.22.0
// The figures on SwiftShader are a CPU running GPU code, not a GPU's.
import { create, globals } from "webgpu";
import { benchArgs } from "./args.ts";
import { Device, Tensor, jit } from "../src/index.ts";
import { BERT_PRESETS, BertForPretraining } from "../models/bert.ts";
import { createBertOptimizer, makeBertTrainStep } from "../models/bert_train_step.ts";
import { fakeBatch, samplesToTensors } from "../mlperf/bert/data/loader.ts";
import { type TfModule, tfjsBertStep } from "./webgpu_tfjs_bert.ts";
import { webGpuDevice } from "../src/runtime/webgpu.ts";

const { values } = benchArgs(import.meta.url, {
  reps: { type: "string", default: "7" },
  sizes: { type: "string", default: "256,512,1024" },
  "no-mlp": { type: "boolean", default: false },
  "no-bert": { type: "boolean", default: false },
});
let reps = Number(values.reps);
const sizes = values.sizes.split(",").map(Number);

const device = webGpuDevice();
if (!device) throw new Error("WEBGPU is not available here (see docs/devices.md)");

// tfjs on its own Dawn instance in this thread (tsgrad's lives on a worker): the same adapter
Object.assign(globalThis, globals);
const gpu = create([]);
Object.assign(globalThis, { navigator: { gpu, userAgent: "node" }, tgBenchGpu: gpu });
/** The part of TensorFlow.js's API the bench calls (it is not installed where the project type-checks). */
interface TfTensor {
  data(): Promise<unknown>;
  dispose(): void;
}
interface Tf {
  setBackend(name: string): Promise<boolean>;
  ready(): Promise<void>;
  tensor2d(values: Float32Array, shape: [number, number]): TfTensor;
  tensor1d(values: Int32Array, dtype: "int32"): TfTensor;
  oneHot(indices: TfTensor, depth: number): TfTensor;
  matMul(a: TfTensor, b: TfTensor): TfTensor;
  relu(x: TfTensor): TfTensor;
  variable(x: TfTensor): TfTensor;
  losses: { softmaxCrossEntropy(labels: TfTensor, logits: TfTensor): TfTensor };
  train: { sgd(rate: number): { minimize(loss: () => TfTensor, returnCost: true): TfTensor | null } };
}
// the union package: tfjs-core alone registers no gradients
let tf: Tf;
try {
  tf = (await import("@tensorflow/tfjs" as string)) as Tf;
  await import("@tensorflow/tfjs-backend-webgpu" as string);
} catch (error) {
  console.error(
    `bench/webgpu.ts needs TensorFlow.js (${(error as Error).message.split("\n")[0]}): npm install --no-save @tensorflow/tfjs@4.22.0 @tensorflow/tfjs-backend-webgpu@4.22.0`,
  );
  process.exit(2);
}
await tf.setBackend("webgpu");
await tf.ready();

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function timeBoth(
  tsgrad: () => unknown,
  tfjs: () => Promise<unknown>,
): Promise<{ tsgrad_ms: number; tfjs_ms: number; ratio: number }> {
  const [ours, theirs]: number[][] = [[], []];
  tsgrad(); // warm-up: compiles
  await tfjs();
  for (let r = 0; r < reps; r++) {
    let start = performance.now();
    tsgrad();
    ours.push(performance.now() - start);
    start = performance.now();
    await tfjs();
    theirs.push(performance.now() - start);
  }
  const [tsgrad_ms, tfjs_ms] = [median(ours), median(theirs)];
  return { tsgrad_ms: round(tsgrad_ms), tfjs_ms: round(tfjs_ms), ratio: round(tfjs_ms / tsgrad_ms) };
}
const round = (x: number, scale = 100): number => Math.round(x * scale) / scale;

const results: Record<string, unknown>[] = [];
for (const n of sizes) {
  console.error(`gemm ${n}^3`);
  const data = [0, 1].map((seed) => Float32Array.from({ length: n * n }, (_, i) => Math.sin(i * 12.9898 + seed)));
  const [a, b] = data.map((d) => new Tensor(d, { device: "WEBGPU" }).reshape([n, n]).realize());
  const matmul = jit((x: Tensor, y: Tensor) => x.matmul(y).realize());
  const [ta, tb] = data.map((d) => tf.tensor2d(d, [n, n]));
  const times = await timeBoth(
    () => matmul(a!, b!).toArray(),
    async () => {
      const c = tf.matMul(ta!, tb!);
      await c.data();
      c.dispose();
    },
  );
  const gflop = (2 * n ** 3) / 1e9;
  results.push({
    case: `gemm ${n}^3`,
    ...times,
    tsgrad_gflops: round(gflop / (times.tsgrad_ms / 1000)),
    tfjs_gflops: round(gflop / (times.tfjs_ms / 1000)),
  });
}

if (!values["no-mlp"]) {
  // x [64, 784] -> relu(x W1 + b1) [64, 256] -> logits [64, 10]; mean softmax cross-entropy; SGD at 0.1
  console.error("mlp step");
  const [batch, inputs, hidden, classes] = [64, 784, 256, 10];
  const init = (rows: number, cols: number, seed: number) =>
    Float32Array.from({ length: rows * cols }, (_, i) => Math.sin(i * 78.233 + seed) * Math.sqrt(2 / rows));
  const x = Float32Array.from({ length: batch * inputs }, (_, i) => Math.sin(i * 0.37) * 0.5 + 0.5);
  const labels = Int32Array.from({ length: batch }, (_, i) => i % classes);
  const w1 = new Tensor(init(inputs, hidden, 1), { device: "WEBGPU" }).reshape([inputs, hidden]).realize();
  const w2 = new Tensor(init(hidden, classes, 2), { device: "WEBGPU" }).reshape([hidden, classes]).realize();
  for (const w of [w1, w2]) w.requiresGrad = true;
  const xs = new Tensor(x, { device: "WEBGPU" }).reshape([batch, inputs]).realize();
  const ys = new Tensor(labels, { device: "WEBGPU" }).realize();
  const step = jit((input: Tensor, target: Tensor) => {
    const loss = input.matmul(w1).relu().matmul(w2).sparseCategoricalCrossentropy(target);
    loss.backward();
    for (const w of [w1, w2]) w.assign(w.sub(w.grad!.mul(0.1)));
    for (const w of [w1, w2]) w.grad = null;
    return loss.realize(w1, w2);
  });
  const v1 = tf.variable(tf.tensor2d(init(inputs, hidden, 1), [inputs, hidden]));
  const v2 = tf.variable(tf.tensor2d(init(hidden, classes, 2), [hidden, classes]));
  const tx = tf.tensor2d(x, [batch, inputs]);
  const ty = tf.oneHot(tf.tensor1d(labels, "int32"), classes);
  const optimizer = tf.train.sgd(0.1);
  const lastLoss = { tsgrad: Number.NaN, tfjs: Number.NaN };
  const times = await timeBoth(
    () => (lastLoss.tsgrad = step(xs, ys).item()),
    async () => {
      const loss = optimizer.minimize(
        () => tf.losses.softmaxCrossEntropy(ty, tf.matMul(tf.relu(tf.matMul(tx, v1)), v2)),
        true,
      )!;
      lastLoss.tfjs = ((await loss.data()) as Float32Array)[0]!;
      loss.dispose();
    },
  );
  // the same steps on the same weights: the last losses agree where both did the same work
  results.push({
    case: `mlp step ${batch}x${inputs}-${hidden}-${classes}`,
    ...times,
    last_loss: { tsgrad: round(lastLoss.tsgrad, 1e6), tfjs: round(lastLoss.tfjs, 1e6) },
  });
}

if (!values["no-bert"]) {
  console.error("bert-tiny step");
  const config = BERT_PRESETS.tiny;
  const samples = fakeBatch(8, 128, 20, 1, config.vocabSize);
  Device.DEFAULT = "WEBGPU";
  Tensor.manualSeed(0);
  const model = new BertForPretraining(config);
  const state = { model, ...createBertOptimizer(model, { lr: 1e-4, totalSteps: 1000, warmupSteps: 10 }) };
  const bertStep = jit(makeBertTrainStep(state, { lossScale: 1, gradientAccSteps: 1, maxGradNorm: 1 }));
  const batch = samplesToTensors(samples);
  const tfStep = tfjsBertStep(tf as unknown as TfModule, config, samples);
  const fewer = Math.min(reps, 3);
  const saved = reps;
  reps = fewer;
  // the losses differ (each framework draws its own weights) but both start near ln(30522) + ln(2) = 11.0
  const lastLoss = { tsgrad: Number.NaN, tfjs: Number.NaN };
  const times = await timeBoth(
    () => (lastLoss.tsgrad = bertStep(...batch).item()),
    async () => {
      const loss = tfStep();
      lastLoss.tfjs = ((await loss.data()) as Float32Array)[0]!;
      loss.dispose();
    },
  );
  reps = saved;
  results.push({
    case: "bert-tiny train step 8x128",
    ...times,
    reps: fewer,
    last_loss: { tsgrad: round(lastLoss.tsgrad, 1e4), tfjs: round(lastLoss.tfjs, 1e4) },
  });
}

console.log(JSON.stringify({ adapter: device.info.adapter, reps, results }, null, 2));
process.exit(0);
