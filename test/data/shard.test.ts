import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { emptySamples, readShard, ShardError, ShardFile, writeShard } from "../../mlperf/bert/data/shard.ts";
import { SAMPLE_FIELDS, type SampleColumns } from "../../mlperf/bert/data/samples.ts";
import { readSafetensorsFile, writeSafetensorsFile } from "../../src/io/safetensors.ts";
import { samplesFromJsonl } from "./sample-helpers.ts";
import { scratchDir } from "../scratch.ts";

const FIXTURE = new URL("../fixtures/bert-preprocess/samples-seq128-pred20-dupe2.jsonl", import.meta.url);
const tempDir = () => scratchDir("shard-");

test("a shard round-trips the reference samples value for value", () => {
  const samples = samplesFromJsonl(readFileSync(FIXTURE, "utf8"), 128, 20);
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, samples);
  const read = readShard(path);
  assert.equal(read.count, samples.count);
  assert.equal(read.maxSeqLength, 128);
  assert.equal(read.maxPredictionsPerSeq, 20);
  for (const field of SAMPLE_FIELDS) assert.deepEqual(read[field], samples[field], field);
});

test("a shard stores token ids as U16 and masks, weights and labels as U8", () => {
  const samples = samplesFromJsonl(readFileSync(FIXTURE, "utf8"), 128, 20);
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, samples);
  const { tensors, metadata } = readSafetensorsFile(path);
  const dtypes = Object.fromEntries(SAMPLE_FIELDS.map((field) => [field, tensors[field]!.dtype]));
  assert.deepEqual(dtypes, {
    input_ids: "U16",
    input_mask: "U8",
    segment_ids: "U8",
    masked_lm_positions: "U16",
    masked_lm_ids: "U16",
    masked_lm_weights: "U8",
    next_sentence_labels: "U8",
  });
  assert.deepEqual(tensors.next_sentence_labels!.shape, [samples.count]);
  assert.deepEqual(metadata, {
    format: "tsgrad-bert-samples",
    version: "1",
    max_seq_length: "128",
    max_predictions_per_seq: "20",
    count: String(samples.count),
  });
});

test("an empty shard round-trips", () => {
  const samples = samplesFromJsonl("", 128, 20);
  const path = join(tempDir(), "empty.safetensors");
  writeShard(path, samples);
  assert.equal(readShard(path).count, 0);
});

test("writeShard refuses a token id that does not fit U16, naming field and sample", () => {
  const samples = samplesFromJsonl(readFileSync(FIXTURE, "utf8"), 128, 20);
  samples.input_ids[128 * 3 + 5] = 70000;
  const dir = tempDir();
  assert.throws(
    () => writeShard(join(dir, "bad.safetensors"), samples),
    (error: unknown) => {
      assert.ok(error instanceof ShardError);
      assert.match(error.message, /input_ids: sample 3, index 5: 70000/);
      return true;
    },
  );
  assert.deepEqual(readdirSync(dir), [], "nothing half-written");
});

test("writeShard refuses a fractional masked_lm_weight", () => {
  const samples = samplesFromJsonl(readFileSync(FIXTURE, "utf8"), 128, 20);
  samples.masked_lm_weights[2] = 0.5;
  assert.throws(
    () => writeShard(join(tempDir(), "bad.safetensors"), samples),
    /masked_lm_weights: sample 0, index 2: 0.5/,
  );
});

test("writeShard refuses columns whose length does not match count", () => {
  const samples: SampleColumns = { ...samplesFromJsonl("", 128, 20), count: 1 };
  assert.throws(
    () => writeShard(join(tempDir(), "bad.safetensors"), samples),
    /input_ids: has 0 values, expected 128 for 1 samples/,
  );
});

test("readShard refuses a safetensors file of another format", () => {
  const path = join(tempDir(), "other.safetensors");
  writeSafetensorsFile(path, { w: { dtype: "F32", shape: [1], data: new Float32Array(1) } }, { format: "pt" });
  assert.throws(
    () => readShard(path),
    (error: unknown) => error instanceof ShardError && error.message.includes(`${path}: __metadata__.format`),
  );
});

