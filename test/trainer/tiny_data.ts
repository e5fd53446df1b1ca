// A tiny BERT run's data and settings for the trainer tests (JS device, seconds per phase).
import { DEMO_SETTINGS, type DemoSettings } from "../../mlperf/bert/demo.ts";

/**
 * results4-style text where 6 documents in 7 are "ka ka ...", the rest "lo lo ...": predicting
 * "ka" is right about 85% of the time, so accuracy crosses 0.72 (and stays below 1.0) within a
 * few steps. It checks the trainer's plumbing; the demo (npm run demo) is where a model learns.
 */
export function skewedCorpus(documents: number) {
  const doc = (d: number) =>
    Array.from({ length: 3 }, () =>
      Array(4 + (d % 3))
        .fill(d % 7 === 0 ? "lo" : "ka")
        .join(" "),
    ).join("\n");
  const text = (from: number, count: number) =>
    `${Array.from({ length: count }, (_, i) => doc(from + i)).join("\n\n")}\n`;
  return {
    trainText: text(0, documents),
    evalText: text(documents, 20),
    vocabText: "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nka\nlo\n",
  };
}

export const TINY: DemoSettings = {
  ...DEMO_SETTINGS,
  preprocess: { ...DEMO_SETTINGS.preprocess, maxSeqLength: 16, maxPredictionsPerSeq: 3, dupeFactor: 2 },
  trainParts: 2,
  model: { hiddenSize: 16, numHiddenLayers: 1, numAttentionHeads: 2, intermediateSize: 32 },
  knobs: {
    ...DEMO_SETTINGS.knobs,
    BS: 8,
    EVAL_BS: 32,
    OPT_BASE_LEARNING_RATE: 0.05,
    NUM_WARMUP_STEPS: 2,
    TRAIN_STEPS: 40,
    EVAL_STEP_FREQ: 4,
    SAVE_CKPT_FREQ: 4,
    KEEP_CKPT_AMOUNT: 2,
  },
};
