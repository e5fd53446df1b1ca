// Our shard format for preprocessed MLM/NSP samples: one safetensors file per part.
//
//   tensor                 dtype  shape                              content
//   input_ids              U16    [count, max_seq_length]            token ids (vocab 30522 < 65536)
//   input_mask             U8     [count, max_seq_length]            1 real token, 0 padding
//   segment_ids            U8     [count, max_seq_length]            0 sentence A, 1 sentence B
//   masked_lm_positions    U16    [count, max_predictions_per_seq]   positions < max_seq_length
//   masked_lm_ids          U16    [count, max_predictions_per_seq]   original token ids
//   masked_lm_weights      U8     [count, max_predictions_per_seq]   1 real prediction, 0 padding
//   next_sentence_labels   U8     [count]                            1 random next, 0 true next
//
//   __metadata__: format "tsgrad-bert-samples", version "2", max_seq_length,
//                 max_predictions_per_seq, count (decimal strings); what made the shard, as
//                 preprocess.ts records it: vocab_size, random_seed, dupe_factor, masked_lm_prob,
//                 short_seq_prob; and the safetensors checksums (src/io/safetensors.ts): each
//                 field's CRC-32C and the header's.
//
// Samples are rows in the order they were written. Reading widens to SampleColumns
// (Int32Array, Float32Array weights); writing refuses values the narrow types cannot hold.
// Reading verifies the checksums (ShardFile: the whole file when it is opened) and each
// sample's values: token ids below vocab_size (where recorded), positions below
// max_seq_length, masks, segments, weights and labels 0 or 1. Version 1 shards (no
// checksums, no settings) are read with a warning, their values still checked.

import { closeSync, openSync, readSync } from "node:fs";
import { io } from "../../../src/index.ts";
import { SAMPLE_FIELDS, type SampleColumns, type SampleField } from "./samples.ts";

export const SHARD_FORMAT = "tsgrad-bert-samples";
export const SHARD_VERSION = "2";
/** Shards without checksums or settings, from before version 2: read, unverified, with a warning. */
const UNCHECKED_VERSION = "1";

/** A shard whose contents do not fit the format; names the file and the field. */
export class ShardError extends Error {
  constructor(
    readonly path: string,
    readonly field: string,
    detail: string,
  ) {
    super(`${path}: ${field}: ${detail}`);
    this.name = "ShardError";
  }
}

type ShardDType = "U8" | "U16";

/** Each field's stored dtype and the largest value it may hold. */
const LAYOUT: Record<SampleField, { dtype: ShardDType; max: number }> = {
  input_ids: { dtype: "U16", max: 0xffff },
  input_mask: { dtype: "U8", max: 1 },
  segment_ids: { dtype: "U8", max: 1 },
  masked_lm_positions: { dtype: "U16", max: 0xffff },
  masked_lm_ids: { dtype: "U16", max: 0xffff },
  masked_lm_weights: { dtype: "U8", max: 1 },
  next_sentence_labels: { dtype: "U8", max: 1 },
};

// The two helpers below describe SampleColumns in general (every reader uses them); they
// live here, the lowest of the sample-file modules, until samples.ts takes them.

/** Values per sample of `field`: max_seq_length, max_predictions_per_seq or 1. */
export function fieldWidth(
  field: SampleField,
  dims: Pick<SampleColumns, "maxSeqLength" | "maxPredictionsPerSeq">,
): number {
  if (field === "input_ids" || field === "input_mask" || field === "segment_ids") return dims.maxSeqLength;
  return field === "next_sentence_labels" ? 1 : dims.maxPredictionsPerSeq;
}

/** `count` zeroed samples of the given widths. */
export function emptySamples(
  count: number,
  { maxSeqLength, maxPredictionsPerSeq }: Pick<SampleColumns, "maxSeqLength" | "maxPredictionsPerSeq">,
): SampleColumns {
  const seq = count * maxSeqLength;
  const pred = count * maxPredictionsPerSeq;
  return {
    count,
    maxSeqLength,
    maxPredictionsPerSeq,
    input_ids: new Int32Array(seq),
    input_mask: new Int32Array(seq),
    segment_ids: new Int32Array(seq),
    masked_lm_positions: new Int32Array(pred),
    masked_lm_ids: new Int32Array(pred),
    masked_lm_weights: new Float32Array(pred),
    next_sentence_labels: new Int32Array(count),
  };
}

