// BERT for pretraining (masked LM + next-sentence prediction), as the MLPerf reference trains it:
// post-LayerNorm encoder, exact-erf GELU, masked-LM head over the gathered masked positions with
// its decoder tied to the word embeddings, NSP head on the tanh pooler.
//
// Property names are Hugging Face's (`bert.encoder.layer.0.attention.self.query.weight`, ...),
// snake_case included, because state dicts and checkpoints are keyed by them.
import { Tensor, TsgradError, dtypes, fmtShape, getenv, nn, prod } from "../src/index.ts";
import { bertParameterNames, loadBertTfCheckpoint } from "./bert_tf_names.ts";

export interface BertConfig {
  vocabSize: number;
  hiddenSize: number;
  numHiddenLayers: number;
  numAttentionHeads: number;
  intermediateSize: number;
  maxPositionEmbeddings: number;
  typeVocabSize: number;
  hiddenDropoutProb: number;
  attentionProbsDropoutProb: number;
  /** std of the truncated-normal initialisation. */
  initializerRange: number;
  layerNormEps: number;
}

const shared = {
  vocabSize: 30522,
  maxPositionEmbeddings: 512,
  typeVocabSize: 2,
  hiddenDropoutProb: 0.1,
  attentionProbsDropoutProb: 0.1,
  initializerRange: 0.02,
  layerNormEps: 1e-12,
};
const preset = (
  numHiddenLayers: number,
  hiddenSize: number,
  numAttentionHeads: number,
  intermediateSize: number,
): BertConfig => ({ ...shared, numHiddenLayers, hiddenSize, numAttentionHeads, intermediateSize });

export const BERT_PRESETS = {
  tiny: preset(2, 128, 2, 512),
  mini: preset(4, 256, 4, 1024),
  base: preset(12, 768, 12, 3072),
  large: preset(24, 1024, 16, 4096),
} as const satisfies Record<string, BertConfig>;
export type BertPresetName = keyof typeof BERT_PRESETS;

/** A config from the fields of a `bert_config.json` (the reference's `bert_config.json` for BERT-large). */
export function bertConfigFromJson(json: Record<string, unknown>, source = "bert_config.json"): BertConfig {
  const field = (key: string, fallback?: number): number => {
    const value = json[key] ?? fallback;
    if (typeof value !== "number" || !Number.isFinite(value))
      throw new TsgradError(`${source}: field "${key}" is ${JSON.stringify(json[key])}, expected a number`);
    return value;
  };
  const act = json.hidden_act ?? "gelu";
  if (act !== "gelu")
    throw new TsgradError(`${source}: hidden_act ${JSON.stringify(act)} is not supported (only "gelu")`);
  return {
    vocabSize: field("vocab_size"),
    hiddenSize: field("hidden_size"),
    numHiddenLayers: field("num_hidden_layers"),
    numAttentionHeads: field("num_attention_heads"),
    intermediateSize: field("intermediate_size"),
    maxPositionEmbeddings: field("max_position_embeddings"),
    typeVocabSize: field("type_vocab_size"),
    hiddenDropoutProb: field("hidden_dropout_prob"),
    attentionProbsDropoutProb: field("attention_probs_dropout_prob"),
    initializerRange: field("initializer_range", 0.02),
    layerNormEps: field("layer_norm_eps", 1e-12),
  };
}

/** Every parameter's shape by name, from the config alone (nothing allocated). */
export function bertParameterShapes(config: BertConfig): Map<string, number[]> {
  const { vocabSize: v, hiddenSize: h, intermediateSize: i, maxPositionEmbeddings: p, typeVocabSize: t } = config;
  const shapeOf = (name: string): number[] => {
    if (name === "bert.embeddings.word_embeddings.weight") return [v, h];
    if (name === "bert.embeddings.position_embeddings.weight") return [p, h];
    if (name === "bert.embeddings.token_type_embeddings.weight") return [t, h];
    if (name === "cls.predictions.bias") return [v];
    if (name.startsWith("cls.seq_relationship.")) return name.endsWith(".weight") ? [2, h] : [2];
    const out = name.includes(".intermediate.dense.") ? i : h;
    const inFeatures = /\.layer\.\d+\.output\.dense\./.test(name) ? i : h;
    return name.endsWith(".weight") && !name.includes("LayerNorm") ? [out, inFeatures] : [out];
  };
  return new Map(bertParameterNames(config.numHiddenLayers).map((name) => [name, shapeOf(name)]));
}

export function bertParameterCount(config: BertConfig): number {
  let total = 0;
  for (const shape of bertParameterShapes(config).values()) total += prod(shape);
  return total;
}

