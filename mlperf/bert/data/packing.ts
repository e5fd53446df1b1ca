// Sequence packing: several short pretraining samples share one row of max_seq_length tokens, so
// that a train step spends its matmuls on tokens instead of padding (docs/packing.md).
//
// Rows are filled best-fit decreasing: the longest sample first, each into the open row it fills
// most tightly, at most `maxPerRow` samples and `maxPredictionsPerRow` masked-LM predictions a
// row; then the rows are shuffled with the seed. Each row carries what the model needs to keep
// its samples apart: per-token positions restarting at 0, the slot of the sample each token
// belongs to (-1 on padding), masked-LM positions re-based into the row, and per slot the first
// ([CLS]) token, the NSP label and a weight (0 for an empty slot).

import { PyRandom } from "./pyrandom.ts";
import type { SampleColumns } from "./samples.ts";
import { Tensor } from "../../../src/index.ts";
import type { PackedBertBatchTensors } from "../../../models/bert_train_step.ts";

/** Bad packing input (a sample longer than a row, a width mismatch); names the offending value. */
export class PackingError extends Error {
  override name = "PackingError";
}

export interface PackingOptions {
  /** Samples a row holds at most (default 3). */
  maxPerRow?: number;
  /** Seeds the order of the rows: the same samples and seed give the same rows. */
  seed?: number;
  /** Masked-LM predictions a row holds at most (default: the samples' max_predictions_per_seq). */
  maxPredictionsPerRow?: number;
}

/** `count` packed rows holding `sampleCount` samples; row-major like SampleColumns, field names the reference's. */
export interface PackedColumns {
  count: number;
  sampleCount: number;
  maxSeqLength: number;
  maxPredictionsPerRow: number;
  maxPerRow: number;
  /** [count, maxSeqLength] the samples' tokens one after another, then 0-padding. */
  input_ids: Int32Array;
  /** [count, maxSeqLength] 1 for a sample's token, 0 for padding. */
  input_mask: Int32Array;
  /** [count, maxSeqLength] each sample's own segment ids. */
  segment_ids: Int32Array;
  /** [count, maxSeqLength] a token's position within its sample (0 at its [CLS]); 0 on padding. */
  position_ids: Int32Array;
  /** [count, maxSeqLength] the slot (0..maxPerRow-1) of the token's sample; -1 on padding. */
  sample_ids: Int32Array;
  /** [count, maxPredictionsPerRow] masked positions in the row, slot by slot, 0-padded. */
  masked_lm_positions: Int32Array;
  /** [count, maxPredictionsPerRow] original token ids at those positions, 0-padded. */
  masked_lm_ids: Int32Array;
  /** [count, maxPredictionsPerRow] 1.0 per real prediction, 0.0 after. */
  masked_lm_weights: Float32Array;
  /** [count, maxPerRow] the row position of each slot's [CLS] token; 0 for an empty slot. */
  next_sentence_positions: Int32Array;
  /** [count, maxPerRow] each slot's NSP label; 0 for an empty slot. */
  next_sentence_labels: Int32Array;
  /** [count, maxPerRow] 1.0 for a slot holding a sample, 0.0 for an empty one. */
  next_sentence_weights: Float32Array;
  /** [count, maxPerRow] the index of each slot's sample in the packed input; -1 for an empty slot. */
  source_samples: Int32Array;
}

interface Capacity {
  maxSeqLength: number;
  maxPerRow: number;
  maxPredictionsPerRow: number;
}

/** Real tokens (input_mask ones) and real predictions (non-zero weights) of each sample. */
export function sampleSizes(columns: SampleColumns): { lengths: Int32Array; predictions: Int32Array } {
  const { count, maxSeqLength, maxPredictionsPerSeq } = columns;
  const lengths = new Int32Array(count);
  const predictions = new Int32Array(count);
  for (let i = 0; i < count; i++) {
    for (let t = 0; t < maxSeqLength; t++) lengths[i]! += columns.input_mask[i * maxSeqLength + t]!;
    for (let p = 0; p < maxPredictionsPerSeq; p++)
      predictions[i]! += columns.masked_lm_weights[i * maxPredictionsPerSeq + p]! !== 0 ? 1 : 0;
  }
  return { lengths, predictions };
}

