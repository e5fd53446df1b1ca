import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { maskedCrc32c } from "../../src/io/crc32c.ts";
import {
  decodeExample,
  encodeExample,
  encodeTFRecord,
  encodeTFRecordSamples,
  readTFRecords,
  readTFRecordSamples,
  TFRecordError,
  TFRecordSampleFile,
  writeTFRecordSamples,
  type ExampleFeature,
} from "../../mlperf/bert/data/tfrecord.ts";
import { SAMPLE_FIELDS } from "../../mlperf/bert/data/samples.ts";
import { samplesFromJsonl } from "./sample-helpers.ts";
import { scratchDir } from "../scratch.ts";

// Written by test/fixtures/data/generate.py (pure-Python CRC-32C and protobuf encoding): the
// first 3 samples of the seq128 fixture; record 1 has input_mask unpacked, record 2 lists
// its features in reverse order. Offsets and lengths as the script printed them.
const REFERENCE = new URL("../fixtures/data/reference.tfrecord", import.meta.url).pathname;
const RECORDS = [
  { byteOffset: 0, length: 823 },
  { byteOffset: 839, length: 949 },
  { byteOffset: 1804, length: 825 },
];
const SAMPLES_TEXT = readFileSync(
  new URL("../fixtures/bert-preprocess/samples-seq128-pred20-dupe2.jsonl", import.meta.url),
  "utf8",
);
const firstSamples = (count: number) => samplesFromJsonl(SAMPLES_TEXT.split("\n").slice(0, count).join("\n"), 128, 20);
/** Copies of the reference file's record data (readTFRecords' views are reused). */
function referenceRecords(): Uint8Array[] {
  const records: Uint8Array[] = [];
  for (const { data } of readTFRecords(REFERENCE)) records.push(data.slice());
  return records;
}
const tempFile = (name: string) => join(scratchDir("tfrecord-"), name);

function throwsTFRecord(run: () => unknown, path: string, byteOffset: number, pattern: RegExp): void {
  assert.throws(run, (error: unknown) => {
    assert.ok(error instanceof TFRecordError, String(error));
    assert.equal(error.path, path);
    assert.equal(error.byteOffset, byteOffset);
    assert.ok(error.message.startsWith(`${path}: byte offset ${byteOffset}: `), error.message);
    assert.match(error.message, pattern);
    return true;
  });
}

test("maskedCrc32c matches the values computed by the independent Python CRC in generate.py", () => {
  const encode = (text: string) => new TextEncoder().encode(text);
  assert.equal(maskedCrc32c(encode("")), 0xa282ead8);
  assert.equal(maskedCrc32c(encode("a")), 0x28e46e78);
  assert.equal(maskedCrc32c(encode("123456789")), 0xc78ab0e5);
  assert.equal(maskedCrc32c(encode("hello, tfrecord")), 0xc3f54d9f);
});

test("readTFRecords finds each record of the Python-written file at its offset", () => {
  const records = [...readTFRecords(REFERENCE)].map(({ data, byteOffset }) => ({ byteOffset, length: data.length }));
  assert.deepEqual(records, RECORDS);
});

test("readTFRecordSamples reads packed, unpacked and reordered features as the reference samples", () => {
  const samples = readTFRecordSamples(REFERENCE);
  const expected = firstSamples(3);
  assert.equal(samples.count, 3);
  assert.equal(samples.maxSeqLength, 128);
  assert.equal(samples.maxPredictionsPerSeq, 20);
  for (const field of SAMPLE_FIELDS) assert.deepEqual(samples[field], expected[field], field);
});

test("encodeTFRecordSamples writes byte for byte what the Python encoder wrote for a packed record", () => {
  const reference = readFileSync(REFERENCE);
  assert.deepEqual(encodeTFRecordSamples(firstSamples(1)), new Uint8Array(reference.subarray(0, 839)));
});

test("writeTFRecordSamples and readTFRecordSamples round-trip the whole fixture", () => {
  const samples = samplesFromJsonl(SAMPLES_TEXT, 128, 20);
  const path = tempFile("all.tfrecord");
  writeTFRecordSamples(path, samples);
  const read = readTFRecordSamples(path);
  assert.equal(read.count, 229);
  for (const field of SAMPLE_FIELDS) assert.deepEqual(read[field], samples[field], field);
});

test("TFRecordSampleFile reads single samples by index", () => {
  const file = new TFRecordSampleFile(REFERENCE);
  assert.deepEqual([file.count, file.maxSeqLength, file.maxPredictionsPerSeq], [3, 128, 20]);
  const target = firstSamples(1);
  file.readInto(2, target, 0);
  file.close();
  const expected = firstSamples(3);
  for (const field of SAMPLE_FIELDS) {
    const width =
      field === "input_ids" || field === "input_mask" || field === "segment_ids"
        ? 128
        : field === "next_sentence_labels"
          ? 1
          : 20;
    assert.deepEqual(target[field], expected[field].subarray(2 * width, 3 * width), field);
  }
});

test("a bad data CRC is an error naming the file and the record's byte offset", () => {
  const bytes = readFileSync(REFERENCE);
  bytes[839 + 12 + 100]! ^= 0x01;
  const path = tempFile("corrupt.tfrecord");
  writeFileSync(path, bytes);
  throwsTFRecord(() => readTFRecordSamples(path), path, 839, /bad CRC of the 949-byte record data/);
  throwsTFRecord(
    () => new TFRecordSampleFile(path).readInto(1, firstSamples(1), 0),
    path,
    839,
    /bad CRC of the 949-byte record data/,
  );
});

