import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  detectSampleFormat,
  openSampleFile,
  readSamples,
  sampleJson,
  summarize,
} from "../../mlperf/bert/data/inspect.ts";
import { emptySamples, writeShard } from "../../mlperf/bert/data/shard.ts";
import { writeTFRecordSamples } from "../../mlperf/bert/data/tfrecord.ts";
import { SAMPLE_FIELDS } from "../../mlperf/bert/data/samples.ts";
import { samplesFromJsonl } from "./sample-helpers.ts";
import { scratchDir } from "../scratch.ts";

const FIXTURE = new URL("../fixtures/bert-preprocess/samples-seq128-pred20-dupe2.jsonl", import.meta.url);
const FIXTURE_LINES = readFileSync(FIXTURE, "utf8")
  .split("\n")
  .filter((line) => line.length > 0);
const INSPECT = new URL("../../mlperf/bert/data/inspect.ts", import.meta.url).pathname;
const samples = samplesFromJsonl(FIXTURE_LINES.join("\n"), 128, 20);
const dir = scratchDir("inspect-");
// Extensions that lie: detection must look at the content.
const shardPath = join(dir, "samples.tfrecord");
const tfrecordPath = join(dir, "samples.safetensors");
writeShard(shardPath, samples);
writeTFRecordSamples(tfrecordPath, samples);

function inspect(...args: string[]): string {
  return execFileSync(process.execPath, ["--import", "tsx", INSPECT, ...args], { encoding: "utf8" });
}

test("format detection looks at the content, not the extension", () => {
  assert.equal(detectSampleFormat(shardPath), "shard");
  assert.equal(detectSampleFormat(tfrecordPath), "tfrecord");
});

test("a file that is neither format is an error naming it", () => {
  const path = join(dir, "notes.txt");
  writeFileSync(path, "just some text, long enough to have a header");
  assert.throws(() => detectSampleFormat(path), {
    name: "ShardError",
    message: `${path}: format: neither a tsgrad sample shard (safetensors) nor a TFRecord file`,
  });
});

test("a shard cut inside its header is still a shard, whose reader says where it ends", () => {
  const path = join(dir, "cut.safetensors");
  writeFileSync(path, readFileSync(shardPath).subarray(0, 300));
  assert.equal(detectSampleFormat(path), "shard");
  assert.throws(() => readSamples(path), {
    name: "SafetensorsError",
    message: /runs past the end of the file \(300 bytes\)/,
  });
});

test("readSamples gives the same columns from a shard and from a TFRecord", () => {
  const fromShard = readSamples(shardPath);
  const fromTFRecord = readSamples(tfrecordPath);
  for (const field of SAMPLE_FIELDS) assert.deepEqual(fromShard[field], fromTFRecord[field], field);
});

test("openSampleFile reads a sample by index from either format", () => {
  for (const path of [shardPath, tfrecordPath]) {
    const file = openSampleFile(path);
    const row = emptySamples(1, file);
    file.readInto(57, row, 0);
    file.close();
    assert.equal(sampleJson(row, 0), JSON.stringify(JSON.parse(FIXTURE_LINES[57]!)), path);
  }
});

test("sampleJson writes the reference keys in the reference order, weights as 1/0 numbers", () => {
  const line = sampleJson(samples, 0);
  assert.deepEqual(Object.keys(JSON.parse(line)), [...SAMPLE_FIELDS]);
  assert.match(line, /"masked_lm_weights":\[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0\],"next_sentence_labels":\[0\]\}$/);
});

test("inspect --jsonl prints every sample of a shard as the reference fixture has it", () => {
  const expected = FIXTURE_LINES.map((line) => `${JSON.stringify(JSON.parse(line))}\n`).join("");
  assert.equal(inspect(shardPath, "--jsonl"), expected);
});

test("inspect --jsonl --limit prints the first samples of a TFRecord", () => {
  const expected = FIXTURE_LINES.slice(0, 2)
    .map((line) => `${JSON.stringify(JSON.parse(line))}\n`)
    .join("");
  assert.equal(inspect(tfrecordPath, "--jsonl", "--limit", "2"), expected);
});

test("summarize counts tokens, predictions and random next sentences as the fixture has them", () => {
  const rows = FIXTURE_LINES.map((line) => JSON.parse(line) as Record<string, number[]>);
  const total = (field: string) => rows.reduce((sum, row) => sum + row[field]!.reduce((a, b) => a + b, 0), 0);
  const mean = (field: string) => Number((total(field) / rows.length).toFixed(2));
  assert.deepEqual(summarize(tfrecordPath), {
    file: tfrecordPath,
    format: "TFRecord of tf.train.Example",
    samples: 229,
    max_seq_length: 128,
    max_predictions_per_seq: 20,
    "tokens per sample (mean)": mean("input_mask"),
    "masked predictions per sample (mean)": mean("masked_lm_weights"),
    "random next sentence (fraction)": mean("next_sentence_labels"),
    "largest token id": Math.max(...rows.flatMap((row) => row.input_ids!)),
  });
});

test("inspect without options prints a summary", () => {
  const copy = join(dir, "copy.bin");
  copyFileSync(shardPath, copy);
  const summary = inspect(copy);
  assert.match(
    summary,
    /^file: .*copy\.bin\nformat: tsgrad sample shard \(safetensors\)\nsamples: 229\nmax_seq_length: 128\nmax_predictions_per_seq: 20\n/,
  );
  assert.match(summary, /tokens per sample \(mean\): [\d.]+\n/);
});

test("inspect exits 1 with the reader's error on a corrupt file and 2 on bad options", () => {
  const corrupt = join(dir, "corrupt.tfrecord");
  const bytes = readFileSync(tfrecordPath);
  bytes[100]! ^= 0xff;
  writeFileSync(corrupt, bytes);
  const failed = spawnSync(process.execPath, ["--import", "tsx", INSPECT, corrupt], { encoding: "utf8" });
  assert.equal(failed.status, 1);
  assert.equal(
    failed.stderr,
    `inspect: ${corrupt}: byte offset 0: bad CRC of the ${bytes.readUInt32LE(0)}-byte record data\n`,
  );
  const usage = spawnSync(process.execPath, ["--import", "tsx", INSPECT, corrupt, "--limit", "x"], {
    encoding: "utf8",
  });
  assert.equal(usage.status, 2);
  assert.match(usage.stderr, /--limit needs a non-negative integer/);
});
