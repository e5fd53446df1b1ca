import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import {
  PackedBatcher,
  type PackedColumns,
  PackingError,
  assignRows,
  packSamples,
  packedBatches,
  paddingFraction,
  sampleSizes,
} from "../../mlperf/bert/data/packing.ts";
import type { SampleColumns } from "../../mlperf/bert/data/samples.ts";
import { emptySamples } from "../../mlperf/bert/data/shard.ts";
import { samplesFromJsonl } from "./sample-helpers.ts";

interface HandSample {
  ids: number[];
  segments: number[];
  masked: [position: number, id: number][];
  nsp: number;
}

function columnsOf(samples: HandSample[], maxSeqLength: number, maxPredictionsPerSeq: number): SampleColumns {
  const columns = emptySamples(samples.length, { maxSeqLength, maxPredictionsPerSeq });
  samples.forEach(({ ids, segments, masked, nsp }, i) => {
    columns.input_ids.set(ids, i * maxSeqLength);
    columns.input_mask.fill(1, i * maxSeqLength, i * maxSeqLength + ids.length);
    columns.segment_ids.set(segments, i * maxSeqLength);
    masked.forEach(([position, id], p) => {
      columns.masked_lm_positions[i * maxPredictionsPerSeq + p] = position;
      columns.masked_lm_ids[i * maxPredictionsPerSeq + p] = id;
      columns.masked_lm_weights[i * maxPredictionsPerSeq + p] = 1;
    });
    columns.next_sentence_labels[i] = nsp;
  });
  return columns;
}

// lengths 5, 3, 6, 2 into rows of 10: best fit decreasing puts 6+3 in one row and 5+2 in the other
const HAND: HandSample[] = [
  {
    ids: [101, 10, 102, 11, 102],
    segments: [0, 0, 0, 1, 1],
    masked: [
      [1, 20],
      [3, 21],
    ],
    nsp: 1,
  },
  { ids: [101, 12, 102], segments: [0, 0, 0], masked: [[1, 22]], nsp: 0 },
  { ids: [101, 13, 102, 14, 15, 102], segments: [0, 0, 0, 1, 1, 1], masked: [[4, 23]], nsp: 1 },
  { ids: [101, 16], segments: [0, 0], masked: [[1, 24]], nsp: 0 },
];

const rowOf = (packed: PackedColumns, firstSample: number): number =>
  Array.from({ length: packed.count }, (_, r) => r).find(
    (r) => packed.source_samples[r * packed.maxPerRow] === firstSample,
  )!;
const slice = (data: ArrayLike<number>, row: number, width: number): number[] =>
  Array.from(data).slice(row * width, (row + 1) * width);

test("packing a hand-checkable set gives the expected rows, positions, masks and labels", () => {
  const packed = packSamples(columnsOf(HAND, 10, 2), { maxPerRow: 3, maxPredictionsPerRow: 3 });
  assert.equal(packed.count, 2);
  assert.equal(packed.sampleCount, 4);
  const row = rowOf(packed, 2);
  assert.deepEqual(slice(packed.source_samples, row, 3), [2, 1, -1]);
  assert.deepEqual(slice(packed.input_ids, row, 10), [101, 13, 102, 14, 15, 102, 101, 12, 102, 0]);
  assert.deepEqual(slice(packed.input_mask, row, 10), [1, 1, 1, 1, 1, 1, 1, 1, 1, 0]);
  assert.deepEqual(slice(packed.segment_ids, row, 10), [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]);
  assert.deepEqual(slice(packed.position_ids, row, 10), [0, 1, 2, 3, 4, 5, 0, 1, 2, 0]);
  assert.deepEqual(slice(packed.sample_ids, row, 10), [0, 0, 0, 0, 0, 0, 1, 1, 1, -1]);
  assert.deepEqual(slice(packed.masked_lm_positions, row, 3), [4, 7, 0]);
  assert.deepEqual(slice(packed.masked_lm_ids, row, 3), [23, 22, 0]);
  assert.deepEqual(slice(packed.masked_lm_weights, row, 3), [1, 1, 0]);
  assert.deepEqual(slice(packed.next_sentence_positions, row, 3), [0, 6, 0]);
  assert.deepEqual(slice(packed.next_sentence_labels, row, 3), [1, 0, 0]);
  assert.deepEqual(slice(packed.next_sentence_weights, row, 3), [1, 1, 0]);
  const other = rowOf(packed, 0);
  assert.deepEqual(slice(packed.source_samples, other, 3), [0, 3, -1]);
  assert.deepEqual(slice(packed.position_ids, other, 10), [0, 1, 2, 3, 4, 0, 1, 0, 0, 0]);
  assert.deepEqual(slice(packed.masked_lm_positions, other, 3), [1, 3, 6]);
  assert.deepEqual(slice(packed.next_sentence_positions, other, 3), [0, 5, 0]);
});

