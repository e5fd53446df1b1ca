// Batches of pretraining samples for the trainer, as SampleColumns (typed arrays).
//
// Train: an endless stream of shard files, each pass in a new seeded order; samples taken
// round-robin from `cycleLength` open shards (each read front to back), through a shuffle
// buffer (the reference's 1000), into batches of BS. Eval: the eval files' samples in
// order, wrapping around, in batches of EVAL_BS. Every random choice is a counter-based
// hash of (SEED, stream, counter), so the order of sample *indices* can be replayed without
// reading data: starting at step k fast-forwards through indices and headers only.
// `prefetchBatches` runs either loader on a worker thread and transfers the batches.

import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { detectSampleFormat, openSampleFile, type SampleFile } from "./inspect.ts";
import { emptySamples, ShardFile } from "./shard.ts";
import { SAMPLE_FIELDS, type SampleColumns } from "./samples.ts";
import { Tensor } from "../../../src/index.ts";
import type { BertBatchTensors } from "../../../models/bert_train_step.ts";

/** Bad loader input (no files, files of different widths); names the file where there is one. */
export class LoaderError extends Error {
  override name = "LoaderError";
}

export interface TrainLoaderOptions {
  /** Shard or TFRecord files; their order here does not matter (each pass is shuffled). */
  files: string[];
  batchSize: number;
  seed: number;
  /** Samples held for shuffling (the reference uses 1000). */
  shuffleBuffer?: number;
  /** Files read at the same time, interleaved sample by sample. */
  cycleLength?: number;
  /** First batch to yield: batch k of an uninterrupted run. */
  startStep?: number;
  /**
   * This rank's rows of each global batch (data-parallel training): part `index` of `count` equal parts.
   * The sample order is the global batch's, so any count of ranks trains on the same samples.
   */
  part?: { index: number; count: number };
}

export interface EvalLoaderOptions {
  /** Eval files, read in this order. */
  files: string[];
  batchSize: number;
  startStep?: number;
}

export type LoaderSpec = ({ kind: "train" } & TrainLoaderOptions) | ({ kind: "eval" } & EvalLoaderOptions);

// ---- counter-based random numbers ------------------------------------------------------

/** A 32-bit integer hash with good avalanche (lowbias32). */
function mix32(x: number): number {
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d);
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b);
  x ^= x >>> 16;
  return x >>> 0;
}

const STREAM_FILE_ORDER = 1;
const STREAM_SHUFFLE = 2;
const STREAM_FAKE = 3;

/** Random uint32s addressed by a counter: the same (seed, stream, counter), the same number. */
export class CounterRandom {
  private readonly key: number;

  constructor(seed: number, stream: number) {
    const seedKey = mix32((seed >>> 0) ^ mix32(((seed / 2 ** 32) >>> 0) + 0x9e3779b9));
    this.key = mix32(seedKey ^ mix32(stream + 0x85ebca6b));
  }

  /** The `counter`-th number (any safe non-negative integer). */
  at(counter: number): number {
    return mix32(mix32(this.key ^ (counter >>> 0)) + ((counter / 2 ** 32) >>> 0));
  }

  /** The `counter`-th number scaled to an integer in [0, n). */
  below(n: number, counter: number): number {
    return Math.floor((this.at(counter) / 2 ** 32) * n);
  }
}

// ---- sample order ----------------------------------------------------------------------

/** A sample as (file index, sample index in the file), packed into one number. */
type SampleRef = number;
const REF_BASE = 2 ** 32;

/**
 * The train sample order as indices only: file order per pass, interleave and shuffle
 * buffer. `countOf(file)` gives a file's sample count (from its header).
 */
export class TrainSampleOrder {
  private epoch = 0;
  private epochFiles: number[] = [];
  private epochPosition = 0;
  private epochSamples = 0;
  private readonly slots: { file: number; next: number; count: number }[] = [];
  private cursor = 0;
  private readonly buffer: SampleRef[] = [];
  private emitted = 0;
  private readonly fileOrderRandom: CounterRandom;
  private readonly shuffleRandom: CounterRandom;

  constructor(
    private readonly fileCount: number,
    private readonly countOf: (file: number) => number,
    seed: number,
    private readonly shuffleBuffer: number,
    private readonly cycleLength: number,
  ) {
    this.fileOrderRandom = new CounterRandom(seed, STREAM_FILE_ORDER);
    this.shuffleRandom = new CounterRandom(seed, STREAM_SHUFFLE);
    this.startEpoch();
  }

