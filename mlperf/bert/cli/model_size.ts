// Which BERT to train on a data folder: a size by the amount of data unless the user names one, with the vocab and
// sequence length of the data's manifest, written as the bert_config.json the trainer reads (BERT_CONFIG).
import { BERT_PRESETS, type BertConfig } from "../../../models/bert.ts";
import type { ManifestSettings } from "../data/manifest.ts";

/** The sizes `--model` names: BERT's presets, and BERT-small (4 layers, hidden 512) between mini and base. */
export const MODEL_SIZES = {
  tiny: BERT_PRESETS.tiny,
  mini: BERT_PRESETS.mini,
  small: { ...BERT_PRESETS.base, numHiddenLayers: 4, hiddenSize: 512, numAttentionHeads: 8, intermediateSize: 2048 },
  base: BERT_PRESETS.base,
  large: BERT_PRESETS.large,
} as const satisfies Record<string, BertConfig>;
export type ModelSize = keyof typeof MODEL_SIZES;

/**
 * The largest size worth training on this many train samples, smallest first: a model with far more parameters
 * than the data has tokens only memorises it (BERT-base was trained on about 3.3 billion words, 60 million
 * samples of 512 tokens).
 */
const SIZE_BY_SAMPLES: readonly [maxSamples: number, size: ModelSize][] = [
  [100_000, "tiny"],
  [1_000_000, "mini"],
  [10_000_000, "small"],
  [50_000_000, "base"],
  [Number.POSITIVE_INFINITY, "large"],
];

/** The size for `trainSamples` samples, with the reason in words. */
export function sizeForData(trainSamples: number): { size: ModelSize; reason: string } {
  const index = SIZE_BY_SAMPLES.findIndex(([maxSamples]) => trainSamples < maxSamples);
  const [maxSamples, size] = SIZE_BY_SAMPLES[index]!;
  const from = index === 0 ? 0 : SIZE_BY_SAMPLES[index - 1]![0];
  const count = (n: number) => n.toLocaleString("en");
  const range = !Number.isFinite(maxSamples)
    ? `over ${count(from)}`
    : from === 0
      ? `under ${count(maxSamples)}`
      : `${count(from)} to ${count(maxSamples)}`;
  return { size, reason: `${count(trainSamples)} train samples (${range})` };
}

/** A size's config for data made with `settings`: its vocab, and positions for its sequence length. */
export function configForData(size: ModelSize, settings: ManifestSettings): BertConfig {
  return { ...MODEL_SIZES[size], vocabSize: settings.vocabSize, maxPositionEmbeddings: settings.maxSeqLength };
}

/** `config` as a bert_config.json (the reference's field names). */
export function bertConfigJson(config: BertConfig): string {
  const json = {
    vocab_size: config.vocabSize,
    hidden_size: config.hiddenSize,
    num_hidden_layers: config.numHiddenLayers,
    num_attention_heads: config.numAttentionHeads,
    intermediate_size: config.intermediateSize,
    hidden_act: "gelu",
    hidden_dropout_prob: config.hiddenDropoutProb,
    attention_probs_dropout_prob: config.attentionProbsDropoutProb,
    max_position_embeddings: config.maxPositionEmbeddings,
    type_vocab_size: config.typeVocabSize,
    initializer_range: config.initializerRange,
    layer_norm_eps: config.layerNormEps,
  };
  return `${JSON.stringify(json, null, 2)}\n`;
}

/** "tiny: 2 layers, hidden 128, 2 heads" */
export const describeConfig = (config: BertConfig): string =>
  `${config.numHiddenLayers} layers, hidden ${config.hiddenSize}, ${config.numAttentionHeads} heads, vocab ${config.vocabSize}`;
