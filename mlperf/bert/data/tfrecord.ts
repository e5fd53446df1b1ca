// The reference's sample files: TFRecord framing around `tf.train.Example` protobufs.
//
// A TFRecord file is a sequence of records, each
//   uint64 length (LE) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// and each record's data is an Example: `features` (field 1) holding a map<string, Feature>
// (field 1, entries of key = 1, value = 2), where a Feature is one of bytes_list (1),
// float_list (2, packed little-endian floats) or int64_list (3, varints, packed or not).

import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { io } from "../../../src/index.ts";
import { SAMPLE_FIELDS, type SampleColumns } from "./samples.ts";
import { emptySamples, fieldWidth, findValueOutOfRange } from "./shard.ts";

/** A corrupt or unexpected TFRecord file; names the file and the byte offset of the record. */
export class TFRecordError extends Error {
  constructor(
    readonly path: string,
    readonly byteOffset: number,
    detail: string,
  ) {
    super(`${path}: byte offset ${byteOffset}: ${detail}`);
    this.name = "TFRecordError";
  }
}

const HEADER_BYTES = 12;
const FOOTER_BYTES = 4;
const CHUNK_BYTES = 1 << 20;

/** One record's data and where its framing starts in the file. */
export interface TFRecord {
  data: Uint8Array;
  byteOffset: number;
}

/**
 * Streams the records of a TFRecord file, checking both CRCs, reading 1 MiB at a time.
 * Each record's `data` is only valid until the next one is requested.
 */
export function* readTFRecords(path: string): Generator<TFRecord> {
  const fd = openSync(path, "r");
  try {
    const fileLength = fstatSync(fd).size;
    let buffer = new Uint8Array(CHUNK_BYTES);
    let start = 0; // first unconsumed byte in buffer
    let end = 0; // end of valid bytes in buffer
    let fileOffset = 0; // file offset of buffer[start]
    let eof = false;
    /** Makes `count` bytes available at buffer[start]; false if the file ends first. */
    const fill = (count: number): boolean => {
      if (end - start >= count) return true;
      if (buffer.length < count) {
        const bigger = new Uint8Array(Math.max(count, buffer.length * 2));
        bigger.set(buffer.subarray(start, end));
        buffer = bigger;
      } else {
        buffer.copyWithin(0, start, end);
      }
      end -= start;
      start = 0;
      while (end < count && !eof) {
        const read = readSync(fd, buffer, end, buffer.length - end, null);
        if (read === 0) eof = true;
        end += read;
      }
      return end >= count;
    };
    while (fill(1)) {
      const recordOffset = fileOffset;
      if (!fill(HEADER_BYTES))
        throw new TFRecordError(path, recordOffset, `truncated record header: ${end - start} of ${HEADER_BYTES} bytes`);
      const view = new DataView(buffer.buffer, buffer.byteOffset + start, HEADER_BYTES);
      if (io.maskedCrc32c(buffer.subarray(start, start + 8)) !== view.getUint32(8, true)) {
        throw new TFRecordError(path, recordOffset, "bad CRC of the record length");
      }
      const length = Number(view.getBigUint64(0, true));
      const total = HEADER_BYTES + length + FOOTER_BYTES;
      // Checked before reading so that a corrupt length cannot ask for a huge buffer.
      if (recordOffset + total > fileLength || !fill(total)) {
        throw new TFRecordError(path, recordOffset, `truncated record: ${fileLength - recordOffset} of ${total} bytes`);
      }
      const data = buffer.subarray(start + HEADER_BYTES, start + HEADER_BYTES + length);
      const stored = new DataView(buffer.buffer, buffer.byteOffset + start + HEADER_BYTES + length, 4).getUint32(
        0,
        true,
      );
      if (io.maskedCrc32c(data) !== stored)
        throw new TFRecordError(path, recordOffset, `bad CRC of the ${length}-byte record data`);
      start += total;
      fileOffset += total;
      yield { data, byteOffset: recordOffset };
    }
  } finally {
    closeSync(fd);
  }
}