/**
 * The samples of each row, best-fit decreasing: samples longest first (equal lengths in input order), each into
 * the open row with the least room that still takes its tokens and predictions, else into a new row.
 */
export function assignRows(
  lengths: ArrayLike<number>,
  predictions: ArrayLike<number>,
  { maxSeqLength, maxPerRow, maxPredictionsPerRow }: Capacity,
): number[][] {
  const order = Array.from({ length: lengths.length }, (_, i) => i).sort((a, b) => lengths[b]! - lengths[a]!);
  const rows: { samples: number[]; room: number; predictionRoom: number }[] = [];
  const openByRoom: number[][] = Array.from({ length: maxSeqLength + 1 }, () => []);
  for (const sample of order) {
    const length = lengths[sample]!;
    const predicted = predictions[sample]!;
    if (length > maxSeqLength) throw new PackingError(`sample ${sample} has ${length} tokens, over ${maxSeqLength}`);
    if (predicted > maxPredictionsPerRow)
      throw new PackingError(`sample ${sample} has ${predicted} predictions, over ${maxPredictionsPerRow} a row`);
    let row = -1;
    for (let room = length; room <= maxSeqLength && row < 0; room++) {
      const open = openByRoom[room]!;
      const at = open.findIndex((r) => rows[r]!.predictionRoom >= predicted);
      if (at >= 0) row = open.splice(at, 1)[0]!;
    }
    if (row < 0) {
      row = rows.length;
      rows.push({ samples: [], room: maxSeqLength, predictionRoom: maxPredictionsPerRow });
    }
    const target = rows[row]!;
    target.samples.push(sample);
    target.room -= length;
    target.predictionRoom -= predicted;
    if (target.samples.length < maxPerRow && target.room > 0) openByRoom[target.room]!.push(row);
  }
  return rows.map((r) => r.samples);
}

/** Packs every sample of `columns` exactly once into rows of at most max_seq_length tokens; deterministic for a seed. */
export function packSamples(columns: SampleColumns, options: PackingOptions = {}): PackedColumns {
  return packWith(columns, options, new PyRandom(options.seed ?? 0));
}

function packWith(columns: SampleColumns, options: PackingOptions, random: PyRandom): PackedColumns {
  const capacity = capacityOf(columns, options);
  const { lengths, predictions } = sampleSizes(columns);
  const rows = assignRows(lengths, predictions, capacity);
  for (let i = rows.length - 1; i > 0; i--) {
    const j = random.randbelow(i + 1);
    [rows[i], rows[j]] = [rows[j]!, rows[i]!];
  }
  const packed = emptyPacked(rows.length, capacity);
  packed.sampleCount = columns.count;
  rows.forEach((samples, row) => fillRow(packed, row, columns, samples, lengths, predictions));
  return packed;
}

function capacityOf(columns: SampleColumns, { maxPerRow = 3, maxPredictionsPerRow }: PackingOptions): Capacity {
  if (!(Number.isInteger(maxPerRow) && maxPerRow >= 1))
    throw new PackingError(`maxPerRow must be a positive integer, got ${maxPerRow}`);
  const predictions = maxPredictionsPerRow ?? columns.maxPredictionsPerSeq;
  if (!(Number.isInteger(predictions) && predictions >= 1))
    throw new PackingError(`maxPredictionsPerRow must be a positive integer, got ${predictions}`);
  return { maxSeqLength: columns.maxSeqLength, maxPerRow, maxPredictionsPerRow: predictions };
}