/**
 * One batch of pretraining inputs; shapes [B, S] except positions/ids/weights [B, P] and labels [B]. A packed
 * batch (rows of several samples, mlperf/bert/data/packing.ts) adds the three packed fields, together, and
 * gives labels and weights [B, N] for the N sample slots of a row.
 */
export interface BertInputs {
  inputIds: Tensor;
  segmentIds: Tensor;
  inputMask: Tensor;
  maskedLmPositions: Tensor;
  /** Packed: [B, S] each token's position within its own sample. */
  positionIds?: Tensor;
  /** Packed: [B, S] which sample of the row each token belongs to; attention stays within a sample. */
  sampleIds?: Tensor;
  /** Packed: [B, N] the first ([CLS]) token of each sample slot, read by the NSP head. */
  nextSentencePositions?: Tensor;
}
export interface BertLabels {
  maskedLmIds: Tensor;
  maskedLmWeights: Tensor;
  nextSentenceLabels: Tensor;
  /** Packed: [B, N] 1 for a slot holding a sample, 0 for an empty one. */
  nextSentenceWeights?: Tensor;
}
export type BertBatch = BertInputs & BertLabels;

export interface BertOutputs {
  /** [B, P, vocab] at the masked positions. */
  maskedLmLogits: Tensor;
  /** [B, 2] ([B, N, 2] packed): 0 = B follows A, 1 = B is random. */
  nextSentenceLogits: Tensor;
}
export interface BertLosses {
  loss: Tensor;
  maskedLmLoss: Tensor;
  nextSentenceLoss: Tensor;
}
/** A type, not an interface, so that a jitted eval step may return it as a record of tensors. */
export type BertMetrics = {
  maskedLmAccuracy: Tensor;
  nextSentenceAccuracy: Tensor;
  maskedLmLoss: Tensor;
  nextSentenceLoss: Tensor;
};

interface Init {
  weight: nn.Initializer;
  layerNormEps: number;
}
const linear = (inFeatures: number, outFeatures: number, init: Init): nn.Linear =>
  new nn.Linear(inFeatures, outFeatures, { weightInit: init.weight, biasInit: nn.zeros });

class BertEmbeddings {
  word_embeddings: nn.Embedding;
  position_embeddings: nn.Embedding;
  token_type_embeddings: nn.Embedding;
  LayerNorm: nn.LayerNorm;
  dropout: nn.Dropout;
  constructor(config: BertConfig, init: Init, dropout: number) {
    this.word_embeddings = new nn.Embedding(config.vocabSize, config.hiddenSize, { init: init.weight });
    this.position_embeddings = new nn.Embedding(config.maxPositionEmbeddings, config.hiddenSize, { init: init.weight });
    this.token_type_embeddings = new nn.Embedding(config.typeVocabSize, config.hiddenSize, { init: init.weight });
    this.LayerNorm = new nn.LayerNorm(config.hiddenSize, init.layerNormEps);
    this.dropout = new nn.Dropout(dropout);
  }
  /** `positionIds` [B, S] for packed rows; without, positions 0..S-1. */
  forward(inputIds: Tensor, segmentIds: Tensor, positionIds?: Tensor): Tensor {
    const seqLength = inputIds.shape[1]!;
    const table = this.position_embeddings.weight;
    if (seqLength > table.shape[0]!)
      throw new TsgradError(`BERT: sequence length ${seqLength} exceeds max_position_embeddings ${table.shape[0]}`);
    // positions 0..S-1 are the table's first S rows: a slice, no one-hot lookup needed
    const positions = positionIds
      ? this.position_embeddings.forward(positionIds)
      : table.shrink([[0, seqLength], null]).unsqueeze(0);
    const summed = this.word_embeddings
      .forward(inputIds)
      .add(positions)
      .add(this.token_type_embeddings.forward(segmentIds));
    return this.dropout.forward(this.LayerNorm.forward(summed));
  }
}

class BertSelfAttention {
  query: nn.Linear;
  key: nn.Linear;
  value: nn.Linear;
  constructor(
    hidden: number,
    readonly numHeads: number,
    readonly dropout: number,
    init: Init,
  ) {
    if (hidden % numHeads !== 0)
      throw new TsgradError(`BERT: hidden size ${hidden} is not a multiple of ${numHeads} attention heads`);
    this.query = linear(hidden, hidden, init);
    this.key = linear(hidden, hidden, init);
    this.value = linear(hidden, hidden, init);
  }
  /** `mask` is additive, [B, 1, 1, S] ([B, 1, S, S] for packed rows). */
  forward(x: Tensor, mask: Tensor): Tensor {
    const [batch, seq, hidden] = x.shape as [number, number, number];
    const heads = (t: Tensor): Tensor => t.reshape([batch, seq, this.numHeads, hidden / this.numHeads]).transpose(1, 2);
    const context = heads(this.query.forward(x)).scaledDotProductAttention(
      heads(this.key.forward(x)),
      heads(this.value.forward(x)),
      { mask, dropout: this.dropout },
    );
    return context.transpose(1, 2).reshape([batch, seq, hidden]);
  }
}

