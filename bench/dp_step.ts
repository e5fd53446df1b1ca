// The cost of data parallelism across processes on one machine: BERT train steps of one process against
// `mpirun -np N` of the same trainer with the same global batch, each rank given 1/N of the cores (THREADS),
// so that both runs have the same compute. The ratio of replayed-step medians is the overhead of the ranks:
// the gradient all-reduce (bucketed through host memory), the per-step collectives, and N smaller GEMMs.
// Usage: node --import tsx bench/dp_step.ts [--model mini] [--ranks 2] [--bs 16] [--seq 128] [--steps 12]
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { argsWithUsage } from "./args.ts";
import { BERT_PRESETS, type BertPresetName } from "../models/bert.ts";
import { parseStepLine } from "../mlperf/bert/report.ts";

const HELP = `Usage: node --import tsx bench/dp_step.ts [options]   (prints JSON)
  --model NAME   BERT preset: tiny, mini, base, large (default mini)
  --ranks N      processes of the data-parallel run (default 2)
  --bs N         global batch size (default 16)
  --seq N        sequence length (default 128)
  --steps N      steps of each run; the first two (plain, capture) are not counted (default 12)
  --device NAME  CPU (default) or JS
  --help         this text`;

const { values } = argsWithUsage(HELP, {
  model: { type: "string", default: "mini" },
  ranks: { type: "string", default: "2" },
  bs: { type: "string", default: "16" },
  seq: { type: "string", default: "128" },
  steps: { type: "string", default: "12" },
  device: { type: "string", default: "CPU" },
});
const preset = BERT_PRESETS[values.model as BertPresetName];
if (!preset) throw new Error(`--model ${values.model}: one of ${Object.keys(BERT_PRESETS).join(", ")}\n${HELP}`);
const [ranks, bs, seq, steps] = [values.ranks, values.bs, values.seq, values.steps].map(Number) as number[];
const cores = availableParallelism();

const dir = mkdtempSync(join(tmpdir(), "tsgrad-dp-step-"));
const configPath = join(dir, "bert_config.json");
writeFileSync(
  configPath,
  JSON.stringify({
    vocab_size: preset.vocabSize,
    hidden_size: preset.hiddenSize,
    num_hidden_layers: preset.numHiddenLayers,
    num_attention_heads: preset.numAttentionHeads,
    intermediate_size: preset.intermediateSize,
    hidden_act: "gelu",
    hidden_dropout_prob: 0.1,
    attention_probs_dropout_prob: 0.1,
    max_position_embeddings: 512,
    type_vocab_size: 2,
    initializer_range: 0.02,
  }),
);
const env = {
  ...process.env,
  BENCHMARK: String(steps),
  BERT_CONFIG: configPath,
  BS: String(bs),
  EVAL_BS: String(bs / ranks),
  MAX_EVAL_STEPS: "1",
  MAX_SEQ_LENGTH: String(seq),
  MAX_PREDICTIONS_PER_SEQ: String(Math.round(seq * 0.15)),
  DEVICE: values.device,
  BEAM: "0",
  TSGRAD_CACHE: join(dir, "kernel-cache"),
  SAVE_CKPT_DIR: join(dir, "ckpts"),
};

/** Median step time of the replayed steps (from the third on), from the trainer's step lines. */
function run(label: string, command: string, args: string[], threads: number): { medianMs: number; losses: number[] } {
  const result = spawnSync(command, args, {
    env: { ...env, THREADS: String(threads) },
    encoding: "utf8",
    maxBuffer: 64 << 20,
  });
  if (result.status !== 0) throw new Error(`${label} failed (${result.status}):\n${result.stdout}\n${result.stderr}`);
  const lines = result.stdout.split("\n").map((line) => parseStepLine(line.replace(/^\[\d+,\d+\]<stdout>:/, "")));
  const stats = lines.filter((s) => s !== null);
  const replays = stats.slice(2).map((s) => s.totalMs);
  if (replays.length === 0) throw new Error(`${label}: no replayed steps in\n${result.stdout}`);
  return {
    medianMs: [...replays].sort((a, b) => a - b)[Math.floor(replays.length / 2)]!,
    losses: stats.map((s) => s.loss),
  };
}

const trainer = ["--import", "tsx", "mlperf/bert/train.ts"];
try {
  const single = run("one process", process.execPath, trainer, cores);
  const multi = run(
    `mpirun -np ${ranks}`,
    "mpirun",
    ["--allow-run-as-root", "--oversubscribe", "--tag-output", "-np", String(ranks), process.execPath, ...trainer],
    Math.max(1, Math.floor(cores / ranks)),
  );
  const params =
    preset.vocabSize * preset.hiddenSize +
    preset.numHiddenLayers * (4 * preset.hiddenSize ** 2 + 2 * preset.hiddenSize * preset.intermediateSize);
  console.log(
    JSON.stringify(
      {
        bench: "dp_step",
        model: values.model,
        device: values.device,
        globalBatch: bs,
        seq,
        cores,
        approxParameters: params,
        oneProcess: { threads: cores, stepMs: single.medianMs },
        ranks: { ranks, threadsEach: Math.max(1, Math.floor(cores / ranks)), stepMs: multi.medianMs },
        overhead: multi.medianMs / single.medianMs,
      },
      null,
      2,
    ),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