test("a row takes no more masked-LM predictions than it has room for", () => {
  // with 2 predictions a row, sample 0 (2 predictions) cannot take sample 3 (1), which then fills sample 2's row
  const packed = packSamples(columnsOf(HAND, 10, 2), { maxPerRow: 3 });
  assert.equal(packed.maxPredictionsPerRow, 2);
  assert.deepEqual(slice(packed.source_samples, rowOf(packed, 0), 3), [0, -1, -1]);
  assert.deepEqual(slice(packed.source_samples, rowOf(packed, 2), 3), [2, 1, -1]);
  assert.deepEqual(slice(packed.source_samples, rowOf(packed, 3), 3), [3, -1, -1]);
});

test("a row holds at most maxPerRow samples", () => {
  const rows = assignRows([1, 1, 1, 1, 1], [0, 0, 0, 0, 0], {
    maxSeqLength: 10,
    maxPerRow: 2,
    maxPredictionsPerRow: 1,
  });
  assert.deepEqual(rows, [[0, 1], [2, 3], [4]]);
});

const reference128 = (): SampleColumns =>
  samplesFromJsonl(readFileSync("test/fixtures/bert-preprocess/samples-seq128-pred20-dupe2.jsonl", "utf8"), 128, 20);

/** Each packed sample cut back out of its row, checked field by field against the input sample. */
function assertRowsHoldTheSamples(packed: PackedColumns, columns: SampleColumns): void {
  const { maxSeqLength: seq, maxPredictionsPerSeq: preds } = columns;
  const { lengths, predictions } = sampleSizes(columns);
  const seen = new Set<number>();
  for (let row = 0; row < packed.count; row++) {
    let tokens = 0;
    let predicted = 0;
    for (let slot = 0; slot < packed.maxPerRow; slot++) {
      const sample = packed.source_samples[row * packed.maxPerRow + slot]!;
      if (sample < 0) continue;
      assert.ok(!seen.has(sample), `sample ${sample} packed twice`);
      seen.add(sample);
      const start = packed.next_sentence_positions[row * packed.maxPerRow + slot]!;
      assert.equal(start, tokens, `row ${row} slot ${slot} starts after the previous sample`);
      const length = lengths[sample]!;
      const at = row * seq + start;
      assert.deepEqual(
        packed.input_ids.subarray(at, at + length),
        columns.input_ids.subarray(sample * seq, sample * seq + length),
      );
      assert.deepEqual(
        packed.segment_ids.subarray(at, at + length),
        columns.segment_ids.subarray(sample * seq, sample * seq + length),
      );
      assert.ok(packed.sample_ids.subarray(at, at + length).every((id) => id === slot));
      assert.ok(packed.position_ids.subarray(at, at + length).every((p, t) => p === t));
      for (let p = 0; p < predictions[sample]!; p++) {
        const [from, to] = [sample * preds + p, row * packed.maxPredictionsPerRow + predicted + p];
        assert.equal(packed.masked_lm_positions[to], columns.masked_lm_positions[from]! + start);
        assert.equal(packed.masked_lm_ids[to], columns.masked_lm_ids[from]);
        assert.equal(packed.masked_lm_weights[to], 1);
      }
      assert.equal(packed.next_sentence_labels[row * packed.maxPerRow + slot], columns.next_sentence_labels[sample]);
      tokens += length;
      predicted += predictions[sample]!;
    }
    assert.ok(tokens <= seq, `row ${row} holds ${tokens} tokens, over ${seq}`);
    assert.ok(packed.input_mask.subarray(row * seq + tokens, (row + 1) * seq).every((bit) => bit === 0));
    assert.ok(packed.sample_ids.subarray(row * seq + tokens, (row + 1) * seq).every((id) => id === -1));
    const predictionsEnd = (row + 1) * packed.maxPredictionsPerRow;
    assert.ok(
      packed.masked_lm_weights
        .subarray(predictionsEnd - packed.maxPredictionsPerRow + predicted, predictionsEnd)
        .every((w) => w === 0),
    );
  }
  assert.equal(seen.size, columns.count, "every sample packed");
}