/** dense, dropout, then LayerNorm of the residual sum: the post-LN block ending. */
class BertResidualOutput {
  dense: nn.Linear;
  LayerNorm: nn.LayerNorm;
  dropout: nn.Dropout;
  constructor(inFeatures: number, hidden: number, dropout: number, init: Init) {
    this.dense = linear(inFeatures, hidden, init);
    this.LayerNorm = new nn.LayerNorm(hidden, init.layerNormEps);
    this.dropout = new nn.Dropout(dropout);
  }
  forward(x: Tensor, residual: Tensor): Tensor {
    return this.LayerNorm.forward(this.dropout.forward(this.dense.forward(x)).add(residual));
  }
}

class BertLayer {
  attention: { self: BertSelfAttention; output: BertResidualOutput };
  intermediate: { dense: nn.Linear };
  output: BertResidualOutput;
  constructor(config: BertConfig, init: Init, dropout: { hidden: number; attention: number }) {
    const h = config.hiddenSize;
    this.attention = {
      self: new BertSelfAttention(h, config.numAttentionHeads, dropout.attention, init),
      output: new BertResidualOutput(h, h, dropout.hidden, init),
    };
    this.intermediate = { dense: linear(h, config.intermediateSize, init) };
    this.output = new BertResidualOutput(config.intermediateSize, h, dropout.hidden, init);
  }
  forward(x: Tensor, mask: Tensor): Tensor {
    const attended = this.attention.output.forward(this.attention.self.forward(x, mask), x);
    return this.output.forward(this.intermediate.dense.forward(attended).gelu(), attended);
  }
}

class BertModel {
  embeddings: BertEmbeddings;
  encoder: { layer: BertLayer[] };
  pooler: { dense: nn.Linear };
  constructor(config: BertConfig, init: Init, dropout: { hidden: number; attention: number }) {
    this.embeddings = new BertEmbeddings(config, init, dropout.hidden);
    this.encoder = {
      layer: Array.from({ length: config.numHiddenLayers }, () => new BertLayer(config, init, dropout)),
    };
    this.pooler = { dense: linear(config.hiddenSize, config.hiddenSize, init) };
  }
  /** The sequence output [B, S, H]; packed rows give `packing` (positions and sample ids, [B, S]). */
  forward(
    inputIds: Tensor,
    segmentIds: Tensor,
    inputMask: Tensor,
    packing?: { positionIds: Tensor; sampleIds: Tensor },
  ): Tensor {
    const [batch, seq] = inputIds.shape as [number, number];
    // 0 where attended, -10000 on padding (and packed, on other samples' tokens), added to the attention scores
    const mask = packing
      ? sameSample(packing.sampleIds)
          .mul(inputMask.cast(dtypes.float32).reshape([batch, 1, 1, seq]))
          .neg()
          .add(1)
          .mul(-10000)
      : inputMask.cast(dtypes.float32).neg().add(1).mul(-10000).reshape([batch, 1, 1, seq]);
    let x = this.embeddings.forward(inputIds, segmentIds, packing?.positionIds);
    for (const layer of this.encoder.layer) x = layer.forward(x, mask.cast(x.dtype));
    return x;
  }
  /** tanh(dense(first token)), [B, H]; with `firstTokens` [B, N] (packed rows), of each of those tokens, [B, N, H]. */
  pool(sequence: Tensor, firstTokens?: Tensor): Tensor {
    const first = firstTokens ? gatherTokens(sequence, firstTokens) : sequence.index([], 0);
    return this.pooler.dense.forward(first).tanh();
  }
}

