// BERT pretraining in TensorFlow.js ops, for bench/webgpu.ts: the architecture of models/bert.ts (post-layer-norm
// encoder, GELU, tied masked-LM decoder, NSP head on the pooled first token), the same shapes and batch, so that a
// train step of each framework does the same matmuls. tfjs has no LAMB: Adam, whose update costs about the same.
// Weights are drawn here (truncated at nothing: this times steps, it does not train a model to compare).
import type { SampleColumns } from "../mlperf/bert/data/samples.ts";
import type { BertConfig } from "../models/bert.ts";

/** A tfjs tensor as the bench uses it. */
export interface TfTensor {
  data(): Promise<unknown>;
  dispose(): void;
  readonly shape: number[];
}
type Op = (...args: unknown[]) => TfTensor;
/** The tfjs module: its ops by name, and the optimizers the bench calls. */
export type TfModule = Record<string, Op> & {
  train: Record<string, (rate: number) => { minimize(loss: () => TfTensor, returnCost: true): TfTensor | null }>;
};

/** One Adam step of BERT pretraining on `batch` (tfjs tensors made once), returning the loss tensor. */
export function tfjsBertStep(tf: TfModule, config: BertConfig, batch: SampleColumns): () => TfTensor {
  const { hiddenSize: h, numAttentionHeads: heads, intermediateSize: inner, vocabSize: vocab } = config;
  const [b, s, p] = [batch.count, batch.maxSeqLength, batch.maxPredictionsPerSeq];
  const d = h / heads;
  let seed = 1;
  const weight = (shape: number[]) => tf.variable!(tf.randomNormal!(shape, 0, 0.02, "float32", seed++));
  const zeros = (shape: number[]) => tf.variable!(tf.zeros!(shape));
  const ones = (shape: number[]) => tf.variable!(tf.ones!(shape));
  const dense = (inputs: number, outputs: number) => ({ w: weight([inputs, outputs]), b: zeros([outputs]) });
  const norm = () => ({ g: ones([h]), b: zeros([h]) });
  const words = weight([vocab, h]);
  const positions = weight([config.maxPositionEmbeddings, h]);
  const types = weight([config.typeVocabSize, h]);
  const embeddingNorm = norm();
  const layers = Array.from({ length: config.numHiddenLayers }, () => ({
    q: dense(h, h),
    k: dense(h, h),
    v: dense(h, h),
    out: dense(h, h),
    norm1: norm(),
    up: dense(h, inner),
    down: dense(inner, h),
    norm2: norm(),
  }));
  const pooler = dense(h, h);
  const transform = dense(h, h);
  const transformNorm = norm();
  const decoderBias = zeros([vocab]);
  const nsp = dense(h, 2);

  const ids = tf.tensor2d!(batch.input_ids, [b, s], "int32");
  const segments = tf.tensor2d!(batch.segment_ids, [b, s], "int32");
  const mask = tf.tensor2d!(Float32Array.from(batch.input_mask), [b, s]);
  const flatPositions = tf.tensor1d!(
    Int32Array.from(batch.masked_lm_positions, (position, i) => Math.floor(i / p) * s + position),
    "int32",
  );
  const labels = tf.oneHot!(tf.tensor1d!(batch.masked_lm_ids, "int32"), vocab);
  const weights = tf.tensor1d!(batch.masked_lm_weights);
  const nspLabels = tf.oneHot!(tf.tensor1d!(batch.next_sentence_labels, "int32"), 2);
  const range = tf.range!(0, s, 1, "int32");

  const linear = (x: TfTensor, layer: { w: TfTensor; b: TfTensor }) => tf.add!(tf.matMul!(x, layer.w), layer.b);
  const layerNorm = (x: TfTensor, n: { g: TfTensor; b: TfTensor }) => {
    const mean = tf.mean!(x, -1, true);
    const centred = tf.sub!(x, mean);
    const variance = tf.mean!(tf.square!(centred), -1, true);
    return tf.add!(tf.mul!(tf.div!(centred, tf.sqrt!(tf.add!(variance, 1e-12))), n.g), n.b);
  };
  const gelu = (x: TfTensor) => tf.mul!(tf.mul!(x, 0.5), tf.add!(tf.erf!(tf.div!(x, Math.SQRT2)), 1));
  const heads4 = (x: TfTensor) => tf.transpose!(tf.reshape!(x, [b, s, heads, d]), [0, 2, 1, 3]);
  // -10000 where the key is padding, as the model's additive mask
  const additive = tf.reshape!(tf.mul!(tf.sub!(1, mask), -10000), [b, 1, 1, s]);

  const loss = (): TfTensor => {
    let x = tf.add!(tf.add!(tf.gather!(words, ids), tf.gather!(positions, range)), tf.gather!(types, segments));
    x = tf.reshape!(layerNorm(x, embeddingNorm), [b * s, h]);
    for (const layer of layers) {
      const [q, k, v] = [layer.q, layer.k, layer.v].map((w) => heads4(linear(x, w)));
      const scores = tf.add!(tf.div!(tf.matMul!(q, k, false, true), Math.sqrt(d)), additive);
      const context = tf.reshape!(tf.transpose!(tf.matMul!(tf.softmax!(scores), v), [0, 2, 1, 3]), [b * s, h]);
      x = layerNorm(tf.add!(x, linear(context, layer.out)), layer.norm1);
      x = layerNorm(tf.add!(x, linear(gelu(linear(x, layer.up)), layer.down)), layer.norm2);
    }
    const masked = layerNorm(gelu(linear(tf.gather!(x, flatPositions), transform)), transformNorm);
    const logits = tf.add!(tf.matMul!(masked, words, false, true), decoderBias);
    const tokenLoss = tf.neg!(tf.sum!(tf.mul!(tf.logSoftmax!(logits), labels), -1));
    const maskedLm = tf.div!(tf.sum!(tf.mul!(tokenLoss, weights)), tf.add!(tf.sum!(weights), 1e-5));
    const first = tf.reshape!(tf.slice!(tf.reshape!(x, [b, s, h]), [0, 0, 0], [b, 1, h]), [b, h]);
    const nspLogits = linear(tf.tanh!(linear(first, pooler)), nsp);
    const nextSentence = tf.neg!(tf.mean!(tf.sum!(tf.mul!(tf.logSoftmax!(nspLogits), nspLabels), -1)));
    return tf.add!(maskedLm, nextSentence);
  };
  const optimizer = tf.train.adam!(1e-4);
  return () => optimizer.minimize(loss, true)!;
}
