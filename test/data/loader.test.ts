import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  evalBatches,
  fakeBatch,
  LoaderError,
  listSampleFiles,
  prefetchBatches,
  TrainSampleOrder,
  trainBatches,
  type TrainLoaderOptions,
} from "../../mlperf/bert/data/loader.ts";
import { writeShard } from "../../mlperf/bert/data/shard.ts";
import { writeTFRecordSamples } from "../../mlperf/bert/data/tfrecord.ts";
import { readSafetensorsHeader } from "../../src/io/safetensors.ts";
import type { SampleColumns } from "../../mlperf/bert/data/samples.ts";
import { scratchDir } from "../scratch.ts";

const SEQ = 16;
const PRED = 3;
const SIZES = [7, 12, 5, 9]; // 33 samples in 4 files

/** Sample `i` of file `f` carries the id 1000 + 100 f + i as its second token. */
const sampleId = (file: number, index: number) => 1000 + 100 * file + index;

function makeFiles(sizes = SIZES, format: "shard" | "tfrecord" = "shard"): string[] {
  const dir = scratchDir("loader-");
  return sizes.map((size, file) => {
    const samples = fakeBatch(size, SEQ, PRED, file);
    for (let i = 0; i < size; i++) samples.input_ids[i * SEQ + 1] = sampleId(file, i);
    const path = join(dir, `part-${String(file).padStart(5, "0")}`);
    if (format === "shard") writeShard(path, samples);
    else writeTFRecordSamples(path, samples);
    return path;
  });
}

const idsOf = (batch: SampleColumns) =>
  Array.from({ length: batch.count }, (_, row) => batch.input_ids[row * SEQ + 1]!);

function takeIds(batches: Iterator<SampleColumns>, count: number): number[][] {
  return Array.from({ length: count }, () => idsOf(batches.next().value as SampleColumns));
}

const FILES = makeFiles();
const OPTIONS: TrainLoaderOptions = { files: FILES, batchSize: 4, seed: 7, shuffleBuffer: 10, cycleLength: 2 };

test("train batches have the batch size and the files' widths", () => {
  const batch = trainBatches(OPTIONS).next().value;
  assert.deepEqual([batch.count, batch.maxSeqLength, batch.maxPredictionsPerSeq], [4, SEQ, PRED]);
  assert.equal(batch.input_ids.length, 4 * SEQ);
  assert.equal(batch.masked_lm_weights.length, 4 * PRED);
  assert.equal(batch.next_sentence_labels.length, 4);
});

test("reading one file at a time without a shuffle buffer, each pass holds every sample exactly once", () => {
  // (With several files open, the next pass's first files start while this pass's last ones finish.)
  const ids = takeIds(trainBatches({ ...OPTIONS, batchSize: 3, shuffleBuffer: 1, cycleLength: 1 }), 22).flat();
  const everySample = SIZES.flatMap((size, file) => Array.from({ length: size }, (_, i) => sampleId(file, i))).sort();
  assert.deepEqual(ids.slice(0, 33).sort(), everySample, "first pass");
  assert.deepEqual(ids.slice(33, 66).sort(), everySample, "second pass");
});

test("samples come round-robin from cycleLength files, each read front to back", () => {
  const ids = takeIds(trainBatches({ ...OPTIONS, batchSize: 8, shuffleBuffer: 1, cycleLength: 2 }), 1).flat();
  const files = ids.map((id) => Math.floor((id - 1000) / 100));
  assert.deepEqual(files.slice(0, 8), [files[0], files[1], files[0], files[1], files[0], files[1], files[0], files[1]]);
  assert.notEqual(files[0], files[1]);
  assert.deepEqual(
    ids.filter((_, i) => i % 2 === 0).map((id) => id % 100),
    [0, 1, 2, 3],
  );
});

test("each pass visits the files in a new seeded order", () => {
  // One file at a time and no shuffle buffer: a batch of 33 is exactly one pass.
  const passes = takeIds(trainBatches({ ...OPTIONS, batchSize: 33, shuffleBuffer: 1, cycleLength: 1 }), 4);
  const fileOrders = passes.map((ids) =>
    ids.map((id) => Math.floor((id - 1000) / 100)).filter((file, i, files) => i === 0 || files[i - 1] !== file),
  );
  for (const order of fileOrders) assert.deepEqual([...order].sort(), [0, 1, 2, 3]);
  assert.ok(new Set(fileOrders.map((order) => order.join())).size > 1, JSON.stringify(fileOrders));
});

