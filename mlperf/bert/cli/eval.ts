// `tsgrad eval`: the masked-LM accuracy of a saved model (the trainer's bert_final.safe, or one of its step
// checkpoints) on an eval set, each sample once, by the trainer's own evaluation.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { Device, Tensor, dist, dtypes, jit, nn } from "../../../src/index.ts";
import { BertForPretraining, bertConfigFromJson } from "../../../models/bert.ts";
import { bertBatchOf, bertEvalStep, type BertBatchTensors } from "../../../models/bert_train_step.ts";
import { UsageError } from "../exit_status.ts";
import { knobsHelp, parseKnobs } from "../knobs.ts";
import { checkShards, evaluate, manifestFiles } from "../train.ts";
import { parseCommand, splitOwnOptions } from "./args.ts";
import { readManifest } from "../data/manifest.ts";
import { describeConfig } from "./model_size.ts";

export const EVAL_USAGE = `usage: npx tsgrad eval --checkpoint FILE (--data DIR | --eval-file SHARD) [--config FILE]
                        [--KNOB value ...]

Evaluates a saved model on an eval set, every sample once: masked-LM accuracy and loss, as the
trainer's evaluations compute them.

  --checkpoint FILE  the model: bert_final.safe, or a step checkpoint (ckpts/step_*.safe)
  --data DIR         a data folder \`tsgrad preprocess\` made: its eval shard, sequence length and
                     predictions (checked against the model's vocab)
  --eval-file SHARD  an eval shard (or TFRecord) instead; MAX_SEQ_LENGTH and
                     MAX_PREDICTIONS_PER_SEQ must be its widths
  --config FILE      the model's bert_config.json (default: beside the checkpoint or one folder up,
                     where \`tsgrad train\` writes it)
  -h, --help         this text

Knobs that apply: EVAL_BS, DEVICE, GPUS, DEFAULT_FLOAT, EVAL_BEAM, MAX_SEQ_LENGTH,
MAX_PREDICTIONS_PER_SEQ (environment variable / flag):
${knobsHelp()}`;

const EVAL_OPTIONS = {
  checkpoint: { type: "string" },
  data: { type: "string" },
  "eval-file": { type: "string" },
  config: { type: "string" },
  help: { type: "boolean", short: "h", default: false },
} as const;

/** bert_config.json beside the checkpoint, or in the folder above (a run folder's ckpts/). */
function configBeside(checkpoint: string): string {
  const candidates = [
    join(dirname(checkpoint), "bert_config.json"),
    join(dirname(checkpoint), "..", "bert_config.json"),
  ];
  const found = candidates.find((path) => existsSync(path));
  if (found === undefined)
    throw new UsageError(`no bert_config.json beside ${checkpoint} or one folder up: name it with --config`);
  return found;
}

/** The model's tensors from a saved model or a training state (whose model tensors are named `model.*`). */
function modelState(model: BertForPretraining, saved: nn.StateDict): nn.StateDict {
  const names = Object.keys(nn.getStateDict(model));
  if (names.every((name) => name in saved)) return Object.fromEntries(names.map((name) => [name, saved[name]!]));
  return Object.fromEntries(names.map((name) => [name, saved[`model.${name}`]!]).filter(([, tensor]) => tensor));
}

/** `tsgrad eval`; returns the exit status. */
export async function evalCommand(argv: readonly string[]): Promise<number> {
  const { own, rest: knobArgs } = splitOwnOptions(argv, EVAL_OPTIONS);
  const { values } = parseCommand(own, EVAL_OPTIONS);
  if (values.help) {
    console.log(EVAL_USAGE);
    return 0;
  }
  if (values.checkpoint === undefined) throw new UsageError("--checkpoint FILE is needed: the model to evaluate");
  if ((values.data === undefined) === (values["eval-file"] === undefined))
    throw new UsageError("give one of --data DIR and --eval-file SHARD: the eval set");
  const configPath = values.config ?? configBeside(values.checkpoint);
  const config = bertConfigFromJson(
    JSON.parse(readFileSync(configPath, "utf8")) as Record<string, unknown>,
    configPath,
  );
  const vocab = { vocabSize: config.vocabSize, source: configPath };

  const dataKnobs: Record<string, string> = {};
  if (values.data !== undefined) {
    const { settings } = readManifest(values.data);
    dataKnobs.DATA = values.data;
    dataKnobs.MAX_SEQ_LENGTH = String(settings.maxSeqLength);
    dataKnobs.MAX_PREDICTIONS_PER_SEQ = String(settings.maxPredictionsPerSeq);
  }
  const knobs = parseKnobs(knobArgs, { ...dataKnobs, ...process.env })!;
  const evalFiles = values.data !== undefined ? manifestFiles(knobs, vocab).eval : [values["eval-file"]!];
  const shards = checkShards({ train: [], eval: evalFiles }, vocab);

  Device.DEFAULT = knobs.DEVICE;
  const kind = knobs.DEVICE.split(":")[0]!;
  const devices = Array.from({ length: knobs.GPUS }, (_, i) => Device.canonicalize(`${kind}:${i}`));
  if (knobs.DEFAULT_FLOAT === "HALF") Tensor.defaultFloat = dtypes.float16;
  const model = new BertForPretraining(config, { disableDropout: true });
  const { state, metadata } = nn.safeLoad(values.checkpoint);
  nn.loadStateDict(model, modelState(model, state), { source: values.checkpoint });
  if (devices.length > 1) nn.replicateParameters(model, devices);
  const evalStep = jit((...t: BertBatchTensors) => ({ ...bertEvalStep(model, bertBatchOf(t)) }));
  console.log(`model: ${describeConfig(config)} from ${values.checkpoint}`);
  console.log(`eval set: ${shards.evalSamples} samples in ${shards.eval.join(", ")}`);
  const { accuracy, loss } = evaluate(
    {
      knobs,
      comm: dist.init(),
      devices,
      evalStep,
      evalFiles: shards.eval,
      setSize: shards.evalSamples,
      vocabSize: config.vocabSize,
      // its line counts train samples as step x BS, which a saved model's BS need not be: the summary below instead
      print: () => {},
    },
    Number(metadata.step ?? 0),
    Math.ceil(shards.evalSamples / knobs.EVAL_BS),
  );
  const trained = metadata.step === undefined ? "" : ` (trained ${metadata.step} steps)`;
  console.log(
    `masked-LM accuracy ${accuracy.toFixed(4)}, loss ${loss.toFixed(4)} on ${shards.evalSamples} samples${trained}`,
  );
  return 0;
}
