// Test helpers: SampleColumns from the reference's samples-*.jsonl fixtures.

import type { SampleColumns } from "../../mlperf/bert/data/samples.ts";

/** Parses `samples-*.jsonl` text (one reference sample per line) into columns. */
export function samplesFromJsonl(text: string, maxSeqLength: number, maxPredictionsPerSeq: number): SampleColumns {
  const rows = text
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as Record<string, number[]>);
  const column = (field: string) => rows.flatMap((row) => row[field]!);
  return {
    count: rows.length,
    maxSeqLength,
    maxPredictionsPerSeq,
    input_ids: Int32Array.from(column("input_ids")),
    input_mask: Int32Array.from(column("input_mask")),
    segment_ids: Int32Array.from(column("segment_ids")),
    masked_lm_positions: Int32Array.from(column("masked_lm_positions")),
    masked_lm_ids: Int32Array.from(column("masked_lm_ids")),
    masked_lm_weights: Float32Array.from(column("masked_lm_weights")),
    next_sentence_labels: Int32Array.from(column("next_sentence_labels")),
  };
}
