// Sequence packing on a real length distribution: samples made by the project's preprocessing (the reference's
// algorithm: short-sequence draws, document ends, truncation) from a results4-style text, at sequence 128 and 512;
// for each, the padding fraction unpacked and packed, rows per sample and samples per row, for the whole set packed
// at once and for load-time packing of each loader batch of --chunk samples. With --time, also useful (non-padding)
// tokens a second of a jitted BERT train step on the default device, unpacked batches of --rows samples against
// packed batches of --rows rows, in the same run. Prints JSON on stdout, progress on stderr.
// The default text is the preprocessing fixture (test/fixtures/bert-preprocess/input.txt: synthetic words in
// Wikipedia's one-sentence-a-line, blank-line-between-documents layout); give a results4 part file with --text.
// Usage: node --import tsx bench/packing.ts [--text FILE] [--vocab FILE] [--seqs 128,512] [--dupe 10]
//        [--max-per-row 3] [--chunk 256] [--seed 0]
//        [--time] [--preset tiny] [--layers N] [--rows 8] [--steps 5] [--time-seq 128]
import { readFileSync } from "node:fs";
import { Tensor, jit } from "../src/index.ts";
import { BERT_PRESETS, BertForPretraining, type BertPresetName } from "../models/bert.ts";
import {
  type BertBatchTensors,
  createBertOptimizer,
  makeBertTrainStep,
  makePackedBertTrainStep,
  type PackedBertBatchTensors,
} from "../models/bert_train_step.ts";
import {
  type PackedColumns,
  packSamples,
  packedBatches,
  packedToTensors,
  paddingFraction,
  sampleSizes,
} from "../mlperf/bert/data/packing.ts";
import { DEFAULT_SETTINGS, samplesFromText } from "../mlperf/bert/data/preprocess.ts";
import { samplesToTensors } from "../mlperf/bert/data/loader.ts";
import type { SampleColumns } from "../mlperf/bert/data/samples.ts";
import { emptySamples } from "../mlperf/bert/data/shard.ts";
import { BertTokenizer, loadVocab } from "../mlperf/bert/data/tokenizer.ts";
import { benchArgs } from "./args.ts";

const { values } = benchArgs(import.meta.url, {
  text: { type: "string", default: "test/fixtures/bert-preprocess/input.txt" },
  vocab: { type: "string", default: "test/fixtures/bert-preprocess/vocab.txt" },
  seqs: { type: "string", default: "128,512" },
  dupe: { type: "string", default: "10" },
  "max-per-row": { type: "string", default: "3" },
  chunk: { type: "string", default: "256" },
  seed: { type: "string", default: "0" },
  time: { type: "boolean", default: false },
  preset: { type: "string", default: "tiny" },
  layers: { type: "string" },
  rows: { type: "string", default: "8" },
  steps: { type: "string", default: "5" },
  "time-seq": { type: "string", default: "128" },
});

/** max_predictions_per_seq as MLPerf pairs it with the sequence length (20 at 128, 76 at 512). */
const predictionsFor = (seq: number): number => (seq === 512 ? 76 : Math.round(seq * 0.15 + 0.8));

const log = (line: string) => process.stderr.write(`${line}\n`);

/** Samples `first..first+count` (wrapping around) of `columns`, as the loader would hand them out. */
function samplesAt(columns: SampleColumns, first: number, count: number): SampleColumns {
  const out = emptySamples(count, columns);
  const { maxSeqLength: seq, maxPredictionsPerSeq: preds } = columns;
  for (let row = 0; row < count; row++) {
    const sample = (first + row) % columns.count;
    for (const field of ["input_ids", "input_mask", "segment_ids"] as const)
      out[field].set(columns[field].subarray(sample * seq, (sample + 1) * seq), row * seq);
    for (const field of ["masked_lm_positions", "masked_lm_ids", "masked_lm_weights"] as const)
      out[field].set(columns[field].subarray(sample * preds, (sample + 1) * preds), row * preds);
    out.next_sentence_labels[row] = columns.next_sentence_labels[sample]!;
  }
  return out;
}