class BertLMPredictionHead {
  transform: { dense: nn.Linear; LayerNorm: nn.LayerNorm };
  bias: Tensor;
  /** The word embeddings, shared: private so that state dicts list them once. */
  readonly #decoderWeight: Tensor;
  constructor(config: BertConfig, init: Init, decoderWeight: Tensor) {
    this.transform = {
      dense: linear(config.hiddenSize, config.hiddenSize, init),
      LayerNorm: new nn.LayerNorm(config.hiddenSize, init.layerNormEps),
    };
    this.bias = nn.parameter(nn.zeros, [config.vocabSize]);
    this.#decoderWeight = decoderWeight;
  }
  forward(x: Tensor): Tensor {
    const transformed = this.transform.LayerNorm.forward(this.transform.dense.forward(x).gelu());
    return transformed.linear(this.#decoderWeight, this.bias);
  }
}

export class BertForPretraining {
  bert: BertModel;
  cls: { predictions: BertLMPredictionHead; seq_relationship: nn.Linear };

  /**
   * Initialised as MLPerf does (truncated normal with std `initializerRange` for linear and
   * embedding weights, zero biases, LayerNorm ones/zeros), reproducibly under `Tensor.manualSeed`.
   * `DISABLE_DROPOUT=1` (or `disableDropout`) turns every dropout off.
   */
  constructor(
    readonly config: BertConfig,
    { disableDropout = getenv("DISABLE_DROPOUT", 0) !== 0 }: { disableDropout?: boolean } = {},
  ) {
    const init: Init = { weight: nn.truncatedNormal(config.initializerRange), layerNormEps: config.layerNormEps };
    const dropout = disableDropout
      ? { hidden: 0, attention: 0 }
      : { hidden: config.hiddenDropoutProb, attention: config.attentionProbsDropoutProb };
    // every initialiser in one schedule: the CPU backend compiles them in one batch, not ~20 compiler runs
    const { bert, cls } = nn.initialisedTogether(() => {
      const bert = new BertModel(config, init, dropout);
      const predictions = new BertLMPredictionHead(config, init, bert.embeddings.word_embeddings.weight);
      return { bert, cls: { predictions, seq_relationship: linear(config.hiddenSize, 2, init) } };
    });
    this.bert = bert;
    this.cls = cls;
  }

  forward(inputs: BertInputs): BertOutputs {
    const { inputIds, segmentIds, inputMask, maskedLmPositions } = inputs;
    if (inputIds.ndim !== 2)
      throw new TsgradError(`BERT: input_ids must be [batch, seq], got ${fmtShape(inputIds.shape)}`);
    const packed = packedInputs(inputs);
    const sequence = this.bert.forward(inputIds, segmentIds, inputMask, packed);
    return {
      maskedLmLogits: this.cls.predictions.forward(gatherTokens(sequence, maskedLmPositions)),
      nextSentenceLogits: this.cls.seq_relationship.forward(this.bert.pool(sequence, packed?.nextSentencePositions)),
    };
  }