function shapeOf(
  dims: Pick<SampleColumns, "count" | "maxSeqLength" | "maxPredictionsPerSeq">,
  field: SampleField,
): number[] {
  return field === "next_sentence_labels" ? [dims.count] : [dims.count, fieldWidth(field, dims)];
}

/**
 * Fills rows `start..end` of `field` into `out` (row-major, zeroed, the field's stored type); throws ShardError
 * for a value the stored type cannot hold.
 */
export type ShardRowFiller = (field: SampleField, start: number, end: number, out: Uint8Array | Uint16Array) => void;

/** Samples a shard is written in at a time: each field is filled and written a block of rows after another. */
const BLOCK_ROWS = 4096;

/**
 * What made a shard, beside its widths, kept in its metadata by the names of the reference's flags: `vocab_size`
 * (which bounds token ids when the shard is read), `random_seed`, `dupe_factor`, ... (decimal strings).
 */
export type ShardSettings = Record<string, string>;

/** Metadata keys the shard format itself writes. */
const FORMAT_KEYS = ["format", "version", "max_seq_length", "max_predictions_per_seq", "count"];

/**
 * Writes a shard of `dims.count` samples at `path`, atomically (temp file + rename), asking `fill` for each
 * field's rows a block at a time: no copy of the whole shard is held (a Wikipedia part's is about 1 GB).
 */
export function writeShardRows(
  path: string,
  dims: ShardDims,
  fill: ShardRowFiller,
  settings: ShardSettings = {},
): void {
  const clash = Object.keys(settings).find((key) => FORMAT_KEYS.includes(key));
  if (clash !== undefined) throw new ShardError(path, `__metadata__.${clash}`, "is the format's, not a setting");
  if (settings.vocab_size !== undefined) metadataInteger(path, settings, "vocab_size");
  const tensors: Record<string, io.SafetensorsStreamedTensor> = {};
  for (const field of SAMPLE_FIELDS) {
    const { dtype } = LAYOUT[field];
    const width = fieldWidth(field, dims);
    tensors[field] = {
      dtype,
      shape: shapeOf(dims, field),
      write(emit) {
        const size = Math.min(dims.count, BLOCK_ROWS) * width;
        const block = dtype === "U16" ? new Uint16Array(size) : new Uint8Array(size);
        for (let start = 0; start < dims.count; start += BLOCK_ROWS) {
          const end = Math.min(dims.count, start + BLOCK_ROWS);
          const out = block.subarray(0, (end - start) * width);
          out.fill(0);
          fill(field, start, end, out);
          emit(out);
        }
      },
    };
  }
  io.writeSafetensorsStream(path, tensors, {
    ...settings,
    format: SHARD_FORMAT,
    version: SHARD_VERSION,
    max_seq_length: String(dims.maxSeqLength),
    max_predictions_per_seq: String(dims.maxPredictionsPerSeq),
    count: String(dims.count),
  });
}

/** The ShardError for `value` at `index` of `field`'s values, which its stored type cannot hold. */
export function unfitValue(
  path: string,
  field: SampleField,
  dims: Pick<SampleColumns, "maxSeqLength" | "maxPredictionsPerSeq">,
  index: number,
  value: number,
): ShardError {
  const { dtype, max } = LAYOUT[field];
  const width = fieldWidth(field, dims);
  return new ShardError(
    path,
    field,
    `sample ${Math.floor(index / width)}, index ${index % width}: ${value} does not fit ${dtype} values 0..${max}`,
  );
}

/** Writes `samples` as a shard at `path`, atomically (temp file + rename), recording `settings`. */
export function writeShard(path: string, samples: SampleColumns, settings: ShardSettings = {}): void {
  for (const field of SAMPLE_FIELDS) {
    const expected = samples.count * fieldWidth(field, samples);
    if (samples[field].length !== expected)
      throw new ShardError(
        path,
        field,
        `has ${samples[field].length} values, expected ${expected} for ${samples.count} samples`,
      );
  }
  writeShardRows(
    path,
    samples,
    (field, start, _end, out) => {
      const { max } = LAYOUT[field];
      const values = samples[field];
      const first = start * fieldWidth(field, samples);
      for (let i = 0; i < out.length; i++) {
        const value = values[first + i]!;
        if (!(Number.isInteger(value) && value >= 0 && value <= max))
          throw unfitValue(path, field, samples, first + i, value);
        out[i] = value;
      }
    },
    settings,
  );
}