/** Endless loader-like batches of `size` samples, cycling through `columns`. */
function* loaderBatches(columns: SampleColumns, size: number): Generator<SampleColumns, never> {
  for (let first = 0; ; first += size) yield samplesAt(columns, first, size);
}

function lengthSummary(columns: SampleColumns) {
  const lengths = Array.from(sampleSizes(columns).lengths).sort((a, b) => a - b);
  const at = (q: number) => lengths[Math.min(lengths.length - 1, Math.floor(q * lengths.length))]!;
  const full = lengths.filter((length) => length === columns.maxSeqLength).length;
  return {
    mean: lengths.reduce((a, b) => a + b, 0) / lengths.length,
    p10: at(0.1),
    median: at(0.5),
    p90: at(0.9),
    fullFraction: full / lengths.length,
  };
}

function packingFigures(packed: PackedColumns) {
  return {
    rows: packed.count,
    samples: packed.sampleCount,
    paddingFraction: paddingFraction(packed),
    rowsPerSample: packed.count / packed.sampleCount,
    samplesPerRow: packed.sampleCount / packed.count,
  };
}

/** Packing figures for one sequence length. */
function distribution(columns: SampleColumns, maxPerRow: number, chunk: number, seed: number) {
  const whole = packSamples(columns, { maxPerRow, seed });
  // load-time packing: each loader batch of `chunk` samples packed on its own, over one pass of the samples
  const passRows = Math.max(1, Math.floor(columns.count / chunk)) * chunk;
  const chunked = packedBatches(
    (function* () {
      for (let first = 0; first + chunk <= passRows; first += chunk) yield samplesAt(columns, first, chunk);
    })(),
    1,
    { maxPerRow, seed },
  );
  let [rows, samples, real] = [0, 0, 0];
  for (const row of chunked) {
    rows++;
    samples += row.sampleCount;
    for (const bit of row.input_mask) real += bit;
  }
  return {
    samples: columns.count,
    maxPredictionsPerSeq: columns.maxPredictionsPerSeq,
    lengths: lengthSummary(columns),
    unpackedPaddingFraction: paddingFraction(columns),
    packedWhole: packingFigures(whole),
    packedPerLoaderBatch: {
      chunk,
      rows,
      samples,
      paddingFraction: 1 - real / (rows * columns.maxSeqLength),
      rowsPerSample: rows / samples,
      samplesPerRow: samples / rows,
    },
  };
}

/** Untimed steps before the timed ones: the JIT's plain run, its capture, and its first replay (which builds the graph). */
const WARMUP_STEPS = 3;

/** Median seconds a step of `step` over `steps` steps after the warm-up steps. */
function medianStepSeconds<T extends Tensor[]>(step: (...batch: T) => Tensor, batches: () => T, steps: number): number {
  const times: number[] = [];
  for (let i = 0; i < steps + WARMUP_STEPS; i++) {
    const batch = batches();
    const start = performance.now();
    step(...batch).item();
    const seconds = (performance.now() - start) / 1000;
    log(`  step ${i}${i < WARMUP_STEPS ? " (untimed)" : ""}: ${(seconds * 1000).toFixed(1)} ms`);
    if (i >= WARMUP_STEPS) times.push(seconds);
  }
  return times.sort((a, b) => a - b)[Math.floor(times.length / 2)]!;
}