test("packing the reference's seq-128 samples keeps every sample exactly once, each row within 128 tokens", () => {
  const columns = reference128();
  const packed = packSamples(columns, { seed: 7 });
  assertRowsHoldTheSamples(packed, columns);
  assert.ok(packed.count < columns.count, `${packed.count} rows for ${columns.count} samples`);
  assert.ok(paddingFraction(packed) < paddingFraction(columns));
});

test("the same samples and seed give the same rows; another seed orders the rows differently", () => {
  const columns = reference128();
  const [a, b, c] = [
    packSamples(columns, { seed: 1 }),
    packSamples(columns, { seed: 1 }),
    packSamples(columns, { seed: 2 }),
  ];
  assert.deepEqual(a, b);
  assert.notDeepEqual(a.source_samples, c.source_samples);
  const rowsOf = (p: PackedColumns) =>
    Array.from({ length: p.count }, (_, r) => slice(p.source_samples, r, p.maxPerRow).join(",")).sort();
  assert.deepEqual(rowsOf(a), rowsOf(c));
});

test("packed batches have exactly the asked rows and count their samples", () => {
  const columns = reference128();
  const chunks = [0, 1, 2].map((k) => {
    const part = emptySamples(60, columns);
    for (const field of ["input_ids", "input_mask", "segment_ids"] as const)
      part[field].set(columns[field].subarray(k * 60 * 128, (k + 1) * 60 * 128));
    for (const field of ["masked_lm_positions", "masked_lm_ids", "masked_lm_weights"] as const)
      part[field].set(columns[field].subarray(k * 60 * 20, (k + 1) * 60 * 20));
    part.next_sentence_labels.set(columns.next_sentence_labels.subarray(k * 60, (k + 1) * 60));
    return part;
  });
  const total = [...chunks].reduce((rows, chunk) => rows + packSamples(chunk).count, 0);
  const batches = [...packedBatches(chunks, 8)];
  assert.equal(batches.length, Math.floor(total / 8));
  for (const batch of batches) {
    assert.equal(batch.count, 8);
    let slots = 0;
    for (const weight of batch.next_sentence_weights) slots += weight;
    assert.equal(batch.sampleCount, slots);
  }
  assert.deepEqual([...packedBatches(chunks, 8, { seed: 3 })], [...packedBatches(chunks, 8, { seed: 3 })]);
});

test("bad options are errors naming the value", () => {
  assert.throws(() => packSamples(columnsOf(HAND, 10, 2), { maxPerRow: 0 }), PackingError);
  assert.throws(() => packSamples(columnsOf(HAND, 10, 2), { maxPredictionsPerRow: 1 }), /sample 0 has 2 predictions/);
  assert.throws(() => packedBatches([], 0).next(), /rowsPerBatch must be a positive integer, got 0/);
});

test("a batcher hands out a batch only once enough rows are queued", () => {
  const batcher = new PackedBatcher(3, { maxPerRow: 3, maxPredictionsPerRow: 3 });
  assert.equal(batcher.next(), undefined);
  batcher.add(columnsOf(HAND, 10, 2)); // 2 rows
  assert.equal(batcher.next(), undefined);
  batcher.add(columnsOf(HAND, 10, 2));
  const batch = batcher.next()!;
  assert.equal(batch.count, 3);
  assert.equal(batch.sampleCount, 6);
  assert.equal(batcher.next(), undefined, "one row left queued");
});
