// From the reference's TF1 BERT checkpoint (the MLPerf init checkpoint `model.ckpt-28252`,
// Google's `bert/...` and `cls/...` variables) to tsgrad's BERT parameters, which use
// Hugging Face names and store linear weights as [out, in].
//
// TF kernels are [in, out] and are transposed; LayerNorm's gamma/beta become weight/bias;
// the masked-LM output bias and the NSP head have names of their own. Optimizer slots and
// counters (`.../adam_m`, `.../adam_v`, `global_step`, ...) are skipped, never read.

import { io } from "../src/index.ts";

/** Last name components of optimizer state written beside the weights (BERT's AdamWeightDecay/LAMB, tf.train.Adam). */
const OPTIMIZER_STATE = new Set([
  "adam_m",
  "adam_v",
  "AdamWeightDecayOptimizer",
  "AdamWeightDecayOptimizer_1",
  "Adam",
  "Adam_1",
  "global_step",
  "beta1_power",
  "beta2_power",
]);

/** Variables whose names do not follow the path-to-dots rule. */
const SPECIAL_NAMES: Record<string, string> = {
  "bert/embeddings/word_embeddings": "bert.embeddings.word_embeddings.weight",
  "bert/embeddings/position_embeddings": "bert.embeddings.position_embeddings.weight",
  "bert/embeddings/token_type_embeddings": "bert.embeddings.token_type_embeddings.weight",
  "cls/predictions/output_bias": "cls.predictions.bias",
  "cls/seq_relationship/output_weights": "cls.seq_relationship.weight", // already [2, hidden]
  "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
};

const LEAF_NAMES: Record<string, { leaf: string; transpose: boolean }> = {
  kernel: { leaf: "weight", transpose: true },
  bias: { leaf: "bias", transpose: false },
  gamma: { leaf: "weight", transpose: false },
  beta: { leaf: "bias", transpose: false },
};

export interface BertTfNameMapping {
  name: string;
  /** True for TF kernels, stored [in, out] where tsgrad wants [out, in]. */
  transpose: boolean;
}

export function isTfOptimizerState(tfName: string): boolean {
  return OPTIMIZER_STATE.has(tfName.slice(tfName.lastIndexOf("/") + 1));
}

/**
 * tsgrad's name for a TF BERT variable, or undefined when it follows no rule:
 *
 *   bertNameFromTf("bert/encoder/layer_3/attention/self/query/kernel")
 *   // { name: "bert.encoder.layer.3.attention.self.query.weight", transpose: true }
 */
export function bertNameFromTf(tfName: string): BertTfNameMapping | undefined {
  const special = SPECIAL_NAMES[tfName];
  if (special) return { name: special, transpose: false };
  const parts = tfName.split("/");
  const leaf = LEAF_NAMES[parts.pop()!];
  if (!leaf || parts.length === 0) return undefined;
  const path = parts.map((part) => part.replace(/^layer_(\d+)$/, "layer.$1"));
  return { name: [...path, leaf.leaf].join("."), transpose: leaf.transpose };
}

/** Every parameter of tsgrad's BertForPretraining with `numLayers` encoder layers. */
export function bertParameterNames(numLayers: number): string[] {
  const linear = (prefix: string) => [`${prefix}.weight`, `${prefix}.bias`];
  const names = [
    "bert.embeddings.word_embeddings.weight",
    "bert.embeddings.position_embeddings.weight",
    "bert.embeddings.token_type_embeddings.weight",
    ...linear("bert.embeddings.LayerNorm"),
  ];
  for (let i = 0; i < numLayers; i++) {
    const layer = `bert.encoder.layer.${i}`;
    names.push(
      ...linear(`${layer}.attention.self.query`),
      ...linear(`${layer}.attention.self.key`),
      ...linear(`${layer}.attention.self.value`),
      ...linear(`${layer}.attention.output.dense`),
      ...linear(`${layer}.attention.output.LayerNorm`),
      ...linear(`${layer}.intermediate.dense`),
      ...linear(`${layer}.output.dense`),
      ...linear(`${layer}.output.LayerNorm`),
    );
  }
  names.push(
    ...linear("bert.pooler.dense"),
    ...linear("cls.predictions.transform.dense"),
    ...linear("cls.predictions.transform.LayerNorm"),
    "cls.predictions.bias",
    ...linear("cls.seq_relationship"),
  );
  return names;
}