/** Frames `data` as one TFRecord. */
export function encodeTFRecord(data: Uint8Array): Uint8Array {
  const record = new Uint8Array(HEADER_BYTES + data.length + FOOTER_BYTES);
  const view = new DataView(record.buffer);
  view.setBigUint64(0, BigInt(data.length), true);
  view.setUint32(8, io.maskedCrc32c(record.subarray(0, 8)), true);
  record.set(data, HEADER_BYTES);
  view.setUint32(HEADER_BYTES + data.length, io.maskedCrc32c(data), true);
  return record;
}

// ---- tf.train.Example ------------------------------------------------------------------

/** An Example's features: int64 and float lists as numbers, bytes lists as raw bytes. */
export type ExampleFeature =
  | { kind: "int64"; values: number[] }
  | { kind: "float"; values: number[] }
  | { kind: "bytes"; values: Uint8Array[] };

const UTF8 = new TextDecoder();
const VARINT = 0;
const FIXED64 = 1;
const LENGTH_DELIMITED = 2;
const FIXED32 = 5;

/** A cursor over protobuf wire-format bytes; errors carry the offset inside the message. */
class ProtoReader {
  position: number;
  constructor(
    readonly bytes: Uint8Array,
    start = 0,
    readonly end = bytes.length,
  ) {
    this.position = start;
  }

  done(): boolean {
    return this.position >= this.end;
  }

  varint(): number {
    let low = 0;
    let shift = 0;
    for (;;) {
      if (this.position >= this.end) throw new Error(`varint runs past the end of its message at ${this.position}`);
      const byte = this.bytes[this.position++]!;
      if (shift < 28) {
        low |= (byte & 0x7f) << shift;
      } else {
        return this.longVarint(low >>> 0, byte, shift);
      }
      if ((byte & 0x80) === 0) return low >>> 0;
      shift += 7;
    }
  }

  /** The rest of a varint past 28 bits, as a signed int64 (negative int64s use all 10 bytes). */
  private longVarint(low: number, byte: number, shift: number): number {
    let value = BigInt(low) | (BigInt(byte & 0x7f) << BigInt(shift));
    while (byte & 0x80) {
      shift += 7;
      if (shift > 63 || this.position >= this.end) throw new Error(`malformed varint ending at ${this.position}`);
      byte = this.bytes[this.position++]!;
      value |= BigInt(byte & 0x7f) << BigInt(shift);
    }
    const signed = BigInt.asIntN(64, value);
    if (signed > BigInt(Number.MAX_SAFE_INTEGER) || signed < BigInt(Number.MIN_SAFE_INTEGER))
      throw new Error(`int64 ${signed} is beyond 2^53`);
    return Number(signed);
  }

  /** Reads a length prefix and returns [start, end) of the delimited bytes. */
  delimited(): [number, number] {
    const length = this.varint();
    const start = this.position;
    if (start + length > this.end)
      throw new Error(`field of ${length} bytes at ${start} runs past the end of its message at ${this.end}`);
    this.position = start + length;
    return [start, start + length];
  }

  skip(wireType: number): void {
    if (wireType === VARINT) this.varint();
    else if (wireType === FIXED64) this.position += 8;
    else if (wireType === LENGTH_DELIMITED) this.delimited();
    else if (wireType === FIXED32) this.position += 4;
    else throw new Error(`unsupported wire type ${wireType} at ${this.position}`);
    if (this.position > this.end) throw new Error(`field runs past the end of its message at ${this.end}`);
  }
}

/** Decodes a serialized `tf.train.Example` into its features by name. */
export function decodeExample(bytes: Uint8Array): Map<string, ExampleFeature> {
  const features = new Map<string, ExampleFeature>();
  const example = new ProtoReader(bytes);
  while (!example.done()) {
    const key = example.varint();
    if (key !== ((1 << 3) | LENGTH_DELIMITED)) {
      example.skip(key & 7);
      continue;
    }
    const featuresReader = new ProtoReader(bytes, ...example.delimited());
    while (!featuresReader.done()) {
      const entryKey = featuresReader.varint();
      if (entryKey !== ((1 << 3) | LENGTH_DELIMITED)) {
        featuresReader.skip(entryKey & 7);
        continue;
      }
      const [name, feature] = decodeFeatureEntry(new ProtoReader(bytes, ...featuresReader.delimited()));
      features.set(name, feature);
    }
  }
  return features;
}