test("the shuffle buffer takes samples out of file order", () => {
  const unshuffled = takeIds(trainBatches({ ...OPTIONS, shuffleBuffer: 1 }), 3).flat();
  const shuffled = takeIds(trainBatches(OPTIONS), 3).flat();
  assert.notDeepEqual(shuffled, unshuffled);
  assert.equal(new Set(shuffled).size, shuffled.length, "no sample twice within the first pass");
});

test("the same seed gives the same batches, another seed other batches", () => {
  const first = takeIds(trainBatches(OPTIONS), 20);
  assert.deepEqual(takeIds(trainBatches(OPTIONS), 20), first);
  assert.notDeepEqual(takeIds(trainBatches({ ...OPTIONS, seed: 8 }), 20), first);
});

test("starting at step k yields the batches an uninterrupted run yields from step k", () => {
  const batches = trainBatches(OPTIONS);
  const uninterrupted = Array.from({ length: 30 }, () => batches.next().value);
  for (const k of [1, 9, 17, 25]) {
    const resumed = trainBatches({ ...OPTIONS, startStep: k });
    for (let step = k; step < 30; step++)
      assert.deepEqual(resumed.next().value, uninterrupted[step], `step ${step} after resuming at ${k}`);
  }
});

test("the train sample order is computed from file sample counts alone", () => {
  const order = new TrainSampleOrder(
    SIZES.length,
    (file) => SIZES[file]!,
    OPTIONS.seed,
    OPTIONS.shuffleBuffer!,
    OPTIONS.cycleLength!,
  );
  const fromCounts = Array.from({ length: 40 }, () => {
    const ref = order.next();
    return sampleId(Math.floor(ref / 2 ** 32), ref % 2 ** 32);
  });
  assert.deepEqual(fromCounts, takeIds(trainBatches(OPTIONS), 10).flat());
});

test("TFRecord files give the same batches as shards of the same samples", () => {
  const tfrecords = makeFiles(SIZES, "tfrecord");
  assert.deepEqual(takeIds(trainBatches({ ...OPTIONS, files: tfrecords }), 12), takeIds(trainBatches(OPTIONS), 12));
});

test("train files of different widths are refused, naming the file", () => {
  const other = join(scratchDir("loader-"), "wide");
  writeShard(other, fakeBatch(3, SEQ * 2, PRED, 0));
  assert.throws(
    () => takeIds(trainBatches({ ...OPTIONS, files: [...FILES, other] }), 20),
    (error: unknown) => {
      assert.ok(error instanceof LoaderError);
      assert.match(
        error.message,
        new RegExp(`^${other}: max_seq_length/max_predictions_per_seq 32/3, but .* has 16/3`),
      );
      return true;
    },
  );
});

test("a loader over only empty files is an error rather than an endless loop", () => {
  const empty = makeFiles([0, 0]);
  assert.throws(() => trainBatches({ ...OPTIONS, files: empty }).next(), /every train file is empty/);
});

test("an empty TFRecord file among the train files is skipped, whatever its (unknown) widths", () => {
  const [empty] = makeFiles([0], "tfrecord");
  const ids = takeIds(trainBatches({ ...OPTIONS, files: [empty!, ...FILES] }), 10).flat();
  assert.equal(ids.length, 40);
});

test("a batch size that is not a positive integer is refused", () => {
  assert.throws(
    () => trainBatches({ ...OPTIONS, batchSize: 0 }).next(),
    /batch size must be a positive integer, got 0/,
  );
  assert.throws(
    () => evalBatches({ files: FILES, batchSize: 2.5 }).next(),
    /batch size must be a positive integer, got 2.5/,
  );
});

test("eval batches give the samples in file order, wrapping around", () => {
  const ids = takeIds(evalBatches({ files: FILES, batchSize: 10 }), 4).flat();
  const everySample = SIZES.flatMap((size, file) => Array.from({ length: size }, (_, i) => sampleId(file, i)));
  assert.deepEqual(ids, [...everySample, ...everySample.slice(0, 7)]);
});

