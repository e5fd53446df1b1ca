// The embedded demo (`npm run demo`): the whole benchmark flow on data the project makes itself,
// small enough for a laptop. It generates the demo corpus and its vocab (demo_corpus.ts),
// preprocesses them with the real pipeline into BASEDIR's layout, then runs the trainer's two
// phases exactly as run_and_time does (INITMLPERF=1 BENCHMARK=N, then RUNMLPERF=1, two
// processes appending to one MLPerf log) on a small BERT, until masked-LM accuracy reaches 0.72.
// Everything goes under one run folder: ./runs/<timestamp> unless --out says otherwise.
import { spawn } from "node:child_process";
import { createWriteStream, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { availableParallelism } from "node:os";
import { fileURLToPath, pathToFileURL } from "node:url";
import { evalShardPath, trainShardPath, vocabPath } from "./data/basedir.ts";
import { samplesFromText, shardSettings, type PreprocessSettings } from "./data/preprocess.ts";
import { BertTokenizer, parseVocab } from "./data/tokenizer.ts";
import { writeShard } from "./data/shard.ts";
import { DEMO_CORPUS_DEFAULTS, generateDemoCorpus, type DemoCorpus, type DemoCorpusOptions } from "./demo_corpus.ts";
import { writeRunReport } from "./report.ts";
import { integerOption, parseCommand } from "./cli/args.ts";
import { childStatus, nodeScriptCommand, relayStopSignals } from "./cli/child.ts";
import { ConsoleView, checkedMlperfLog, lineSplitter, summaryLines, type RunOutcome } from "./cli/screen.ts";

export interface DemoModel {
  hiddenSize: number;
  numHiddenLayers: number;
  numAttentionHeads: number;
  intermediateSize: number;
}

export interface DemoSettings {
  corpus: DemoCorpusOptions;
  preprocess: PreprocessSettings;
  /** Train shards the corpus is split into (the loader interleaves them). */
  trainParts: number;
  model: DemoModel;
  /** Knobs of the run (the trainer's names); BASEDIR and the paths are added per run. */
  knobs: Record<string, string | number>;
  /**
   * Fake steps of the init phase (BENCHMARK): two capture the jitted steps, the rest replay them; the estimate
   * is their median (the first replay also builds the step's graph, and takes many times as long as a later one).
   */
  initSteps: number;
}

export const DEMO_SETTINGS: Readonly<DemoSettings> = {
  corpus: DEMO_CORPUS_DEFAULTS,
  preprocess: {
    maxSeqLength: 32,
    maxPredictionsPerSeq: 5,
    randomSeed: 12345,
    dupeFactor: 5,
    maskedLmProb: 0.15,
    shortSeqProb: 0.1,
  },
  trainParts: 4,
  model: { hiddenSize: 64, numHiddenLayers: 2, numAttentionHeads: 2, intermediateSize: 256 },
  knobs: {
    BS: 32,
    EVAL_BS: 128,
    OPT_BASE_LEARNING_RATE: 0.03,
    NUM_WARMUP_STEPS: 20,
    TRAIN_STEPS: 1500,
    EVAL_STEP_FREQ: 50,
    TARGET: 0.72,
    DISABLE_DROPOUT: 1,
    LOGMLPERF: 1,
    SUBMISSION_PLATFORM: "cpu",
    CKPT: 1,
    SAVE_CKPT_FREQ: 500,
    KEEP_CKPT_AMOUNT: 2,
  },
  initSteps: 5,
};

export interface DemoData {
  basedir: string;
  trainSamples: number;
  evalSamples: number;
  vocabSize: number;
}

/**
 * Writes the demo's BASEDIR: vocab.txt, bert_config.json, train/ shards, eval/eval.safetensors,
 * all through the real tokenizer and sample maker (the reference's create_pretraining_data.py).
 */
export function prepareDemoData(
  basedir: string,
  settings: DemoSettings = DEMO_SETTINGS,
  corpus: Omit<DemoCorpus, "cycles"> = generateDemoCorpus(settings.corpus),
): DemoData {
  mkdirSync(basedir, { recursive: true });
  writeFileSync(vocabPath(basedir), corpus.vocabText);
  writeFileSync(join(basedir, "demo_train.txt"), corpus.trainText);
  writeFileSync(join(basedir, "demo_eval.txt"), corpus.evalText);
  const tokenizer = new BertTokenizer(parseVocab(corpus.vocabText, vocabPath(basedir)));
  const vocabSize = tokenizer.vocab.tokens.length;
  const { model, preprocess, trainParts } = settings;
  writeFileSync(
    join(basedir, "bert_config.json"),
    `${JSON.stringify(
      {
        vocab_size: vocabSize,
        hidden_size: model.hiddenSize,
        num_hidden_layers: model.numHiddenLayers,
        num_attention_heads: model.numAttentionHeads,
        intermediate_size: model.intermediateSize,
        hidden_act: "gelu",
        hidden_dropout_prob: 0.1,
        attention_probs_dropout_prob: 0.1,
        max_position_embeddings: preprocess.maxSeqLength,
        type_vocab_size: 2,
        initializer_range: 0.02,
      },
      null,
      2,
    )}\n`,
  );

  // documents are separated by blank lines: split the text into parts at document boundaries
  const documents = corpus.trainText.split("\n\n");
  let trainSamples = 0;
  for (let part = 0; part < trainParts; part++) {
    const text = documents.filter((_, d) => d % trainParts === part).join("\n\n");
    const partSettings = { ...preprocess, randomSeed: preprocess.randomSeed + part };
    const samples = samplesFromText(text, tokenizer, partSettings, { source: `demo train part ${part}` });
    mkdirSync(join(trainShardPath(basedir, part), ".."), { recursive: true });
    writeShard(trainShardPath(basedir, part), samples, shardSettings(partSettings, vocabSize));
    trainSamples += samples.count;
  }
  const evalSettings = { ...preprocess, dupeFactor: 1 };
  const evalSamples = samplesFromText(corpus.evalText, tokenizer, evalSettings, { source: "demo eval text" });
  mkdirSync(join(evalShardPath(basedir), ".."), { recursive: true });
  writeShard(evalShardPath(basedir), evalSamples, shardSettings(evalSettings, vocabSize));
  return { basedir, trainSamples, evalSamples: evalSamples.count, vocabSize };
}

/** Every knob of the demo run, as environment variables for the trainer. */
export function demoEnvironment(
  runDir: string,
  data: DemoData,
  settings: DemoSettings = DEMO_SETTINGS,
  seed = 12345,
): Record<string, string> {
  const evalBs = Number(settings.knobs.EVAL_BS);
  const knobs: Record<string, string | number> = {
    ...settings.knobs,
    SEED: seed,
    BASEDIR: data.basedir,
    INIT_CKPT_DIR: data.basedir,
    SAVE_CKPT_DIR: join(runDir, "ckpts"),
    MAX_SEQ_LENGTH: settings.preprocess.maxSeqLength,
    MAX_PREDICTIONS_PER_SEQ: settings.preprocess.maxPredictionsPerSeq,
    MAX_EVAL_STEPS: Math.ceil(data.evalSamples / evalBs),
    // every evaluation covers the demo's whole eval set (knobs.ts checks EVAL_BS*MAX_EVAL_STEPS against it)
    EVAL_SET_SIZE: data.evalSamples,
    // a cache of compiled kernels for this run only: the init phase clears it, as MLPerf requires
    TSGRAD_CACHE: join(runDir, "kernel-cache"),
  };
  return Object.fromEntries(Object.entries(knobs).map(([name, value]) => [name, String(value)]));
}

const TRAIN_SCRIPT = fileURLToPath(new URL("./train.ts", import.meta.url));

/** The command that starts the trainer: node itself, or under mpirun as `ranks` processes of one job. */
function trainerCommand(ranks: number): [string, string[]] {
  const [node, args] = nodeScriptCommand(TRAIN_SCRIPT);
  if (ranks === 1) return [node, args];
  const flags = ["-np", String(ranks)];
  if (process.getuid?.() === 0) flags.push("--allow-run-as-root");
  if (ranks > availableParallelism()) flags.push("--oversubscribe");
  return ["mpirun", [...flags, node, ...args]];
}

/**
 * Runs train.ts in `cwd` with `env` (as `ranks` processes under mpirun when above 1), copying its stdout to
 * `log` and what `view` shows of it to ours (nothing when quiet); resolves with its exit code.
 */
export function runTrainerProcess(
  cwd: string,
  env: Record<string, string>,
  log: NodeJS.WritableStream,
  quiet = false,
  ranks = 1,
  view: ConsoleView = new ConsoleView(true),
): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const [command, args] = trainerCommand(ranks);
    const child = spawn(command, args, {
      cwd,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", quiet ? "pipe" : "inherit"],
    });
    relayStopSignals(child);
    const screen = lineSplitter((line) => {
      const shown = view.show(line);
      if (!quiet && shown !== null) process.stdout.write(`${shown}\n`);
    });
    child.stdout!.on("data", (chunk: Buffer) => {
      log.write(chunk);
      screen.write(chunk.toString());
    });
    child.stdout!.on("end", () => screen.end());
    let stderr = "";
    child.stderr?.on("data", (chunk: Buffer) => void (stderr += chunk.toString()));
    child.on("error", (error) =>
      reject(
        ranks > 1 && (error as NodeJS.ErrnoException).code === "ENOENT"
          ? new Error(`demo: --ranks ${ranks} needs mpirun: install Open MPI (apt-get install openmpi-bin)`)
          : error,
      ),
    );
    child.on("close", (code, signal) => {
      if (code !== 0 && quiet) process.stderr.write(stderr);
      if (signal !== null) process.stderr.write(`demo: the trainer was killed by ${signal}\n`);
      resolvePromise(childStatus(code, signal));
    });
  });
}