  /** The next sample of the shuffled, endless stream. */
  next(): SampleRef {
    while (this.buffer.length < this.shuffleBuffer) this.buffer.push(this.nextInterleaved());
    const pick = this.shuffleRandom.below(this.buffer.length, this.emitted++);
    const ref = this.buffer[pick]!;
    this.buffer[pick] = this.nextInterleaved();
    return ref;
  }

  private startEpoch(): void {
    const order = Array.from({ length: this.fileCount }, (_, i) => i);
    for (let i = order.length - 1; i > 0; i--) {
      const j = this.fileOrderRandom.below(i + 1, this.epoch * REF_BASE + i);
      [order[i], order[j]] = [order[j]!, order[i]!];
    }
    this.epochFiles = order;
    this.epochPosition = 0;
    this.epochSamples = 0;
  }

  /** The next file with samples in the endless sequence of passes. */
  private nextFile(): { file: number; count: number } {
    for (;;) {
      if (this.epochPosition === this.epochFiles.length) {
        if (this.epochSamples === 0) throw new LoaderError("every train file is empty");
        this.epoch++;
        this.startEpoch();
      }
      const file = this.epochFiles[this.epochPosition++]!;
      const count = this.countOf(file);
      this.epochSamples += count;
      if (count > 0) return { file, count };
    }
  }

  /** Round-robin over the open files, refilling a slot with the next file when one ends. */
  private nextInterleaved(): SampleRef {
    const slotIndex = this.cursor;
    this.cursor = (this.cursor + 1) % this.cycleLength;
    let slot = this.slots[slotIndex];
    if (slot === undefined || slot.next === slot.count) {
      slot = { ...this.nextFile(), next: 0 };
      this.slots[slotIndex] = slot;
    }
    return slot.file * REF_BASE + slot.next++;
  }
}

// ---- reading ---------------------------------------------------------------------------

type Widths = Pick<SampleFile, "path" | "maxSeqLength" | "maxPredictionsPerSeq">;

/** Throws unless `file` has the widths of `first`, naming both. */
function checkSameWidths(file: Widths, first: Widths): void {
  if (file.maxSeqLength === first.maxSeqLength && file.maxPredictionsPerSeq === first.maxPredictionsPerSeq) return;
  throw new LoaderError(
    `${file.path}: max_seq_length/max_predictions_per_seq ${file.maxSeqLength}/${file.maxPredictionsPerSeq}, but ${first.path} has ${first.maxSeqLength}/${first.maxPredictionsPerSeq}`,
  );
}

/**
 * Opens sample files on demand, keeps the most recently used open, checks equal widths. A file's data is verified
 * against its checksums the first time it is opened for reading (a shard: the whole file, at about 1 GB/s), not when
 * reopened; counting its samples reads its header alone.
 */
class SampleFiles {
  private readonly open = new Map<number, SampleFile>();
  private readonly counts = new Map<number, number>();
  private readonly verified = new Set<number>();
  /** The widths of the first file with samples (an empty TFRecord has none to tell). */
  private widths: { path: string; maxSeqLength: number; maxPredictionsPerSeq: number } | undefined;

  constructor(
    readonly paths: string[],
    private readonly keepOpen: number,
  ) {
    if (paths.length === 0) throw new LoaderError("no sample files given");
  }

  get(file: number): SampleFile {
    let sampleFile = this.open.get(file);
    if (sampleFile !== undefined) {
      this.open.delete(file);
    } else {
      sampleFile = openSampleFile(this.paths[file]!, { verify: !this.verified.has(file) });
      this.verified.add(file);
      if (sampleFile.count > 0) this.checkWidths(sampleFile);
      this.counts.set(file, sampleFile.count);
    }
    this.open.set(file, sampleFile);
    if (this.open.size > this.keepOpen) {
      const [oldest, oldestFile] = this.open.entries().next().value as [number, SampleFile];
      oldestFile.close();
      this.open.delete(oldest);
    }
    return sampleFile;
  }

  private checkWidths(sampleFile: SampleFile): void {
    const { path, maxSeqLength, maxPredictionsPerSeq } = sampleFile;
    this.widths ??= { path, maxSeqLength, maxPredictionsPerSeq };
    try {
      checkSameWidths(sampleFile, this.widths);
    } catch (error) {
      sampleFile.close();
      throw error;
    }
  }

  count(file: number): number {
    let count = this.counts.get(file);
    if (count === undefined) {
      const header = openSampleFile(this.paths[file]!, { verify: false });
      header.close();
      count = header.count;
      this.counts.set(file, count);
    }
    return count;
  }