test("eval batches started at step k equal an uninterrupted run's", () => {
  const uninterrupted = takeIds(evalBatches({ files: FILES, batchSize: 5 }), 12);
  assert.deepEqual(takeIds(evalBatches({ files: FILES, batchSize: 5, startStep: 7 }), 5), uninterrupted.slice(7));
});

test("fake batches are valid samples: [CLS] A [SEP] B [SEP], masks, ascending masked positions", () => {
  const batch = fakeBatch(32, 64, 10, 3);
  for (let row = 0; row < 32; row++) {
    const ids = batch.input_ids.subarray(row * 64, (row + 1) * 64);
    const mask = batch.input_mask.subarray(row * 64, (row + 1) * 64);
    const segments = batch.segment_ids.subarray(row * 64, (row + 1) * 64);
    const length = mask.indexOf(0) === -1 ? 64 : mask.indexOf(0);
    assert.ok(length >= 5 && mask.subarray(length).every((m) => m === 0));
    assert.equal(ids[0], 101);
    assert.equal(ids[length - 1], 102);
    assert.ok(ids.subarray(length).every((id) => id === 0));
    assert.ok(ids.subarray(0, length).every((id) => id >= 101 && id < 30522));
    const firstSep = ids.indexOf(102);
    assert.ok(firstSep >= 2 && firstSep <= length - 3);
    assert.deepEqual(
      [...segments.subarray(0, length)],
      Array.from({ length }, (_, i) => (i > firstSep ? 1 : 0)),
    );
    const weights = batch.masked_lm_weights.subarray(row * 10, (row + 1) * 10);
    const predictions = weights.filter((w) => w === 1).length;
    assert.ok(predictions >= 1 && weights.subarray(predictions).every((w) => w === 0));
    const positions = [...batch.masked_lm_positions.subarray(row * 10, row * 10 + predictions)];
    assert.deepEqual(
      positions,
      [...positions].sort((a, b) => a - b),
    );
    assert.equal(new Set(positions).size, predictions);
    for (const [i, position] of positions.entries()) {
      assert.ok(position > 0 && position < length - 1 && position !== firstSep);
      assert.equal(ids[position], 103);
      assert.ok(batch.masked_lm_ids[row * 10 + i]! >= 999);
    }
    assert.ok(batch.next_sentence_labels[row] === 0 || batch.next_sentence_labels[row] === 1);
  }
});

test("fake batches are deterministic for a seed", () => {
  assert.deepEqual(fakeBatch(4, 32, 5, 11), fakeBatch(4, 32, 5, 11));
  assert.notDeepEqual(fakeBatch(4, 32, 5, 11).input_ids, fakeBatch(4, 32, 5, 12).input_ids);
});

test("listSampleFiles lists a folder's files sorted, without temp or hidden files", () => {
  const dir = scratchDir("loader-");
  for (const name of ["part-00002", "part-00000"]) writeShard(join(dir, name), fakeBatch(2, SEQ, PRED, 0));
  for (const name of [".part-00001.123.abc.tmp", "part-00003.tmp"]) writeFileSync(join(dir, name), "");
  assert.deepEqual(listSampleFiles(dir), [join(dir, "part-00000"), join(dir, "part-00002")]);
});

/** A folder of three small shards, as preprocessing leaves train/. */
function shardFolder(): { dir: string; paths: string[] } {
  const dir = scratchDir("loader-");
  const paths = [0, 1, 2].map((part) => join(dir, `part-0000${part}`));
  paths.forEach((path, part) => writeShard(path, fakeBatch(4, SEQ, PRED, part)));
  return { dir, paths };
}

test("an empty file among the sample files fails the listing, naming it", () => {
  const { dir, paths } = shardFolder();
  writeFileSync(paths[1]!, "");
  assert.throws(() => listSampleFiles(dir), {
    name: "LoaderError",
    message: `${paths[1]}: an empty file among the sample files of ${dir}`,
  });
});