export interface DemoRun {
  runDir: string;
  consoleLogPath: string;
  mlperfLogPath: string;
  reportPath: string;
  exitCode: number;
  /** What the run phase's console lines said of its end. */
  outcome: RunOutcome;
}

/** A run folder's default name: `20261204_201000`. */
export const timestamp = (date: Date): string => date.toISOString().replace(/[-:]/g, "").replace("T", "_").slice(0, 15);
/** The date in a console log's name, as run_and_time writes it: `12042010`. */
export const mmddhhmm = (date: Date): string =>
  [date.getMonth() + 1, date.getDate(), date.getHours(), date.getMinutes()]
    .map((n) => String(n).padStart(2, "0"))
    .join("");

/** Prepares the data, runs both phases, checks the MLPerf log and writes the run report. */
export async function runDemo(
  runDir: string,
  {
    settings = DEMO_SETTINGS,
    seed = 12345,
    quiet = false,
    env = {},
    ranks = 1,
    verbose = false,
  }: {
    settings?: DemoSettings;
    seed?: number;
    quiet?: boolean;
    env?: Record<string, string>;
    ranks?: number;
    /** Every console line on the screen, not only the phases and evaluations. */
    verbose?: boolean;
  } = {},
): Promise<DemoRun> {
  mkdirSync(runDir, { recursive: true });
  const say = (line: string) => void (quiet || console.error(line));
  say(`demo: preparing the corpus and shards in ${join(runDir, "data")}`);
  const data = prepareDemoData(join(runDir, "data"), settings);
  say(`demo: ${data.trainSamples} train samples, ${data.evalSamples} eval samples, vocab ${data.vocabSize}`);
  const consoleLogPath = join(runDir, `bert_demo_${mmddhhmm(new Date())}_${seed}.log`);
  const log = createWriteStream(consoleLogPath);
  const knobs = { ...demoEnvironment(runDir, data, settings, seed), ...env };
  const view = new ConsoleView(verbose);
  let exitCode = await runTrainerProcess(
    runDir,
    { ...knobs, INITMLPERF: "1", BENCHMARK: String(settings.initSteps) },
    log,
    quiet,
    ranks,
    view,
  );
  if (exitCode !== 0)
    console.error(`demo: the init phase failed (exit status ${exitCode}); the run phase was not started`);
  else exitCode = await runTrainerProcess(runDir, { ...knobs, RUNMLPERF: "1" }, log, quiet, ranks, view);
  await new Promise<void>((done) => log.end(done));
  const mlperfLogPath = join(runDir, `result_bert_${seed}.log`);
  const reportPath = join(runDir, "report.html");
  if (existsSync(mlperfLogPath)) writeRunReport([consoleLogPath], reportPath, { title: "tsgrad BERT demo" });
  return { runDir, consoleLogPath, mlperfLogPath, reportPath, exitCode, outcome: view.outcome };
}