function metadataInteger(path: string, metadata: Record<string, string>, key: string): number {
  const text = metadata[key];
  if (text === undefined || !/^\d+$/.test(text))
    throw new ShardError(path, `__metadata__.${key}`, `expected a decimal integer, got ${JSON.stringify(text)}`);
  return Number(text);
}

type ShardDims = Pick<SampleColumns, "count" | "maxSeqLength" | "maxPredictionsPerSeq">;

/** A shard's dimensions and the vocab size its token ids must stay below, where it records one. */
interface ShardLimits extends ShardDims {
  vocabSize: number | undefined;
}

let warnedUnchecked = false;

/** The first version 1 shard a thread reads gets a warning (not every one: a folder holds 500). */
function warnUnchecked(path: string): void {
  if (warnedUnchecked) return;
  warnedUnchecked = true;
  console.error(
    `warning: ${path} is a version ${UNCHECKED_VERSION} sample shard, without checksums: its bytes are not verified, only its values' ranges (preprocess again for version ${SHARD_VERSION} shards; further such shards are not named)`,
  );
}

/** Checks a shard's metadata and each field's dtype and shape; returns its dimensions and token id bound. */
function checkShardHeader(
  path: string,
  tensors: Record<string, { dtype: string; shape: number[] }>,
  metadata: Record<string, string>,
  checksummed: boolean,
): ShardLimits {
  if (metadata.format !== SHARD_FORMAT)
    throw new ShardError(
      path,
      "__metadata__.format",
      `expected "${SHARD_FORMAT}", got ${JSON.stringify(metadata.format)}`,
    );
  if (metadata.version === UNCHECKED_VERSION) warnUnchecked(path);
  else if (metadata.version !== SHARD_VERSION)
    throw new ShardError(
      path,
      "__metadata__.version",
      `expected "${SHARD_VERSION}" (or "${UNCHECKED_VERSION}"), got ${JSON.stringify(metadata.version)}`,
    );
  else if (!checksummed)
    throw new ShardError(path, "__metadata__", `a version ${SHARD_VERSION} shard without checksums`);
  const dims = {
    count: metadataInteger(path, metadata, "count"),
    maxSeqLength: metadataInteger(path, metadata, "max_seq_length"),
    maxPredictionsPerSeq: metadataInteger(path, metadata, "max_predictions_per_seq"),
    vocabSize: metadata.vocab_size === undefined ? undefined : metadataInteger(path, metadata, "vocab_size"),
  };
  for (const field of SAMPLE_FIELDS) {
    const tensor = tensors[field];
    if (tensor === undefined) throw new ShardError(path, field, "missing");
    const expectedShape = shapeOf(dims, field);
    if (tensor.dtype !== LAYOUT[field].dtype)
      throw new ShardError(path, field, `dtype ${tensor.dtype}, expected ${LAYOUT[field].dtype}`);
    if (tensor.shape.join() !== expectedShape.join()) {
      throw new ShardError(
        path,
        field,
        `shape [${tensor.shape.join(", ")}], expected [${expectedShape.join(", ")}] from __metadata__`,
      );
    }
  }
  return dims;
}

/**
 * The first value of sample `row` of `samples` outside its field's range: token ids at or above `vocabSize` (when
 * known), positions at or above max_seq_length, masks, segments, weights and labels other than 0 and 1. `index` is
 * the value's place in the sample's row of the field.
 */
export function findValueOutOfRange(
  samples: SampleColumns,
  row: number,
  vocabSize: number | undefined,
): { field: SampleField; index: number; value: number; expected: string } | undefined {
  for (const field of SAMPLE_FIELDS) {
    const width = fieldWidth(field, samples);
    const values = samples[field];
    const start = row * width;
    const end = start + width;
    let bad = -1;
    if (field === "input_ids" || field === "masked_lm_ids" || field === "masked_lm_positions") {
      const limit = field === "masked_lm_positions" ? samples.maxSeqLength : (vocabSize ?? Number.POSITIVE_INFINITY);
      for (let i = start; i < end && bad < 0; i++) if (!(values[i]! >= 0 && values[i]! < limit)) bad = i;
      if (bad < 0) continue;
      const expected =
        field === "masked_lm_positions"
          ? `a position below max_seq_length ${limit}`
          : `a token id below the vocab size ${limit}`;
      return { field, index: bad - start, value: values[bad]!, expected };
    }
    for (let i = start; i < end && bad < 0; i++) if (values[i] !== 0 && values[i] !== 1) bad = i;
    if (bad >= 0) return { field, index: bad - start, value: values[bad]!, expected: "0 or 1" };
  }
  return undefined;
}