test("a truncated shard fails the listing (before any training), naming it", () => {
  const { dir, paths } = shardFolder();
  const bytes = readFileSync(paths[2]!);
  writeFileSync(paths[2]!, bytes.subarray(0, bytes.length - 10));
  assert.throws(() => listSampleFiles(dir), {
    message: new RegExp(
      `^${paths[2]}: tensor "\\w+", byte offset \\d+: data ends at byte offset \\d+, past the end of the file`,
    ),
  });
});

test("a shard of other widths than the first fails the listing, naming both", () => {
  const { dir, paths } = shardFolder();
  writeShard(paths[1]!, fakeBatch(4, SEQ * 2, PRED, 1));
  assert.throws(() => listSampleFiles(dir), {
    name: "LoaderError",
    message: `${paths[1]}: max_seq_length/max_predictions_per_seq 32/3, but ${paths[0]} has 16/3`,
  });
});

test("a flipped byte in a train shard fails the batch that opens it, naming the file and field", () => {
  const { paths } = shardFolder();
  const { byteOffset } = readSafetensorsHeader(paths[1]!).entries.input_mask!;
  const bytes = readFileSync(paths[1]!);
  bytes[byteOffset + 3]! ^= 1;
  writeFileSync(paths[1]!, bytes);
  assert.throws(() => takeIds(trainBatches({ ...OPTIONS, files: paths }), 3), {
    message: new RegExp(`^${paths[1]}: tensor "input_mask", byte offset ${byteOffset}: the CRC-32C`),
  });
});

test("an eval sample with a token id outside the vocab fails its batch, naming file, record and offset", () => {
  const { paths } = shardFolder();
  const samples = fakeBatch(4, SEQ, PRED, 2);
  samples.input_ids[SEQ * 2 + 1] = 40000;
  writeShard(paths[2]!, samples, { vocab_size: "30522" });
  const batches = evalBatches({ files: paths, batchSize: 4 });
  takeIds(batches, 2);
  assert.throws(() => batches.next(), {
    message: new RegExp(
      `^${paths[2]}: input_ids: record 2, value 1, byte offset \\d+: 40000 is not a token id below the vocab size 30522`,
    ),
  });
});

test("prefetchBatches on a worker yields the same train batches as trainBatches", async () => {
  const expected = trainBatches({ ...OPTIONS, startStep: 3 });
  const loader = prefetchBatches({ kind: "train", ...OPTIONS, startStep: 3 }, 3);
  let step = 0;
  for await (const batch of loader) {
    assert.deepEqual(batch, expected.next().value, `batch ${step}`);
    if (++step === 12) break;
  }
  assert.deepEqual(await loader.next(), { done: true, value: undefined }, "closed after break");
});

test("prefetchBatches on a worker yields the same eval batches as evalBatches", async () => {
  const expected = evalBatches({ files: FILES, batchSize: 6 });
  const loader = prefetchBatches({ kind: "eval", files: FILES, batchSize: 6 });
  for (let step = 0; step < 8; step++) assert.deepEqual((await loader.next()).value, expected.next().value);
  await loader.close();
});

test("a loader error on the worker rejects next() with the file named", async () => {
  const missing = join(tmpdir(), "tsgrad-no-such-dir", "part-00000");
  const loader = prefetchBatches({ kind: "eval", files: [missing], batchSize: 2 });
  await assert.rejects(loader.next(), (error: unknown) => error instanceof Error && error.message.includes(missing));
  await loader.close();
});

test("the parts of a data-parallel job's batches, side by side, are the whole batches in order", () => {
  const whole = takeIds(trainBatches({ ...OPTIONS, batchSize: 6, startStep: 3 }), 5);
  for (const count of [2, 3]) {
    const parts = Array.from({ length: count }, (_, index) =>
      takeIds(trainBatches({ ...OPTIONS, batchSize: 6, startStep: 3, part: { index, count } }), 5),
    );
    for (let step = 0; step < 5; step++)
      assert.deepEqual(
        parts.flatMap((part) => part[step]!),
        whole[step],
        `batch ${step + 3} split in ${count}`,
      );
  }
  assert.throws(
    () => trainBatches({ ...OPTIONS, batchSize: 6, part: { index: 0, count: 4 } }).next(),
    /6 does not split into 4/,
  );
  assert.throws(() => trainBatches({ ...OPTIONS, part: { index: 2, count: 2 } }).next(), /part 2 of 2/);
});