  /** A batch holding the given samples, in order. */
  read(refs: SampleRef[]): SampleColumns {
    if (this.widths === undefined && refs.length > 0) this.get(Math.floor(refs[0]! / REF_BASE));
    const batch = emptySamples(refs.length, this.widths!); // set: refs only name files with samples
    refs.forEach((ref, row) => this.get(Math.floor(ref / REF_BASE)).readInto(ref % REF_BASE, batch, row));
    return batch;
  }

  close(): void {
    for (const sampleFile of this.open.values()) sampleFile.close();
    this.open.clear();
  }
}

function checkPositiveInteger(name: string, value: number): void {
  if (!(Number.isInteger(value) && value > 0))
    throw new LoaderError(`${name} must be a positive integer, got ${value}`);
}

/** Endless train batches, deterministic for `seed`; starts at batch `startStep`. */
export function* trainBatches(options: TrainLoaderOptions): Generator<SampleColumns, never> {
  const { files, batchSize, seed, shuffleBuffer = 1000, cycleLength = 4, startStep = 0 } = options;
  const { index, count } = options.part ?? { index: 0, count: 1 };
  checkPositiveInteger("batch size", batchSize);
  checkPositiveInteger("part count", count);
  if (!(Number.isInteger(index) && index >= 0 && index < count))
    throw new LoaderError(`part ${index} of ${count}: the index must be an integer from 0 to ${count - 1}`);
  if (batchSize % count !== 0)
    throw new LoaderError(`a batch of ${batchSize} does not split into ${count} equal parts`);
  const [first, end] = [(index * batchSize) / count, ((index + 1) * batchSize) / count];
  checkPositiveInteger("shuffle buffer", shuffleBuffer);
  checkPositiveInteger("cycle length", cycleLength);
  if (!(Number.isInteger(startStep) && startStep >= 0))
    throw new LoaderError(`start step must be a non-negative integer, got ${startStep}`);
  const sampleFiles = new SampleFiles(files, 2 * cycleLength + 2);
  try {
    const order = new TrainSampleOrder(
      files.length,
      (file) => sampleFiles.count(file),
      seed,
      shuffleBuffer,
      cycleLength,
    );
    for (let skipped = 0; skipped < startStep * batchSize; skipped++) order.next();
    for (;;) {
      const batch = Array.from({ length: batchSize }, () => order.next());
      yield sampleFiles.read(count === 1 ? batch : batch.slice(first, end));
    }
  } finally {
    sampleFiles.close();
  }
}

/** Endless eval batches: the files' samples in order, wrapping around; starts at `startStep`. */
export function* evalBatches(options: EvalLoaderOptions): Generator<SampleColumns, never> {
  const { files, batchSize, startStep = 0 } = options;
  checkPositiveInteger("batch size", batchSize);
  const sampleFiles = new SampleFiles(files, files.length);
  try {
    const starts = [0]; // first global index of each file, then the total
    for (let file = 0; file < files.length; file++) starts.push(starts[file]! + sampleFiles.count(file));
    const total = starts[files.length]!;
    if (total === 0) throw new LoaderError(`the eval files hold no samples: ${files.join(", ")}`);
    const refOf = (index: number): SampleRef => {
      let file = 0;
      while (starts[file + 1]! <= index) file++;
      return file * REF_BASE + (index - starts[file]!);
    };
    for (let step = startStep; ; step++) {
      yield sampleFiles.read(Array.from({ length: batchSize }, (_, row) => refOf((step * batchSize + row) % total)));
    }
  } finally {
    sampleFiles.close();
  }
}

/** The vocab a model embeds: shards made with another vocab hold token ids that mean other words to it. */
export interface ModelVocab {
  vocabSize: number;
  /** Where the model's vocab size comes from (its config file), for the error. */
  source: string;
}

/**
 * The sample files in a folder (as preprocessing writes them), sorted; temp and hidden files skipped. Each is checked
 * as far as its header goes, so that a bad folder fails before training starts: an empty file, a shard shorter or
 * longer than its header says (a truncated copy), a shard of other widths than the first, and (given `model`) a
 * shard whose recorded vocab_size is not the model's are errors naming the file.
 */
export function listSampleFiles(dir: string, model?: ModelVocab): string[] {
  const paths = readdirSync(dir)
    .filter((name) => !name.startsWith(".") && !name.endsWith(".tmp"))
    .sort()
    .map((name) => join(dir, name))
    .filter((path) => statSync(path).isFile());
  return checkSampleFiles(paths, `the sample files of ${dir}`, model);
}