function decodeFeatureEntry(entry: ProtoReader): [string, ExampleFeature] {
  let name = "";
  let feature: ExampleFeature = { kind: "int64", values: [] };
  while (!entry.done()) {
    const key = entry.varint();
    if (key === ((1 << 3) | LENGTH_DELIMITED)) name = UTF8.decode(entry.bytes.subarray(...entry.delimited()));
    else if (key === ((2 << 3) | LENGTH_DELIMITED))
      feature = decodeFeature(new ProtoReader(entry.bytes, ...entry.delimited()));
    else entry.skip(key & 7);
  }
  return [name, feature];
}

function decodeFeature(feature: ProtoReader): ExampleFeature {
  let result: ExampleFeature = { kind: "int64", values: [] };
  while (!feature.done()) {
    const key = feature.varint();
    const field = key >>> 3;
    if ((key & 7) !== LENGTH_DELIMITED || field < 1 || field > 3) {
      feature.skip(key & 7);
      continue;
    }
    const list = new ProtoReader(feature.bytes, ...feature.delimited());
    if (field === 1) result = { kind: "bytes", values: decodeBytesList(list) };
    else if (field === 2) result = { kind: "float", values: decodeFloatList(list) };
    else result = { kind: "int64", values: decodeInt64List(list) };
  }
  return result;
}

function decodeInt64List(list: ProtoReader): number[] {
  const values: number[] = [];
  while (!list.done()) {
    const key = list.varint();
    if (key === ((1 << 3) | VARINT)) {
      values.push(list.varint());
    } else if (key === ((1 << 3) | LENGTH_DELIMITED)) {
      const packed = new ProtoReader(list.bytes, ...list.delimited());
      while (!packed.done()) values.push(packed.varint());
    } else {
      list.skip(key & 7);
    }
  }
  return values;
}

function decodeFloatList(list: ProtoReader): number[] {
  const values: number[] = [];
  const view = new DataView(list.bytes.buffer, list.bytes.byteOffset, list.bytes.byteLength);
  while (!list.done()) {
    const key = list.varint();
    if (key === ((1 << 3) | FIXED32)) {
      if (list.position + 4 > list.end) throw new Error(`float runs past the end of its message at ${list.end}`);
      values.push(view.getFloat32(list.position, true));
      list.position += 4;
    } else if (key === ((1 << 3) | LENGTH_DELIMITED)) {
      const [start, end] = list.delimited();
      if ((end - start) % 4 !== 0)
        throw new Error(`packed floats of ${end - start} bytes at ${start} are not a multiple of 4`);
      for (let at = start; at < end; at += 4) values.push(view.getFloat32(at, true));
    } else {
      list.skip(key & 7);
    }
  }
  return values;
}

function decodeBytesList(list: ProtoReader): Uint8Array[] {
  const values: Uint8Array[] = [];
  while (!list.done()) {
    const key = list.varint();
    if (key === ((1 << 3) | LENGTH_DELIMITED)) values.push(list.bytes.slice(...list.delimited()));
    else list.skip(key & 7);
  }
  return values;
}

/** Encodes int64 and float features as a `tf.train.Example`, packed, as TensorFlow writes it. */
export function encodeExample(features: Map<string, ExampleFeature>): Uint8Array {
  const entries: Uint8Array[] = [];
  for (const [name, feature] of features) {
    let list: Uint8Array;
    if (feature.kind === "int64") {
      const varints = new Uint8Array(10 * feature.values.length);
      let length = 0;
      for (const value of feature.values) length = writeVarint(varints, length, value);
      list = lengthDelimited(1, [varints.subarray(0, length)]);
    } else if (feature.kind === "float") {
      list = lengthDelimited(1, [new Uint8Array(new Float32Array(feature.values).buffer)]);
    } else {
      list = concat(feature.values.map((value) => lengthDelimited(1, [value])));
    }
    const featureBytes = lengthDelimited(feature.kind === "bytes" ? 1 : feature.kind === "float" ? 2 : 3, [list]);
    entries.push(
      lengthDelimited(1, [lengthDelimited(1, [new TextEncoder().encode(name)]), lengthDelimited(2, [featureBytes])]),
    );
  }
  return lengthDelimited(1, entries);
}