/**
 * Throws a ShardError naming the record and the byte offset of the first value of sample `row` out of range;
 * `fieldOffset` gives where a field's data starts in the file.
 */
function checkRanges(
  path: string,
  fieldOffset: (field: SampleField) => number,
  samples: SampleColumns,
  row: number,
  record: number,
  vocabSize: number | undefined,
): void {
  const bad = findValueOutOfRange(samples, row, vocabSize);
  if (bad === undefined) return;
  const { field, index, value, expected } = bad;
  const itemBytes = LAYOUT[field].dtype === "U16" ? 2 : 1;
  const byteOffset = fieldOffset(field) + (record * fieldWidth(field, samples) + index) * itemBytes;
  throw new ShardError(
    path,
    field,
    `record ${record}, value ${index}, byte offset ${byteOffset}: ${value} is not ${expected}`,
  );
}

/** Reads a shard written by `writeShard`, checking format, dtypes, shapes, checksums and every sample's values. */
export function readShard(path: string): SampleColumns {
  const { tensors, metadata, checksummed } = io.readSafetensorsFile(path);
  const limits = checkShardHeader(path, tensors, metadata, checksummed);
  const samples = emptySamples(limits.count, limits);
  for (const field of SAMPLE_FIELDS) samples[field].set(tensors[field]!.data as Uint8Array | Uint16Array);
  const fieldOffset = (field: SampleField) => io.readSafetensorsHeader(path).entries[field]!.byteOffset;
  for (let record = 0; record < samples.count; record++)
    checkRanges(path, fieldOffset, samples, record, record, limits.vocabSize);
  return samples;
}

/** Options of opening a shard. */
export interface ShardOpenOptions {
  /**
   * Verify the data against the checksums as the shard opens, reading it whole (default true); false where this
   * process verified the file already. The header and every sample's values are checked either way.
   */
  verify?: boolean;
}

/** A shard open for reading single samples by index, a few small reads each, without loading it all. */
export class ShardFile {
  readonly count: number;
  readonly maxSeqLength: number;
  readonly maxPredictionsPerSeq: number;
  /** The bound on token ids the shard records (its vocab's size), if any. */
  readonly vocabSize: number | undefined;
  private readonly fd: number;
  private readonly entries: Record<string, io.SafetensorsEntry>;
  private readonly scratch: ArrayBuffer;

  constructor(
    readonly path: string,
    { verify = true }: ShardOpenOptions = {},
  ) {
    const { entries, metadata, checksummed } = verify ? io.verifySafetensorsFile(path) : io.readSafetensorsHeader(path);
    const limits = checkShardHeader(path, entries, metadata, checksummed);
    this.count = limits.count;
    this.maxSeqLength = limits.maxSeqLength;
    this.maxPredictionsPerSeq = limits.maxPredictionsPerSeq;
    this.vocabSize = limits.vocabSize;
    this.entries = entries;
    this.scratch = new ArrayBuffer(2 * Math.max(this.maxSeqLength, this.maxPredictionsPerSeq, 1));
    this.fd = openSync(path, "r");
  }

  /** Copies sample `index` into row `row` of `target` (whose widths match this shard's). */
  readInto(index: number, target: SampleColumns, row: number): void {
    if (!(Number.isInteger(index) && index >= 0 && index < this.count))
      throw new ShardError(this.path, "sample", `index ${index} is outside 0..${this.count - 1}`);
    for (const field of SAMPLE_FIELDS) {
      const width = fieldWidth(field, this);
      const entry = this.entries[field]!;
      const itemBytes = LAYOUT[field].dtype === "U16" ? 2 : 1;
      const bytes = new Uint8Array(this.scratch, 0, width * itemBytes);
      const position = entry.byteOffset + index * width * itemBytes;
      if (readSync(this.fd, bytes, 0, bytes.length, position) !== bytes.length) {
        throw new ShardError(this.path, field, `short read of sample ${index} at byte offset ${position}`);
      }
      const narrow = itemBytes === 2 ? new Uint16Array(this.scratch, 0, width) : bytes;
      target[field].set(narrow, row * width);
    }
    checkRanges(this.path, (field) => this.entries[field]!.byteOffset, target, row, index, this.vocabSize);
  }

  close(): void {
    closeSync(this.fd);
  }
}