export interface BertTfMappedTensor {
  tfName: string;
  name: string;
  transpose: boolean;
  /** The shape tsgrad stores ([out, in] for linear weights). */
  shape: number[];
}

export interface BertTfMappingPlan {
  mapped: BertTfMappedTensor[];
  /** Optimizer slots and counters, left unread. */
  skipped: string[];
  /** Checkpoint variables that are neither a parameter nor optimizer state. */
  unmapped: string[];
  /** Parameters the checkpoint does not hold. */
  missing: string[];
}

/** Decide, from a checkpoint's listing alone, which variable feeds which parameter. */
export function planBertTfMapping(entries: io.TfCheckpointEntry[], numLayers: number): BertTfMappingPlan {
  const expected = new Set(bertParameterNames(numLayers));
  const plan: BertTfMappingPlan = { mapped: [], skipped: [], unmapped: [], missing: [] };
  const sources = new Map<string, string>();
  for (const entry of entries) {
    if (isTfOptimizerState(entry.name)) {
      plan.skipped.push(entry.name);
      continue;
    }
    const mapping = bertNameFromTf(entry.name);
    if (!mapping || !expected.has(mapping.name)) {
      plan.unmapped.push(entry.name);
      continue;
    }
    const where = `TF variable "${entry.name}" (for ${mapping.name})`;
    const earlier = sources.get(mapping.name);
    if (earlier) throw new io.TfCheckpointError(`${where}: ${mapping.name} is already fed by "${earlier}"`);
    if (entry.dtype !== "DT_FLOAT") throw new io.TfCheckpointError(`${where}: dtype ${entry.dtype}, expected DT_FLOAT`);
    if (mapping.transpose && entry.shape.length !== 2) {
      throw new io.TfCheckpointError(`${where}: kernel shape [${entry.shape.join(", ")}] is not 2-D`);
    }
    sources.set(mapping.name, entry.name);
    const shape = mapping.transpose ? [entry.shape[1]!, entry.shape[0]!] : entry.shape;
    plan.mapped.push({ tfName: entry.name, ...mapping, shape });
  }
  plan.missing = [...expected].filter((name) => !sources.has(name));
  return plan;
}

export interface BertTfWeights {
  weights: Map<string, { shape: number[]; data: Float32Array }>;
  skipped: string[];
  unmapped: string[];
  missing: string[];
}

/**
 * Read a TF1 BERT checkpoint's weights under tsgrad's names, kernels transposed to [out, in].
 * Only the mapped tensors' bytes are read; `onProgress` follows them.
 */
export async function loadBertTfCheckpoint(
  prefix: string,
  numLayers: number,
  options: { onProgress?: (bytesRead: number, bytesTotal: number, tfName: string) => void } = {},
): Promise<BertTfWeights> {
  const { mapped, skipped, unmapped, missing } = planBertTfMapping(await io.listTfCheckpoint(prefix), numLayers);
  const byTfName = new Map(mapped.map((tensor) => [tensor.tfName, tensor]));
  const tensors = await io.readTfCheckpoint(prefix, {
    filter: (name) => byTfName.has(name),
    onProgress: options.onProgress,
  });
  const weights = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const { tfName, name, transpose, shape } of mapped) {
    const data = tensors.get(tfName)!.data as Float32Array;
    weights.set(name, { shape, data: transpose ? transpose2d(data, shape[1]!, shape[0]!) : data });
  }
  return { weights, skipped, unmapped, missing };
}

/** The [cols, rows] transpose of a row-major [rows, cols] matrix. */
function transpose2d(data: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(data.length);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c]!;
  }
  return out;
}