const USAGE = `usage: npx tsgrad demo [--out DIR] [--seed N] [--ranks N] [--verbose]
       (or npm run demo -- [options])

Generates the demo corpus, preprocesses it with the real pipeline, and trains a small BERT
through both MLPerf phases (init, then the timed run) to masked-LM accuracy 0.72, with the
MLPerf log (checked here against the official rules), the console log, checkpoints and an
HTML report in one run folder. Trainer knobs set in the environment (BS=..., TRAIN_STEPS=...,
DEVICE=JS, ...) override the demo's.

  --out DIR     the run folder (default ./runs/<timestamp>)
  --seed N      the run's seed (default 12345)
  --ranks N     train data-parallel as N processes under mpirun (Open MPI), the same global
                batch split between them (default 1)
  --verbose     every console line on the screen (the hyperparameters, each step, the MLPerf
                log's lines); by default they go to the console log only`;

const DEMO_OPTIONS = {
  out: { type: "string" },
  seed: { type: "string", default: "12345" },
  ranks: { type: "string", default: "1" },
  verbose: { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
} as const;

/** `tsgrad demo`: the whole flow in a run folder, then a short summary; returns the exit status. */
export async function main(argv: string[]): Promise<number> {
  let values: ReturnType<typeof parseCommand<typeof DEMO_OPTIONS>>["values"];
  let seed: number;
  let ranks: number;
  try {
    values = parseCommand(argv, DEMO_OPTIONS).values;
    seed = integerOption("seed", values.seed);
    ranks = integerOption("ranks", values.ranks, 1);
  } catch (error) {
    console.error(`demo: ${(error as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const runDir = resolve(values.out ?? join("runs", timestamp(new Date())));
  const overrides = Object.fromEntries(
    Object.keys(DEMO_SETTINGS.knobs)
      .filter((k) => process.env[k])
      .map((k) => [k, process.env[k]!]),
  );
  const run = await runDemo(runDir, { seed, env: overrides, ranks, verbose: values.verbose });
  const mlperfLog = checkedMlperfLog(run.mlperfLogPath);
  const summary = summaryLines(
    run.outcome,
    {
      runDir: run.runDir,
      consoleLog: run.consoleLogPath,
      mlperfLog,
      report: mlperfLog ? run.reportPath : null,
      checkpoints: join(run.runDir, "ckpts"),
    },
    run.exitCode,
  );
  console.log(`\n${summary.join("\n")}`);
  return run.exitCode;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await main(process.argv.slice(2));
}