  /**
   * Loads a TF1 BERT checkpoint (the MLPerf init checkpoint `model.ckpt-28252`): every parameter
   * must be present; optimizer slots are skipped. Returns the names it skipped or could not map.
   */
  async loadFromTfCheckpoint(
    prefix: string,
    options: { onProgress?: (bytesRead: number, bytesTotal: number, tfName: string) => void } = {},
  ): Promise<{ skipped: string[]; unmapped: string[] }> {
    const { weights, skipped, unmapped, missing } = await loadBertTfCheckpoint(
      prefix,
      this.config.numHiddenLayers,
      options,
    );
    if (missing.length)
      throw new TsgradError(
        `${prefix}: the checkpoint lacks ${missing.length} BERT parameters: ${missing.slice(0, 8).join(", ")}${missing.length > 8 ? ", ..." : ""}`,
      );
    const state: nn.StateDict = {};
    for (const [name, { shape, data }] of weights)
      state[name] = new Tensor(data, { dtype: dtypes.float32 }).reshape(shape);
    nn.loadStateDict(this, state, { source: prefix });
    return { skipped, unmapped };
  }
}

/** 1 where query and key tokens belong to the same sample of a packed row, else 0: [B, 1, S, S] from [B, S]. */
function sameSample(sampleIds: Tensor): Tensor {
  const [batch, seq] = sampleIds.shape as [number, number];
  return sampleIds
    .reshape([batch, 1, seq, 1])
    .eq(sampleIds.reshape([batch, 1, 1, seq]))
    .cast(dtypes.float32);
}

/** The packed fields of `inputs`, all three or none (undefined: an unpacked batch). */
function packedInputs({
  positionIds,
  sampleIds,
  nextSentencePositions,
}: BertInputs): { positionIds: Tensor; sampleIds: Tensor; nextSentencePositions: Tensor } | undefined {
  if (!positionIds && !sampleIds && !nextSentencePositions) return undefined;
  if (!positionIds || !sampleIds || !nextSentencePositions)
    throw new TsgradError(
      `BERT: a packed batch needs positionIds, sampleIds and nextSentencePositions together, got ${[positionIds && "positionIds", sampleIds && "sampleIds", nextSentencePositions && "nextSentencePositions"].filter(Boolean).join(", ")}`,
    );
  return { positionIds, sampleIds, nextSentencePositions };
}

/** The tokens of `sequence` [B, S, H] at `positions` [B, P]: [B, P, H]. */
function gatherTokens(sequence: Tensor, positions: Tensor): Tensor {
  const [batch, , hidden] = sequence.shape as [number, number, number];
  return sequence.gather(1, positions.unsqueeze(-1).expand([batch, positions.shape[1]!, hidden]));
}

/** 16-bit logits go to float32 for the softmax; wider ones stay as they are. */
const atLeastFloat32 = (t: Tensor): Tensor => (t.dtype.itemsize < 4 ? t.cast(dtypes.float32) : t);

/**
 * Masked-LM cross-entropy + NSP cross-entropy, in float32 or wider. The masked-LM part is the weighted sum
 * over `masked_lm_weights` divided by their sum + `maskedLmEpsilon` (the reference adds 1e-5; 0: the
 * weighted mean), or by `maskedLmDenominator` where given (already with the epsilon). The NSP part is the
 * mean over samples: for packed rows over the slots `nextSentenceWeights` marks, so that packed and unpacked
 * batches of the same samples have the same loss.
 */
export function bertPretrainingLosses(
  { maskedLmLogits, nextSentenceLogits }: BertOutputs,
  { maskedLmIds, maskedLmWeights, nextSentenceLabels, nextSentenceWeights }: BertLabels,
  {
    maskedLmDenominator,
    maskedLmEpsilon = 0,
    nextSentenceDenominator,
  }: { maskedLmDenominator?: Tensor; maskedLmEpsilon?: number; nextSentenceDenominator?: Tensor } = {},
): BertLosses {
  const lmLogits = atLeastFloat32(maskedLmLogits);
  const lmSum = () =>
    lmLogits.sparseCategoricalCrossentropy(maskedLmIds, { weights: maskedLmWeights, reduction: "sum" });
  // data-parallel ranks divide by the whole batch's weight (shared out among them), not their own part's
  const maskedLmLoss = maskedLmDenominator
    ? lmSum().div(maskedLmDenominator)
    : maskedLmEpsilon > 0
      ? lmSum().div(maskedLmWeights.cast(dtypes.float32).sum().add(maskedLmEpsilon))
      : lmLogits.sparseCategoricalCrossentropy(maskedLmIds, { weights: maskedLmWeights });
  const nspLogits = atLeastFloat32(nextSentenceLogits);
  const nspLabels = nextSentenceLabels.reshape(nextSentenceLogits.shape.slice(0, -1));
  // packed micro-batches and ranks hold different numbers of samples: each divides by the whole step's count
  const nextSentenceLoss = nextSentenceDenominator
    ? nspLogits
        .sparseCategoricalCrossentropy(nspLabels, { weights: nextSentenceWeights, reduction: "sum" })
        .div(nextSentenceDenominator)
    : nspLogits.sparseCategoricalCrossentropy(nspLabels, { weights: nextSentenceWeights });
  return { loss: maskedLmLoss.add(nextSentenceLoss), maskedLmLoss, nextSentenceLoss };
}

/** The four eval metrics: weighted masked-LM accuracy, NSP accuracy, and both losses. */
export function bertPretrainingMetrics(outputs: BertOutputs, labels: BertLabels): BertMetrics {
  const { maskedLmLoss, nextSentenceLoss } = bertPretrainingLosses(outputs, labels);
  const weights = labels.maskedLmWeights.cast(dtypes.float32);
  const lmCorrect = outputs.maskedLmLogits
    .argmax({ axis: -1 })
    .eq(labels.maskedLmIds)
    .cast(dtypes.float32)
    .mul(weights);
  const nspCorrect = outputs.nextSentenceLogits
    .argmax({ axis: -1 })
    .eq(labels.nextSentenceLabels.reshape(outputs.nextSentenceLogits.shape.slice(0, -1)))
    .cast(dtypes.float32);
  const nspWeights = labels.nextSentenceWeights?.cast(dtypes.float32);
  return {
    maskedLmAccuracy: lmCorrect.sum().div(weights.sum().maximum(1e-12)),
    nextSentenceAccuracy: nspWeights ? nspCorrect.mul(nspWeights).sum().div(nspWeights.sum()) : nspCorrect.mean(),
    maskedLmLoss,
    nextSentenceLoss,
  };
}