test("readShard refuses a field whose shape disagrees with the metadata", () => {
  const samples = samplesFromJsonl(readFileSync(FIXTURE, "utf8"), 128, 20);
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, samples);
  const { tensors, metadata } = readSafetensorsFile(path);
  writeSafetensorsFile(path, tensors, { ...metadata, max_predictions_per_seq: "19" });
  assert.throws(() => readShard(path), /masked_lm_positions: shape \[229, 20\], expected \[229, 19\]/);
});

test("readShard refuses a field stored with the wrong dtype", () => {
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, samplesFromJsonl(readFileSync(FIXTURE, "utf8"), 128, 20));
  const { tensors, metadata } = readSafetensorsFile(path);
  writeSafetensorsFile(
    path,
    {
      ...tensors,
      input_mask: {
        dtype: "I8",
        shape: tensors.input_mask!.shape,
        data: new Int8Array(tensors.input_mask!.data.length),
      },
    },
    metadata,
  );
  assert.throws(() => readShard(path), /input_mask: dtype I8, expected U8/);
});

test("readShard names a missing field", () => {
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, samplesFromJsonl(readFileSync(FIXTURE, "utf8"), 128, 20));
  const { tensors, metadata } = readSafetensorsFile(path);
  delete tensors.segment_ids;
  writeSafetensorsFile(path, tensors, metadata);
  assert.throws(() => readShard(path), /segment_ids: missing/);
});

test("readShard errors on a file that is not safetensors, naming it", () => {
  const path = join(tempDir(), "junk.safetensors");
  writeFileSync(path, "not a shard at all");
  assert.throws(
    () => readShard(path),
    (error: unknown) => error instanceof Error && error.message.startsWith(path),
  );
});

test("ShardFile reads single samples by index, equal to the rows readShard returns", () => {
  const samples = samplesFromJsonl(readFileSync(FIXTURE, "utf8"), 128, 20);
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, samples);
  const shard = new ShardFile(path);
  assert.equal(shard.count, samples.count);
  const target = samplesFromJsonl(readFileSync(FIXTURE, "utf8").split("\n").slice(0, 2).join("\n"), 128, 20);
  shard.readInto(200, target, 1);
  shard.close();
  assert.deepEqual(target.input_ids.subarray(128), samples.input_ids.subarray(200 * 128, 201 * 128));
  assert.deepEqual(target.masked_lm_positions.subarray(20), samples.masked_lm_positions.subarray(200 * 20, 201 * 20));
  assert.deepEqual(target.masked_lm_weights.subarray(20), samples.masked_lm_weights.subarray(200 * 20, 201 * 20));
  assert.equal(target.next_sentence_labels[1], samples.next_sentence_labels[200]);
});

test("ShardFile refuses an index outside the shard", () => {
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, samplesFromJsonl(readFileSync(FIXTURE, "utf8"), 128, 20));
  const shard = new ShardFile(path);
  assert.throws(() => shard.readInto(229, samplesFromJsonl("", 128, 20), 0), /sample: index 229 is outside 0\.\.228/);
  shard.close();
});

test("a shard of more samples than one written block round-trips (blocks stitched in order)", () => {
  const count = 9001; // three blocks of rows, the last short
  const samples = emptySamples(count, { maxSeqLength: 8, maxPredictionsPerSeq: 3 });
  for (let i = 0; i < samples.input_ids.length; i++) samples.input_ids[i] = (i * 7919) % 65536;
  for (let i = 0; i < samples.input_mask.length; i++) samples.input_mask[i] = (i >> 3) % 2;
  for (let i = 0; i < samples.masked_lm_positions.length; i++) samples.masked_lm_positions[i] = i % 8;
  for (let i = 0; i < samples.masked_lm_ids.length; i++) samples.masked_lm_ids[i] = (i * 31) % 30522;
  for (let i = 0; i < count; i++) samples.next_sentence_labels[i] = i % 3 === 0 ? 1 : 0;
  const path = join(tempDir(), "big.safetensors");
  writeShard(path, samples);
  const read = readShard(path);
  for (const field of SAMPLE_FIELDS) assert.deepEqual(read[field], samples[field], field);
});