/**
 * Checks sample files as far as their headers go (listSampleFiles' checks, on a list a manifest names); returns
 * `paths`. `what` names the set in the error for an empty file.
 */
export function checkSampleFiles(paths: string[], what: string, model?: ModelVocab): string[] {
  let first: ShardFile | undefined;
  for (const path of paths) {
    if (statSync(path).size === 0) throw new LoaderError(`${path}: an empty file among ${what}`);
    if (detectSampleFormat(path) !== "shard") continue; // a TFRecord's records are found only by walking them
    const shard = new ShardFile(path, { verify: false });
    shard.close();
    first ??= shard;
    checkSameWidths(shard, first);
    if (model !== undefined && shard.vocabSize !== undefined && shard.vocabSize !== model.vocabSize)
      throw new LoaderError(
        `${path}: made with a vocab of ${shard.vocabSize} tokens (its vocab_size), but the model's vocab_size is ${model.vocabSize} (${model.source}): its token ids would mean other words`,
      );
  }
  return paths;
}

// ---- fake data -------------------------------------------------------------------------

const CLS_ID = 101;
const SEP_ID = 102;
const MASK_ID = 103;
const FIRST_WORD_ID = 999; // ids below are [PAD], [unusedN] and the special tokens

/**
 * A batch of valid-looking samples for warming up kernels: `[CLS] A [SEP] B [SEP]` of random
 * length and ids, about 15% of positions masked (ascending, within the real tokens).
 */
export function fakeBatch(
  batchSize: number,
  maxSeqLength: number,
  maxPredictionsPerSeq: number,
  seed: number,
  vocabSize = 30522,
): SampleColumns {
  if (maxSeqLength < 5) throw new LoaderError(`fake samples need max_seq_length >= 5, got ${maxSeqLength}`);
  const batch = emptySamples(batchSize, { maxSeqLength, maxPredictionsPerSeq });
  const fakeRandom = new CounterRandom(seed, STREAM_FAKE);
  let counter = 0;
  const random = (n: number) => fakeRandom.below(n, counter++);
  for (let row = 0; row < batchSize; row++) {
    const length = 5 + random(maxSeqLength - 4); // 5..maxSeqLength
    const firstSep = 2 + random(length - 4); // A and B get at least one token each
    const ids = batch.input_ids.subarray(row * maxSeqLength, (row + 1) * maxSeqLength);
    for (let i = 0; i < length; i++) ids[i] = FIRST_WORD_ID + random(vocabSize - FIRST_WORD_ID);
    ids[0] = CLS_ID;
    ids[firstSep] = SEP_ID;
    ids[length - 1] = SEP_ID;
    batch.input_mask.fill(1, row * maxSeqLength, row * maxSeqLength + length);
    batch.segment_ids.fill(1, row * maxSeqLength + firstSep + 1, row * maxSeqLength + length);
    const candidates = Array.from({ length }, (_, i) => i).filter((i) => i !== 0 && i !== firstSep && i !== length - 1);
    const predictions = Math.min(maxPredictionsPerSeq, Math.max(1, Math.round(length * 0.15)), candidates.length);
    for (let i = 0; i < predictions; i++) {
      const j = i + random(candidates.length - i);
      [candidates[i], candidates[j]] = [candidates[j]!, candidates[i]!];
    }
    const positions = candidates.slice(0, predictions).sort((a, b) => a - b);
    positions.forEach((position, i) => {
      const at = row * maxPredictionsPerSeq + i;
      batch.masked_lm_positions[at] = position;
      batch.masked_lm_ids[at] = ids[position]!;
      batch.masked_lm_weights[at] = 1;
      ids[position] = MASK_ID;
    });
    batch.next_sentence_labels[row] = random(2);
  }
  return batch;
}

// ---- prefetching on a worker thread ----------------------------------------------------

const WORKER_MARK = "tsgrad-loader-worker";

/** A worker running this module; under tsx, with tsx's hooks, which Node 20 does not pass on to workers. */
function startWorker(data: unknown): Worker {
  const self = import.meta.url;
  if (!self.endsWith(".ts")) return new Worker(new URL(self), { workerData: data });
  const tsx = import.meta.resolve("tsx/esm/api");
  const bootstrap = `import(${JSON.stringify(tsx)}).then((api) => { api.register(); return import(${JSON.stringify(self)}); })`;
  return new Worker(bootstrap, { eval: true, workerData: data });
}

type WorkerReply = { batch: SampleColumns } | { error: string };