/** Writes `value` as a varint (negative numbers as 64-bit two's complement) at `at`; returns the end. */
function writeVarint(bytes: Uint8Array, at: number, value: number): number {
  if (value >= 0 && value <= 0x7fffffff) {
    while (value > 0x7f) {
      bytes[at++] = (value & 0x7f) | 0x80;
      value >>>= 7;
    }
    bytes[at++] = value;
    return at;
  }
  let rest = BigInt.asUintN(64, BigInt(value));
  while (rest > 0x7fn) {
    bytes[at++] = Number(rest & 0x7fn) | 0x80;
    rest >>= 7n;
  }
  bytes[at++] = Number(rest);
  return at;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const bytes = new Uint8Array(parts.reduce((total, part) => total + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    bytes.set(part, offset);
    offset += part.length;
  }
  return bytes;
}

/** Field `field` holding the concatenated `parts`, length-prefixed. */
function lengthDelimited(field: number, parts: Uint8Array[]): Uint8Array {
  const payload = concat(parts);
  const prefix = new Uint8Array(20);
  const prefixLength = writeVarint(prefix, writeVarint(prefix, 0, (field << 3) | LENGTH_DELIMITED), payload.length);
  return concat([prefix.subarray(0, prefixLength), payload]);
}

// ---- samples ---------------------------------------------------------------------------

type SampleDims = Pick<SampleColumns, "maxSeqLength" | "maxPredictionsPerSeq">;

/** Decodes one record as a sample and returns its dimensions (from input_ids and masked_lm_ids). */
function decodeSampleRecord(
  path: string,
  record: TFRecord,
  recordIndex: number,
): { features: Map<string, ExampleFeature>; dims: SampleDims } {
  let features: Map<string, ExampleFeature>;
  try {
    features = decodeExample(record.data);
  } catch (error) {
    throw new TFRecordError(
      path,
      record.byteOffset,
      `record ${recordIndex} is not a valid tf.train.Example: ${(error as Error).message}`,
    );
  }
  const dims = {
    maxSeqLength: features.get("input_ids")?.values.length ?? 0,
    maxPredictionsPerSeq: features.get("masked_lm_ids")?.values.length ?? 0,
  };
  return { features, dims };
}

/** Checks a decoded Example against the file's dimensions and copies it into row `row` of `target`. */
function copySampleInto(
  path: string,
  record: TFRecord,
  recordIndex: number,
  features: Map<string, ExampleFeature>,
  target: SampleColumns,
  row: number,
): void {
  for (const field of SAMPLE_FIELDS) {
    const fail = (detail: string) =>
      new TFRecordError(path, record.byteOffset, `record ${recordIndex}: feature ${field} ${detail}`);
    const feature = features.get(field);
    const expectedKind = field === "masked_lm_weights" ? "float" : "int64";
    if (feature === undefined) throw fail("is missing");
    if (feature.kind !== expectedKind) throw fail(`is a ${feature.kind} list, expected ${expectedKind}`);
    const width = fieldWidth(field, target);
    if (feature.values.length !== width) throw fail(`has ${feature.values.length} values, expected ${width}`);
    if (feature.kind === "int64") {
      for (const value of feature.values)
        if (value < 0 || value > 0x7fffffff) throw fail(`value ${value} is outside 0..2^31-1`);
    }
    target[field].set(feature.values as number[], row * width);
  }
  const bad = findValueOutOfRange(target, row, undefined); // the vocab is not in the file
  if (bad !== undefined) {
    const { field, index, value, expected } = bad;
    throw new TFRecordError(
      path,
      record.byteOffset,
      `record ${recordIndex}: feature ${field} value ${index}: ${value} is not ${expected}`,
    );
  }
}

/** The first `count` rows of `columns`, copied into arrays of exactly that size. */
function truncateColumns(columns: SampleColumns, count: number): SampleColumns {
  const result = emptySamples(count, columns);
  for (const field of SAMPLE_FIELDS) result[field].set(columns[field].subarray(0, count * fieldWidth(field, columns)));
  return result;
}

/** Reads every sample of a reference TFRecord file into columns, streaming through the file. */
export function readTFRecordSamples(path: string): SampleColumns {
  let columns = emptySamples(0, { maxSeqLength: 0, maxPredictionsPerSeq: 0 });
  let count = 0;
  for (const record of readTFRecords(path)) {
    const { features, dims } = decodeSampleRecord(path, record, count);
    if (count === 0) columns = emptySamples(1024, dims);
    if (count === columns.count) {
      const grown = emptySamples(columns.count * 2, columns);
      for (const field of SAMPLE_FIELDS) grown[field].set(columns[field]);
      columns = grown;
    }
    copySampleInto(path, record, count, features, columns, count);
    count++;
  }
  return truncateColumns(columns, count);
}

/**
 * A TFRecord sample file open for reading single samples by index: opening it walks the
 * record headers once (checking their CRCs) to find each record's offset.
 */
export class TFRecordSampleFile {
  readonly count: number;
  readonly maxSeqLength: number;
  readonly maxPredictionsPerSeq: number;
  private readonly fd: number;
  private readonly offsets: number[] = [];
  private readonly lengths: number[] = [];

  constructor(readonly path: string) {
    this.fd = openSync(path, "r");
    const fileLength = fstatSync(this.fd).size;
    const header = new Uint8Array(HEADER_BYTES);
    const view = new DataView(header.buffer);
    for (let offset = 0; offset < fileLength; ) {
      const read = readSync(this.fd, header, 0, HEADER_BYTES, offset);
      if (read < HEADER_BYTES)
        throw new TFRecordError(path, offset, `truncated record header: ${read} of ${HEADER_BYTES} bytes`);
      if (io.maskedCrc32c(header.subarray(0, 8)) !== view.getUint32(8, true))
        throw new TFRecordError(path, offset, "bad CRC of the record length");
      const length = Number(view.getBigUint64(0, true));
      const total = HEADER_BYTES + length + FOOTER_BYTES;
      if (offset + total > fileLength)
        throw new TFRecordError(path, offset, `truncated record: ${fileLength - offset} of ${total} bytes`);
      this.offsets.push(offset);
      this.lengths.push(length);
      offset += total;
    }
    this.count = this.offsets.length;
    const dims =
      this.count === 0
        ? { maxSeqLength: 0, maxPredictionsPerSeq: 0 }
        : decodeSampleRecord(path, this.readRecord(0), 0).dims;
    this.maxSeqLength = dims.maxSeqLength;
    this.maxPredictionsPerSeq = dims.maxPredictionsPerSeq;
  }

  private readRecord(index: number): TFRecord {
    const byteOffset = this.offsets[index]!;
    const length = this.lengths[index]!;
    const bytes = new Uint8Array(length + FOOTER_BYTES);
    readSync(this.fd, bytes, 0, bytes.length, byteOffset + HEADER_BYTES);
    const data = bytes.subarray(0, length);
    if (io.maskedCrc32c(data) !== new DataView(bytes.buffer).getUint32(length, true)) {
      throw new TFRecordError(this.path, byteOffset, `bad CRC of the ${length}-byte record data`);
    }
    return { data, byteOffset };
  }

  /** Copies sample `index` into row `row` of `target` (whose widths match this file's). */
  readInto(index: number, target: SampleColumns, row: number): void {
    if (!(Number.isInteger(index) && index >= 0 && index < this.count))
      throw new TFRecordError(this.path, 0, `sample index ${index} is outside 0..${this.count - 1}`);
    const record = this.readRecord(index);
    copySampleInto(this.path, record, index, decodeSampleRecord(this.path, record, index).features, target, row);
  }

  close(): void {
    closeSync(this.fd);
  }
}

/** The samples as reference TFRecord bytes: one Example per sample, features in reference order. */
export function encodeTFRecordSamples(samples: SampleColumns): Uint8Array {
  const records: Uint8Array[] = [];
  for (let sample = 0; sample < samples.count; sample++) {
    const features = new Map<string, ExampleFeature>();
    for (const field of SAMPLE_FIELDS) {
      const width = fieldWidth(field, samples);
      const values = [...samples[field].subarray(sample * width, (sample + 1) * width)];
      features.set(field, field === "masked_lm_weights" ? { kind: "float", values } : { kind: "int64", values });
    }
    records.push(encodeTFRecord(encodeExample(features)));
  }
  return concat(records);
}

/** Writes the samples as a reference TFRecord file, atomically (temp file + rename). */
export function writeTFRecordSamples(path: string, samples: SampleColumns): void {
  io.writeFileAtomic(path, encodeTFRecordSamples(samples));
}