/** `count` empty rows: no samples, padding everywhere (sample id -1, empty slots). */
export function emptyPacked(count: number, { maxSeqLength, maxPerRow, maxPredictionsPerRow }: Capacity): PackedColumns {
  const tokens = count * maxSeqLength;
  const predictions = count * maxPredictionsPerRow;
  const slots = count * maxPerRow;
  return {
    count,
    sampleCount: 0,
    maxSeqLength,
    maxPredictionsPerRow,
    maxPerRow,
    input_ids: new Int32Array(tokens),
    input_mask: new Int32Array(tokens),
    segment_ids: new Int32Array(tokens),
    position_ids: new Int32Array(tokens),
    sample_ids: new Int32Array(tokens).fill(-1),
    masked_lm_positions: new Int32Array(predictions),
    masked_lm_ids: new Int32Array(predictions),
    masked_lm_weights: new Float32Array(predictions),
    next_sentence_positions: new Int32Array(slots),
    next_sentence_labels: new Int32Array(slots),
    next_sentence_weights: new Float32Array(slots),
    source_samples: new Int32Array(slots).fill(-1),
  };
}

/** Writes `samples` of `columns` one after another into row `row` of `packed`. */
function fillRow(
  packed: PackedColumns,
  row: number,
  columns: SampleColumns,
  samples: number[],
  lengths: Int32Array,
  predictions: Int32Array,
): void {
  const { maxSeqLength: seq, maxPredictionsPerSeq: samplePreds } = columns;
  const rowPreds = packed.maxPredictionsPerRow;
  let offset = 0;
  let predicted = 0;
  samples.forEach((sample, slot) => {
    const length = lengths[sample]!;
    const [from, to] = [sample * seq, row * seq + offset];
    packed.input_ids.set(columns.input_ids.subarray(from, from + length), to);
    packed.input_mask.set(columns.input_mask.subarray(from, from + length), to);
    packed.segment_ids.set(columns.segment_ids.subarray(from, from + length), to);
    for (let t = 0; t < length; t++) packed.position_ids[to + t] = t;
    packed.sample_ids.fill(slot, to, to + length);
    for (let p = 0; p < predictions[sample]!; p++) {
      const [source, target] = [sample * samplePreds + p, row * rowPreds + predicted++];
      packed.masked_lm_positions[target] = columns.masked_lm_positions[source]! + offset;
      packed.masked_lm_ids[target] = columns.masked_lm_ids[source]!;
      packed.masked_lm_weights[target] = columns.masked_lm_weights[source]!;
    }
    const at = row * packed.maxPerRow + slot;
    packed.next_sentence_positions[at] = offset;
    packed.next_sentence_labels[at] = columns.next_sentence_labels[sample]!;
    packed.next_sentence_weights[at] = 1;
    packed.source_samples[at] = sample;
    offset += length;
  });
}

const TOKEN_FIELDS = ["input_ids", "input_mask", "segment_ids", "position_ids", "sample_ids"] as const;
const PREDICTION_FIELDS = ["masked_lm_positions", "masked_lm_ids", "masked_lm_weights"] as const;
const SLOT_FIELDS = ["next_sentence_positions", "next_sentence_labels", "next_sentence_weights"] as const;

/** Copies row `from` of `source` into row `to` of `target` (same widths). */
function copyRow(target: PackedColumns, to: number, source: PackedColumns, from: number): void {
  const widths = [
    [TOKEN_FIELDS, source.maxSeqLength],
    [PREDICTION_FIELDS, source.maxPredictionsPerRow],
    [SLOT_FIELDS, source.maxPerRow],
  ] as const;
  for (const [fields, width] of widths)
    for (const field of fields) target[field].set(source[field].subarray(from * width, (from + 1) * width), to * width);
  // the slots' source indices name samples of another input: a batch of rows keeps none
  for (let slot = 0; slot < source.maxPerRow; slot++)
    if (source.next_sentence_weights[from * source.maxPerRow + slot] !== 0) target.sampleCount++;
}