/** Batches from a loader running on a worker thread, `depth` batches ahead of the consumer. */
export class PrefetchingLoader implements AsyncIterableIterator<SampleColumns> {
  private readonly worker: Worker;
  private readonly ready: SampleColumns[] = [];
  private readonly waiting: {
    resolve: (result: IteratorResult<SampleColumns>) => void;
    reject: (error: Error) => void;
  }[] = [];
  private failure: Error | undefined;
  private closed = false;

  constructor(spec: LoaderSpec, depth = 4) {
    this.worker = startWorker({ mark: WORKER_MARK, spec, depth });
    this.worker.unref(); // only a pending next() keeps the process alive
    this.worker.on("message", (reply: WorkerReply) => {
      if ("error" in reply) this.fail(new LoaderError(reply.error));
      else this.deliver(reply.batch);
    });
    this.worker.on("error", (error) => this.fail(error));
    this.worker.on("exit", (code) => this.fail(new LoaderError(`loader worker exited with code ${code}`)));
  }

  next(): Promise<IteratorResult<SampleColumns>> {
    if (this.closed) return Promise.resolve({ done: true, value: undefined });
    const batch = this.ready.shift();
    if (batch !== undefined) {
      this.worker.postMessage(1);
      return Promise.resolve({ done: false, value: batch });
    }
    if (this.failure !== undefined) return Promise.reject(this.failure);
    this.worker.ref();
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  async return(): Promise<IteratorResult<SampleColumns>> {
    await this.close();
    return { done: true, value: undefined };
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** Stops the worker. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const { resolve } of this.waiting.splice(0)) resolve({ done: true, value: undefined });
    await this.worker.terminate();
  }

  private deliver(batch: SampleColumns): void {
    const waiter = this.waiting.shift();
    if (waiter === undefined) {
      this.ready.push(batch);
      return;
    }
    this.worker.postMessage(1);
    if (this.waiting.length === 0) this.worker.unref();
    waiter.resolve({ done: false, value: batch });
  }

  private fail(error: Error): void {
    if (this.closed || this.failure !== undefined) return;
    this.failure = error;
    for (const { reject } of this.waiting.splice(0)) reject(error);
  }
}

/** Runs `spec`'s loader on a worker thread, `depth` batches ahead (transferring, not copying, them). */
export function prefetchBatches(spec: LoaderSpec, depth = 4): PrefetchingLoader {
  return new PrefetchingLoader(spec, depth);
}

function batchesOf(spec: LoaderSpec): Generator<SampleColumns, never> {
  return spec.kind === "train" ? trainBatches(spec) : evalBatches(spec);
}

function runWorker(port: NonNullable<typeof parentPort>, spec: LoaderSpec, depth: number): void {
  let batches: Generator<SampleColumns, never>;
  let credit = depth;
  const produce = () => {
    try {
      batches ??= batchesOf(spec);
      for (; credit > 0; credit--) {
        const batch = batches.next().value;
        port.postMessage(
          { batch },
          SAMPLE_FIELDS.map((field) => batch[field].buffer as ArrayBuffer),
        );
      }
    } catch (error) {
      port.postMessage({ error: (error as Error).message });
      port.close();
    }
  };
  port.on("message", (more: number) => {
    credit += more;
    produce();
  });
  produce();
}

if (!isMainThread && parentPort !== null && (workerData as { mark?: string } | null)?.mark === WORKER_MARK) {
  const { spec, depth } = workerData as { spec: LoaderSpec; depth: number };
  runWorker(parentPort, spec, depth);
}

/**
 * A batch's columns as the seven input tensors of a train or eval step, on `devices` (sharded on the batch axis over
 * several).
 */
export function samplesToTensors(samples: SampleColumns, devices?: readonly string[]): BertBatchTensors {
  const { count, maxSeqLength: seq, maxPredictionsPerSeq: preds } = samples;
  const place = (t: Tensor) => (devices && devices.length > 1 ? t.shard([...devices], 0) : t);
  const make = (data: Int32Array | Float32Array, shape: number[]) =>
    place(new Tensor(data, { device: devices?.[0] }).reshape(shape));
  return [
    make(samples.input_ids, [count, seq]),
    make(samples.segment_ids, [count, seq]),
    make(samples.input_mask, [count, seq]),
    make(samples.masked_lm_positions, [count, preds]),
    make(samples.masked_lm_ids, [count, preds]),
    make(samples.masked_lm_weights, [count, preds]),
    make(samples.next_sentence_labels, [count]),
  ];
}