test("a bad length CRC is an error naming the file and the record's byte offset", () => {
  const bytes = readFileSync(REFERENCE);
  bytes[1804 + 9]! ^= 0x80;
  const path = tempFile("corrupt.tfrecord");
  writeFileSync(path, bytes);
  throwsTFRecord(() => readTFRecordSamples(path), path, 1804, /bad CRC of the record length/);
  throwsTFRecord(() => new TFRecordSampleFile(path), path, 1804, /bad CRC of the record length/);
});

test("a truncated record is an error naming the file and the record's byte offset", () => {
  const path = tempFile("truncated.tfrecord");
  writeFileSync(path, readFileSync(REFERENCE).subarray(0, 1804 + 500));
  throwsTFRecord(() => readTFRecordSamples(path), path, 1804, /truncated record: 500 of 841 bytes/);
  throwsTFRecord(() => new TFRecordSampleFile(path), path, 1804, /truncated record: 500 of 841 bytes/);
});

test("a truncated record header is an error naming the file and the byte offset", () => {
  const path = tempFile("truncated.tfrecord");
  writeFileSync(path, readFileSync(REFERENCE).subarray(0, 839 + 5));
  throwsTFRecord(() => readTFRecordSamples(path), path, 839, /truncated record header: 5 of 12 bytes/);
});

test("a record that is not a tf.train.Example is an error naming record and offset", () => {
  const good = encodeTFRecordSamples(firstSamples(1));
  const junk = encodeTFRecord(new Uint8Array([0x0a, 0x50, 0x01]));
  const path = tempFile("junk.tfrecord");
  writeFileSync(path, Buffer.concat([good, junk]));
  throwsTFRecord(
    () => readTFRecordSamples(path),
    path,
    good.length,
    /record 1 is not a valid tf.train.Example: field of 80 bytes/,
  );
});

test("a sample without one of the reference features is an error naming the feature", () => {
  const features = decodeExample(referenceRecords()[0]!);
  features.delete("segment_ids");
  const path = tempFile("missing.tfrecord");
  writeFileSync(path, encodeTFRecord(encodeExample(features)));
  throwsTFRecord(() => readTFRecordSamples(path), path, 0, /record 0: feature segment_ids is missing/);
});

test("a sample whose feature length disagrees with the first record's is an error", () => {
  const path = tempFile("ragged.tfrecord");
  const second = decodeExample(referenceRecords()[1]!);
  second.set("masked_lm_weights", { kind: "float", values: new Array(19).fill(1) });
  const first = encodeTFRecordSamples(firstSamples(1));
  writeFileSync(path, Buffer.concat([first, encodeTFRecord(encodeExample(second))]));
  throwsTFRecord(
    () => readTFRecordSamples(path),
    path,
    first.length,
    /record 1: feature masked_lm_weights has 19 values, expected 20/,
  );
});

test("an empty file holds no samples", () => {
  const path = tempFile("empty.tfrecord");
  writeFileSync(path, new Uint8Array(0));
  assert.equal(readTFRecordSamples(path).count, 0);
  assert.equal(new TFRecordSampleFile(path).count, 0);
});

test("readTFRecords streams records across 1 MiB chunk boundaries and records larger than a chunk", () => {
  const records = [
    new Uint8Array(700_000).fill(1),
    new Uint8Array(900_000).fill(2),
    new Uint8Array(3_000_000).fill(3),
    new Uint8Array(5).fill(4),
  ];
  const path = tempFile("big.tfrecord");
  writeFileSync(path, Buffer.concat(records.map(encodeTFRecord)));
  const read = [];
  // Each record's data is only valid until the next one is read: look at it at once.
  for (const { data, byteOffset } of readTFRecords(path))
    read.push({ length: data.length, first: data[0], last: data.at(-1), byteOffset });
  assert.deepEqual(read, [
    { length: 700_000, first: 1, last: 1, byteOffset: 0 },
    { length: 900_000, first: 2, last: 2, byteOffset: 700_016 },
    { length: 3_000_000, first: 3, last: 3, byteOffset: 1_600_032 },
    { length: 5, first: 4, last: 4, byteOffset: 4_600_048 },
  ]);
});

test("Example int64 lists carry negative values (10-byte varints) and bytes lists", () => {
  const features = new Map<string, ExampleFeature>([
    ["ints", { kind: "int64", values: [0, 1, 127, 128, 2 ** 40, -1, -(2 ** 33)] }],
    ["floats", { kind: "float", values: [0.5, -2] }],
    ["text", { kind: "bytes", values: [new TextEncoder().encode("hi"), new Uint8Array(0)] }],
  ]);
  assert.deepEqual(decodeExample(encodeExample(features)), features);
});

test("a record length far beyond the file is a truncation error, not a huge allocation", () => {
  const path = tempFile("huge-length.tfrecord");
  const header = new Uint8Array(12);
  const view = new DataView(header.buffer);
  view.setBigUint64(0, 2n ** 50n, true);
  view.setUint32(8, maskedCrc32c(header.subarray(0, 8)), true);
  writeFileSync(path, Buffer.concat([readFileSync(REFERENCE), header]));
  throwsTFRecord(() => readTFRecordSamples(path), path, 2645, /truncated record: 12 of 1125899906842640 bytes/);
});

test("a sample value out of range is an error naming the file, the record and its byte offset", () => {
  const samples = samplesFromJsonl(SAMPLES_TEXT, 128, 20);
  samples.masked_lm_positions[20 * 2 + 1] = 128;
  const path = tempFile("positions.tfrecord");
  writeTFRecordSamples(path, samples);
  const third = [...readTFRecords(path)][2]!.byteOffset;
  const pattern = /record 2: feature masked_lm_positions value 1: 128 is not a position below max_seq_length 128/;
  throwsTFRecord(() => readTFRecordSamples(path), path, third, pattern);
  throwsTFRecord(() => new TFRecordSampleFile(path).readInto(2, firstSamples(1), 0), path, third, pattern);
});