/** Useful tokens a second of a train step, unpacked and packed, on the same samples in the same order. */
function timeSteps(columns: SampleColumns, maxPerRow: number, chunk: number, seed: number) {
  const preset = values.preset as BertPresetName;
  if (!(preset in BERT_PRESETS)) throw new Error(`--preset ${preset}: one of ${Object.keys(BERT_PRESETS).join(", ")}`);
  const config = {
    ...BERT_PRESETS[preset],
    ...(values.layers ? { numHiddenLayers: Number(values.layers) } : {}),
    maxPositionEmbeddings: Math.max(512, columns.maxSeqLength),
  };
  const [rows, steps] = [Number(values.rows), Number(values.steps)];
  const options = { lossScale: 1, gradientAccSteps: 1, maxGradNorm: 1 };
  const run = <T extends Tensor[]>(
    make: (state: Parameters<typeof makeBertTrainStep>[0]) => (...batch: T) => Tensor,
    batches: () => { tensors: T; tokens: number; samples: number },
  ) => {
    Tensor.manualSeed(seed);
    const model = new BertForPretraining(config);
    const state = { model, ...createBertOptimizer(model, { lr: 1e-4, totalSteps: 1000, warmupSteps: 0 }) };
    const step = jit(make(state));
    let [tokens, samples] = [0, 0];
    const seconds = medianStepSeconds(
      step,
      () => {
        const batch = batches();
        [tokens, samples] = [tokens + batch.tokens, samples + batch.samples];
        return batch.tensors;
      },
      steps,
    );
    const count = steps + WARMUP_STEPS;
    return {
      secondsPerStep: seconds,
      samplesPerStep: samples / count,
      usefulTokensPerStep: tokens / count,
      usefulTokensPerSecond: tokens / count / seconds,
    };
  };
  const realTokens = (mask: Int32Array) => mask.reduce((a, b) => a + b, 0);
  log(`timing ${preset} at seq ${columns.maxSeqLength}: ${rows} unpacked samples vs ${rows} packed rows a step`);
  const unpackedLoader = loaderBatches(columns, rows);
  const unpacked = run<BertBatchTensors>(
    (state) => makeBertTrainStep(state, options),
    () => {
      const batch = unpackedLoader.next().value;
      return { tensors: samplesToTensors(batch), tokens: realTokens(batch.input_mask), samples: batch.count };
    },
  );
  const packedLoader = packedBatches(loaderBatches(columns, chunk), rows, { maxPerRow, seed });
  const packed = run<PackedBertBatchTensors>(
    (state) => makePackedBertTrainStep(state, options),
    () => {
      const batch = packedLoader.next().value!;
      return { tensors: packedToTensors(batch), tokens: realTokens(batch.input_mask), samples: batch.sampleCount };
    },
  );
  return {
    preset,
    layers: config.numHiddenLayers,
    seq: columns.maxSeqLength,
    rowsPerStep: rows,
    steps,
    unpacked,
    packed,
    usefulTokensPerSecondRatio: packed.usefulTokensPerSecond / unpacked.usefulTokensPerSecond,
  };
}

const tokenizer = new BertTokenizer(loadVocab(values.vocab));
const text = readFileSync(values.text, "utf8");
const [maxPerRow, chunk, seed] = [Number(values["max-per-row"]), Number(values.chunk), Number(values.seed)];
const samplesBySeq = new Map<number, SampleColumns>();
const samplesOf = (seq: number): SampleColumns => {
  let columns = samplesBySeq.get(seq);
  if (!columns) {
    log(`preprocessing ${values.text} at seq ${seq}, dupe factor ${values.dupe}`);
    const settings = {
      ...DEFAULT_SETTINGS,
      maxSeqLength: seq,
      maxPredictionsPerSeq: predictionsFor(seq),
      dupeFactor: Number(values.dupe),
    };
    columns = samplesFromText(text, tokenizer, settings, { source: values.text });
    samplesBySeq.set(seq, columns);
  }
  return columns;
};

const result: Record<string, unknown> = { text: values.text, maxPerRow, seed, distributions: {} };
for (const seq of values.seqs.split(",").map(Number))
  (result.distributions as Record<number, unknown>)[seq] = distribution(samplesOf(seq), maxPerRow, chunk, seed);
if (values.time) result.timing = timeSteps(samplesOf(Number(values["time-seq"])), maxPerRow, chunk, seed);
console.log(JSON.stringify(result, null, 2));