/**
 * Packed batches of exactly `rowsPerBatch` rows from a stream of sample batches (the loader's): `add` packs an
 * incoming batch on its own and queues its rows, `next` hands out a full batch while one is queued. One seeded
 * generator serves the whole stream, so the same stream and seed give the same batches. Samples per batch vary
 * (its `sampleCount`); a batch's `source_samples` are all -1 (they named samples of the incoming batches).
 *   const batcher = new PackedBatcher(rows, { maxPerRow: 3, seed });
 *   let batch; while (!(batch = batcher.next())) batcher.add(await nextLoaderBatch());
 */
export class PackedBatcher {
  private readonly random: PyRandom;
  private readonly queue: { packed: PackedColumns; row: number }[] = [];

  constructor(
    readonly rowsPerBatch: number,
    private readonly options: PackingOptions = {},
  ) {
    if (!(Number.isInteger(rowsPerBatch) && rowsPerBatch >= 1))
      throw new PackingError(`rowsPerBatch must be a positive integer, got ${rowsPerBatch}`);
    this.random = new PyRandom(options.seed ?? 0);
  }

  /** Packs `samples` and queues their rows. */
  add(samples: SampleColumns): void {
    const packed = packWith(samples, this.options, this.random);
    for (let row = 0; row < packed.count; row++) this.queue.push({ packed, row });
  }

  /** The next batch of `rowsPerBatch` rows, or undefined while fewer are queued. */
  next(): PackedColumns | undefined {
    if (this.queue.length < this.rowsPerBatch) return undefined;
    const taken = this.queue.splice(0, this.rowsPerBatch);
    const out = emptyPacked(this.rowsPerBatch, taken[0]!.packed);
    taken.forEach(({ packed, row }, to) => copyRow(out, to, packed, row));
    return out;
  }
}

/** Every full batch of `rowsPerBatch` packed rows from `batches` (rows left over at its end are dropped). */
export function* packedBatches(
  batches: Iterable<SampleColumns>,
  rowsPerBatch: number,
  options: PackingOptions = {},
): Generator<PackedColumns, void> {
  const batcher = new PackedBatcher(rowsPerBatch, options);
  for (const batch of batches) {
    batcher.add(batch);
    for (let packed = batcher.next(); packed; packed = batcher.next()) yield packed;
  }
}

/** Fraction of token slots that are padding: 1 - real tokens / (rows * max_seq_length). */
export function paddingFraction({
  count,
  maxSeqLength,
  input_mask,
}: Pick<PackedColumns, "count" | "maxSeqLength" | "input_mask">): number {
  let real = 0;
  for (const bit of input_mask) real += bit;
  return count === 0 ? 0 : 1 - real / (count * maxSeqLength);
}

/**
 * A packed batch as the eleven input tensors of a packed train step (bert_train_step.ts's `packedBertBatchOf`),
 * on `devices` (sharded on the row axis over several).
 */
export function packedToTensors(packed: PackedColumns, devices?: readonly string[]): PackedBertBatchTensors {
  const { count, maxSeqLength: seq, maxPredictionsPerRow: preds, maxPerRow: slots } = packed;
  const place = (t: Tensor) => (devices && devices.length > 1 ? t.shard([...devices], 0) : t);
  const make = (data: Int32Array | Float32Array, shape: number[]) =>
    place(new Tensor(data, { device: devices?.[0] }).reshape(shape));
  return [
    make(packed.input_ids, [count, seq]),
    make(packed.segment_ids, [count, seq]),
    make(packed.input_mask, [count, seq]),
    make(packed.masked_lm_positions, [count, preds]),
    make(packed.masked_lm_ids, [count, preds]),
    make(packed.masked_lm_weights, [count, preds]),
    make(packed.next_sentence_labels, [count, slots]),
    make(packed.position_ids, [count, seq]),
    make(packed.sample_ids, [count, seq]),
    make(packed.next_sentence_positions, [count, slots]),
    make(packed.next_sentence_weights, [count, slots]),
  ];
}
