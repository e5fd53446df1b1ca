import { mock, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { emptySamples, readShard, ShardError, ShardFile, writeShard } from "../../mlperf/bert/data/shard.ts";
import { SAMPLE_FIELDS, type SampleColumns } from "../../mlperf/bert/data/samples.ts";
import {
  readSafetensorsFile,
  readSafetensorsHeader,
  SafetensorsError,
  writeSafetensorsFile,
} from "../../src/io/safetensors.ts";
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
    version: "2",
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

// ---- integrity: checksums and value ranges -------------------------------------------------

const fixtureSamples = () => samplesFromJsonl(readFileSync(FIXTURE, "utf8"), 128, 20);

/** Flips one bit of the byte at `byteOffset` of the file at `path`. */
function flipByte(path: string, byteOffset: number): void {
  const bytes = readFileSync(path);
  bytes[byteOffset]! ^= 0x04;
  writeFileSync(path, bytes);
}

/** Runs `read` with console.error captured; returns what it printed. */
function capturingWarnings(read: () => void): string[] {
  const warn = mock.method(console, "error", () => {});
  try {
    read();
  } finally {
    warn.mock.restore();
  }
  return warn.mock.calls.map((call) => String(call.arguments[0]));
}

test("a shard records the settings that made it in its metadata", () => {
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, fixtureSamples(), { vocab_size: "30522", random_seed: "12345", dupe_factor: "2" });
  const { metadata, checksummed } = readSafetensorsFile(path);
  assert.deepEqual([metadata.vocab_size, metadata.random_seed, metadata.dupe_factor], ["30522", "12345", "2"]);
  assert.equal(checksummed, true);
  const shard = new ShardFile(path);
  assert.equal(shard.vocabSize, 30522);
  shard.close();
});

test("a setting that would overwrite the format's own metadata is refused", () => {
  assert.throws(
    () => writeShard(join(tempDir(), "part.safetensors"), fixtureSamples(), { count: "3" }),
    /__metadata__\.count: is the format's, not a setting/,
  );
});

test("a flipped byte in a shard is an error naming the file and the field, on opening and on reading it whole", () => {
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, fixtureSamples());
  const { byteOffset } = readSafetensorsHeader(path).entries.segment_ids!;
  flipByte(path, byteOffset + 128 * 100 + 7);
  const corrupt = (error: unknown) =>
    error instanceof SafetensorsError &&
    error.message.startsWith(`${path}: tensor "segment_ids", byte offset ${byteOffset}: the CRC-32C`);
  assert.throws(() => new ShardFile(path), corrupt);
  assert.throws(() => readShard(path), corrupt);
});

test("a token id at or above the recorded vocab size is an error naming the file, record and byte offset", () => {
  const samples = fixtureSamples();
  samples.input_ids[128 * 17 + 5] = 30600;
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, samples, { vocab_size: "30522" });
  const at = readSafetensorsHeader(path).entries.input_ids!.byteOffset + (128 * 17 + 5) * 2;
  assert.equal(readFileSync(path).readUInt16LE(at), 30600, "the offset named is the value's");
  const message = `${path}: input_ids: record 17, value 5, byte offset ${at}: 30600 is not a token id below the vocab size 30522`;
  const shard = new ShardFile(path);
  const target = emptySamples(1, shard);
  shard.readInto(16, target, 0);
  assert.throws(() => shard.readInto(17, target, 0), { name: "ShardError", message });
  shard.close();
  assert.throws(() => readShard(path), { name: "ShardError", message });
});

test("a masked position at or above max_seq_length is an error naming the record", () => {
  const samples = fixtureSamples();
  samples.masked_lm_positions[20 * 3] = 128;
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, samples);
  assert.throws(
    () => readShard(path),
    /masked_lm_positions: record 3, value 0, byte offset \d+: 128 is not a position below max_seq_length 128/,
  );
});

/** Rewrites the shard at `path` as version 1 wrote it: no checksums, no settings; `edit` may change its data. */
function rewriteAsVersion1(path: string, edit: (tensors: ReturnType<typeof readSafetensorsFile>["tensors"]) => void) {
  const { tensors, metadata } = readSafetensorsFile(path);
  edit(tensors);
  writeSafetensorsFile(path, tensors, { ...metadata, version: "1" }, { checksums: false });
}

test("version 1 shards (no checksums) read with one warning per process, their values still checked", () => {
  const dir = tempDir();
  const [first, second] = [join(dir, "a.safetensors"), join(dir, "b.safetensors")];
  for (const path of [first, second]) {
    writeShard(path, fixtureSamples());
    rewriteAsVersion1(path, () => {});
  }
  const warnings = capturingWarnings(() => {
    assert.equal(readShard(first).count, 229);
    const shard = new ShardFile(second);
    assert.equal(shard.count, 229);
    shard.close();
  });
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, new RegExp(`^warning: ${first} is a version 1 sample shard, without checksums`));

  rewriteAsVersion1(second, (tensors) => {
    (tensors.input_mask!.data as Uint8Array)[128 * 4 + 2] = 7;
  });
  assert.throws(() => readShard(second), /input_mask: record 4, value 2, byte offset \d+: 7 is not 0 or 1/);
});

test("a version 2 shard without checksums, or a later version, is refused", () => {
  const path = join(tempDir(), "part.safetensors");
  writeShard(path, fixtureSamples());
  const { tensors, metadata } = readSafetensorsFile(path);
  writeSafetensorsFile(path, tensors, metadata, { checksums: false });
  assert.throws(() => new ShardFile(path), /__metadata__: a version 2 shard without checksums/);
  writeSafetensorsFile(path, tensors, { ...metadata, version: "3" });
  assert.throws(() => new ShardFile(path), /__metadata__\.version: expected "2" \(or "1"\), got "3"/);
});
