// Pretraining samples in columns: the one in-memory shape that every reader (our shards,
// the reference's TFRecords) returns and that the dataloader, inspect and the trainer use.

/** `count` samples; field names follow the reference, row-major `[count, width]`. */
export interface SampleColumns {
  count: number;
  maxSeqLength: number;
  maxPredictionsPerSeq: number;
  /** [count, maxSeqLength] token ids of `[CLS] A [SEP] B [SEP]` after masking, 0-padded. */
  input_ids: Int32Array;
  /** [count, maxSeqLength] 1 for real tokens, 0 for padding. */
  input_mask: Int32Array;
  /** [count, maxSeqLength] 0 for A and its [SEP] (and [CLS]), 1 for B and the last [SEP]. */
  segment_ids: Int32Array;
  /** [count, maxPredictionsPerSeq] masked positions ascending, 0-padded. */
  masked_lm_positions: Int32Array;
  /** [count, maxPredictionsPerSeq] original token ids at those positions, 0-padded. */
  masked_lm_ids: Int32Array;
  /** [count, maxPredictionsPerSeq] 1.0 per real prediction, then 0.0. */
  masked_lm_weights: Float32Array;
  /** [count] 1 if B is a random next segment, 0 if it is the true continuation. */
  next_sentence_labels: Int32Array;
}

/** The reference's field names, in the reference's order. */
export const SAMPLE_FIELDS = [
  "input_ids",
  "input_mask",
  "segment_ids",
  "masked_lm_positions",
  "masked_lm_ids",
  "masked_lm_weights",
  "next_sentence_labels",
] as const;
export type SampleField = (typeof SAMPLE_FIELDS)[number];
