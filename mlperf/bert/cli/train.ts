// `tsgrad train`: the trainer in a run folder, the screen showing its phases, evaluations and a summary, and the
// console log, MLPerf log, checkpoints and report side by side. `--data DIR` trains on a data folder's shards (its
// manifest.json) with a model sized to them unless `--model` names one.
import { createWriteStream, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { isAbsolute, join, resolve } from "node:path";
import { bertConfigFromJson, type BertConfig } from "../../../models/bert.ts";
import { readManifest, type DataManifest } from "../data/manifest.ts";
import { mmddhhmm, runTrainerProcess, timestamp } from "../demo.ts";
import { KNOB_NAMES, knobsHelp, parseKnobFlags, parseKnobs, type Knobs } from "../knobs.ts";
import { writeRunReport } from "../report.ts";
import { manifestFiles, modelConfig } from "../train.ts";
import { UsageError } from "../exit_status.ts";
import { parseCommand, splitOwnOptions } from "./args.ts";
import { MODEL_SIZES, bertConfigJson, configForData, sizeForData, type ModelSize } from "./model_size.ts";
import { ConsoleView, checkedMlperfLog, summaryLines } from "./screen.ts";

export const TRAIN_USAGE = `usage: npx tsgrad train [--data DIR] [--model SIZE|FILE] [--out DIR] [--init-phase] [--verbose]
                         [--KNOB value ...]

Trains BERT with LAMB until the masked-LM accuracy reaches TARGET (or TRAIN_STEPS), evaluating
every EVAL_STEP_FREQ steps, in a run folder: the console log, the MLPerf log, checkpoints,
bert_config.json and report.html. Ctrl-C stops after the current step with a checkpoint.

  --data DIR      a data folder \`tsgrad preprocess\` made (its manifest.json): its shards, sequence
                  length, predictions and vocab; without it, BASEDIR's MLPerf layout (train/, eval/)
  --model SIZE    tiny, mini, small, base or large, or a bert_config.json file. With --data the
                  default is sized to the train samples (under 100,000 tiny, 1M mini, 10M small,
                  50M base, then large); without, BERT_CONFIG (BERT-large when absent)
  --out DIR       the run folder (default ./runs/<timestamp>)
  --init-phase    first the untimed init phase (compile every kernel on INIT_BENCHMARK=5 fake
                  steps), as run_and_time does; the MLPerf log then holds both phases
  --verbose       every console line on the screen (hyperparameters, each step, MLPerf lines);
                  by default they go to the console log only
  -h, --help      this text

With --data, defaults sized to it (a knob you set wins): an evaluation and a checkpoint after
each pass over the train samples (at most MLPerf's interval), at most 10 passes (TRAIN_STEPS),
no init checkpoint (INIT_CKPT_DIR is the run folder). An eval set smaller than EVAL_SET_SIZE
is evaluated once as it is, with a warning (STRICT_EVAL_SET=1 refuses it).

Knobs (environment variable / flag; a flag wins over the environment):
${knobsHelp()}`;

const TRAIN_OPTIONS = {
  data: { type: "string" },
  model: { type: "string" },
  out: { type: "string" },
  "init-phase": { type: "boolean", default: false },
  verbose: { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
} as const;

/** Knobs whose values are paths: made absolute, since the trainer runs in the run folder. */
const PATH_KNOBS = ["BASEDIR", "DATA", "INIT_CKPT_DIR", "BERT_CONFIG", "SAVE_CKPT_DIR", "RESUME"];

/** Passes over the train samples the data-sized TRAIN_STEPS allows. */
const DATA_PASSES = 10;

/** The knobs set by the environment and by flags (a flag wins), path knobs made absolute. */
function explicitKnobs(knobArgs: readonly string[]): Record<string, string> {
  const fromEnv = Object.entries(process.env).filter(([name, value]) => KNOB_NAMES.has(name) && value !== "");
  const knobs: Record<string, string> = {
    ...Object.fromEntries(fromEnv as [string, string][]),
    ...Object.fromEntries(parseKnobFlags(knobArgs).values),
  };
  for (const name of PATH_KNOBS)
    if (knobs[name] !== undefined && !isAbsolute(knobs[name])) knobs[name] = resolve(knobs[name]);
  return knobs;
}

/** The model config `--model` names (a size, or a bert_config.json), else the size for the data. */
function chooseModel(
  model: string | undefined,
  manifest: DataManifest,
): { config: BertConfig; file?: string; why: string } {
  const trainSamples = manifest.train.reduce((sum, shard) => sum + shard.samples, 0);
  if (model === undefined) {
    const { size, reason } = sizeForData(trainSamples);
    return { config: configForData(size, manifest.settings), why: `${size}, sized to ${reason}` };
  }
  if (model in MODEL_SIZES) return { config: configForData(model as ModelSize, manifest.settings), why: model };
  if (!existsSync(model))
    throw new UsageError(`--model ${model}: neither a size (${Object.keys(MODEL_SIZES).join(", ")}) nor a file`);
  const file = resolve(model);
  const config = bertConfigFromJson(JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>, file);
  return { config, file, why: file };
}

/**
 * The knobs a data folder implies: its shards and widths, the model's config file (written into the run folder
 * unless given), and steps sized to its train samples; said in two lines.
 */
function dataKnobs(
  dir: string,
  model: string | undefined,
  explicit: Record<string, string>,
  out: string,
  say: (line: string) => void,
): Record<string, string> {
  const manifest = readManifest(dir);
  const { settings } = manifest;
  const trainSamples = manifest.train.reduce((sum, shard) => sum + shard.samples, 0);
  say(
    `data: ${dir}: ${trainSamples} train samples in ${manifest.train.length} shards, ${manifest.eval?.samples ?? "no"} eval samples; sequences of ${settings.maxSeqLength} tokens, ${settings.maxPredictionsPerSeq} predictions, vocab ${settings.vocabSize}`,
  );
  const knobs: Record<string, string> = {
    DATA: dir,
    MAX_SEQ_LENGTH: String(settings.maxSeqLength),
    MAX_PREDICTIONS_PER_SEQ: String(settings.maxPredictionsPerSeq),
    INIT_CKPT_DIR: out,
  };
  if (explicit.BERT_CONFIG === undefined || model !== undefined) {
    const chosen = chooseModel(model, manifest);
    knobs.BERT_CONFIG = chosen.file ?? join(out, "bert_config.json");
    if (chosen.file === undefined) writeFileSync(knobs.BERT_CONFIG, bertConfigJson(chosen.config));
    say(`model size: ${chosen.why} (--model picks another)`);
  }
  // the MLPerf defaults (TRAIN_STEPS, EVAL_STEP_FREQ) are for Wikipedia's 156 million samples
  const mlperf = parseKnobs([], { ...explicit, ...knobs })!;
  const stepsPerPass = Math.ceil(trainSamples / mlperf.BS);
  const evalFrequency = Math.min(mlperf.EVAL_STEP_FREQ, stepsPerPass);
  knobs.EVAL_STEP_FREQ = String(evalFrequency);
  knobs.SAVE_CKPT_FREQ = String(evalFrequency);
  knobs.CKPT = "1";
  knobs.TRAIN_STEPS = String(Math.min(mlperf.TRAIN_STEPS, DATA_PASSES * stepsPerPass));
  return knobs;
}

/**
 * The knobs of the run, as environment variables for the trainer: what the user set, over the run folder's and
 * the data folder's defaults; the data checked against the model and the knobs before a process starts.
 */
function runEnvironment(
  values: { data?: string; model?: string },
  knobArgs: readonly string[],
  out: string,
): { env: Record<string, string>; knobs: Knobs } {
  const explicit = explicitKnobs(knobArgs);
  const defaults: Record<string, string> = { LOGMLPERF: "1", SAVE_CKPT_DIR: join(out, "ckpts") };
  const say = (line: string) => console.log(line);
  if (values.data !== undefined)
    Object.assign(defaults, dataKnobs(resolve(values.data), values.model, explicit, out, say));
  else if (values.model !== undefined) {
    if (values.model in MODEL_SIZES)
      throw new UsageError(
        `--model ${values.model}: a size needs --data (its vocab and sequence length); give a bert_config.json`,
      );
    defaults.BERT_CONFIG = resolve(values.model);
  }
  const env = { ...defaults, ...explicit };
  const knobs = parseKnobs([], env)!;
  // one line naming each mismatch of the data with the model or the knobs
  if (knobs.DATA !== "") manifestFiles(knobs, { vocabSize: modelConfig(knobs).vocabSize, source: knobs.BERT_CONFIG });
  return { env, knobs };
}

/** `tsgrad train`; returns the exit status (errors are thrown: the caller reports them). */
export async function trainCommand(argv: readonly string[]): Promise<number> {
  const { own, rest: knobArgs } = splitOwnOptions(argv, TRAIN_OPTIONS);
  const { values } = parseCommand(own, TRAIN_OPTIONS);
  if (values.help) {
    console.log(TRAIN_USAGE);
    return 0;
  }
  const out = resolve(values.out ?? join("runs", timestamp(new Date())));
  mkdirSync(out, { recursive: true });
  const { env, knobs } = runEnvironment(values, knobArgs, out);

  // the phases, as run_and_time runs them: each a trainer process in the run folder, appending to one console log
  const consoleLog = join(out, `bert_train_${mmddhhmm(new Date())}_${knobs.SEED}.log`);
  const log = createWriteStream(consoleLog);
  const view = new ConsoleView(values.verbose);
  let status = 0;
  if (values["init-phase"]) {
    const init = {
      ...env,
      INITMLPERF: "1",
      BENCHMARK: process.env.INIT_BENCHMARK ?? "5",
      TSGRAD_CACHE: process.env.TSGRAD_CACHE ?? join(out, "kernel-cache"),
    };
    status = await runTrainerProcess(out, init, log, false, 1, view);
  }
  if (status === 0) status = await runTrainerProcess(out, { ...env, RUNMLPERF: "1" }, log, false, 1, view);
  await new Promise<void>((done) => log.end(done));

  const mlperfLog = checkedMlperfLog(join(out, `result_bert_${knobs.SEED}.log`));
  const report = join(out, "report.html");
  if (mlperfLog) writeRunReport([consoleLog], report, { title: "tsgrad BERT training" });
  const files = {
    runDir: out,
    consoleLog,
    mlperfLog,
    report: mlperfLog ? report : null,
    checkpoints: knobs.SAVE_CKPT_DIR,
  };
  console.log(`\n${summaryLines(view.outcome, files, status).join("\n")}`);
  return status;
}
