// The MLPerf BERT trainer, tinygrad's train_bert in TypeScript. Knobs come from the environment
// (knobs.ts, the reference's names) or flags; run_and_time/*.sh run it twice:
//
//   INITMLPERF=1 BENCHMARK=10 npx tsx mlperf/bert/train.ts   # untimed: clear caches, compile on fake data
//   RUNMLPERF=1 npx tsx mlperf/bert/train.ts                 # timed: train on the shards to TARGET
//   BENCHMARK=20 npx tsx mlperf/bert/train.ts                # 20 steps, then the estimated training time
//
// Console: a first line per phase (what it runs, when it stops), one line per step (report.ts
// formatStepLine), one per evaluation (formatEvalLine), progress bars on stderr; `tsgrad train` and the
// demo show people the phases and evaluations only (cli/screen.ts). MLPerf log (LOGMLPERF=1):
// result_bert_<SEED>.log in the working folder.
import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import {
  Device,
  GlobalCounters,
  Tensor,
  clearKernelCache,
  dist,
  dtypes,
  getenv,
  io,
  jit,
  nn,
} from "../../src/index.ts";
import {
  BERT_PRESETS,
  BertForPretraining,
  bertConfigFromJson,
  type BertConfig,
  type BertMetrics,
} from "../../models/bert.ts";
import {
  bertBatchOf,
  packedBertBatchOf,
  type PackedBertBatchTensors,
  bertEvalStep,
  bertTrainStep,
  createBertOptimizer,
  makeBertDataParallelStep,
  type BertBatchTensors,
  type BertTrainState,
} from "../../models/bert_train_step.ts";
import {
  fakeBatch,
  listSampleFiles,
  checkSampleFiles,
  prefetchBatches,
  evalBatches,
  samplesToTensors,
  LoaderError,
  type ModelVocab,
} from "./data/loader.ts";
import { ShardError } from "./data/shard.ts";
import { TFRecordError } from "./data/tfrecord.ts";
import { StoppedError, reportFailure } from "./exit_status.ts";
import { detectSampleFormat, openSampleFile } from "./data/inspect.ts";
import { ManifestError, readManifest, shardPath } from "./data/manifest.ts";
import type { SampleColumns } from "./data/samples.ts";
import { PackedBatcher, packedToTensors, type PackedColumns } from "./data/packing.ts";
import { evalShardPath, trainShardPath } from "./data/basedir.ts";
import {
  MLLOG_KEYS as K,
  MlperfLogger,
  logBertHyperparameters,
  logSubmissionInfo,
  type SystemDescription,
} from "./mllog.ts";
import { formatEvalLine, formatStepLine } from "./report.ts";
import { CountProgress, timeAtRate } from "./progress.ts";
import { StopSignals } from "./stop_signals.ts";
import { ByteProgress } from "./data/byteProgress.ts";
import {
  identityDifferences,
  identityMetadata,
  pruneRunCheckpoints,
  runId,
  runIdentity,
  saveAsOwn,
} from "./run_identity.ts";
import { KnobError, hparamLines, knobsHelp, parseKnobs, validateKnobs, type Knobs } from "./knobs.ts";

/** Data or setup the run cannot start without (missing shards, systems file); says how to make it. */
export class TrainerError extends Error {
  override name = "TrainerError";
}

const SYSTEMS_DIR = fileURLToPath(new URL("./systems/", import.meta.url));
const INIT_CHECKPOINT = "model.ckpt-28252";

export interface TrainOptions {
  /** Where console lines go (stdout by default). */
  print?: (line: string) => void;
  /** Where the MLPerf log is written (the working folder by default, as the reference does). */
  logDir?: string;
  /** This process's place in a multi-process job (dist.init() by default: one process, or mpirun's ranks). */
  comm?: dist.Communicator;
  /** The data-parallel step (gradients reduced between a jitted backward and a jitted update) even with one rank. */
  splitStep?: boolean;
  /** The run phase's sample files, as a data folder's manifest names them (BASEDIR/train and BASEDIR/eval else). */
  sampleFiles?: { train: string[]; eval: string[] };
}

export interface TrainResult {
  phase: "init" | "run" | "benchmark";
  stepsRun: number;
  /** Samples trained on, from the first step (a resumed run's earlier steps included): packed steps hold varied numbers. */
  samplesTrained: number;
  /** The last evaluation's masked-LM accuracy (null when none ran). */
  accuracy: number | null;
  converged: boolean;
  interrupted: boolean;
  /** What the command exits with: 0, or 128 + the signal that stopped it (130 for Ctrl-C, 143 for SIGTERM). */
  exitCode: number;
  mlperfLogPath: string | null;
  finalModelPath: string | null;
  checkpoints: string[];
  /** Seconds from the first step to the end of the last (evaluations included). */
  seconds: number;
}

/** The sample files of a run phase, checked, and how many samples the eval files hold. */
export interface Shards {
  train: string[];
  eval: string[];
  evalSamples: number;
}

/** The train and eval shard folders of a BASEDIR, as preprocess.ts writes them. */
export const shardFolders = (basedir: string): { train: string; eval: string } => ({
  train: dirname(trainShardPath(basedir, 0)),
  eval: dirname(evalShardPath(basedir)),
});

/**
 * The sample files of the run phase; a clear error with the command that makes them when absent. Checked before
 * anything runs: every file's header (and, given `model`, that shards were made with the model's vocab), and the eval
 * files' data against their checksums (the eval set is small: about 30 ms for MLPerf's 10,000 samples), so that a
 * corrupt eval shard fails now, not at the first evaluation hours in.
 */
export function findShards(basedir: string, model?: ModelVocab): Shards {
  const folders = shardFolders(basedir);
  const filesIn = (dir: string) => (existsSync(dir) ? listSampleFiles(dir, model) : []);
  const train = filesIn(folders.train);
  const evalFiles = filesIn(folders.eval);
  const preprocess = `BASEDIR=${basedir} npx tsx mlperf/bert/data/preprocess.ts`;
  if (train.length === 0) {
    const first = existsSync(join(basedir, "results4"))
      ? ""
      : `WIKI_TRAIN=1 BASEDIR=${basedir} npx tsx mlperf/bert/data/download.ts, then `;
    throw new TrainerError(
      `no training shards in ${folders.train}: make them with ${first}${preprocess} pre-train all`,
    );
  }
  if (evalFiles.length === 0)
    throw new TrainerError(`no eval shards in ${folders.eval}: make them with ${preprocess} pre-eval`);
  return { train, eval: evalFiles, evalSamples: verifyEvalFiles(evalFiles) };
}

/** Checks the files a manifest names as listing a folder does (headers, widths, vocab); the eval files' data too. */
export function checkShards(files: { train: string[]; eval: string[] }, model?: ModelVocab): Shards {
  if (files.eval.length === 0)
    throw new TrainerError("the data has no eval set: the run phase evaluates every EVAL_STEP_FREQ steps");
  checkSampleFiles(files.train, "the train files", model);
  checkSampleFiles(files.eval, "the eval files", model);
  return { ...files, evalSamples: verifyEvalFiles(files.eval) };
}

/**
 * The shard files DATA's manifest names, once its settings are found to fit the run (sequence length, predictions,
 * vocab): a mismatch is one line naming each setting, before anything is built.
 */
export function manifestFiles(knobs: Knobs, vocab: ModelVocab): { train: string[]; eval: string[] } {
  const manifest = readManifest(knobs.DATA);
  const { settings } = manifest;
  const mismatches: string[] = [];
  if (settings.maxSeqLength !== knobs.MAX_SEQ_LENGTH)
    mismatches.push(`sequences of ${settings.maxSeqLength} tokens, not MAX_SEQ_LENGTH=${knobs.MAX_SEQ_LENGTH}`);
  if (settings.maxPredictionsPerSeq !== knobs.MAX_PREDICTIONS_PER_SEQ)
    mismatches.push(
      `${settings.maxPredictionsPerSeq} predictions a sequence, not MAX_PREDICTIONS_PER_SEQ=${knobs.MAX_PREDICTIONS_PER_SEQ}`,
    );
  if (settings.vocabSize !== vocab.vocabSize)
    mismatches.push(`a vocab of ${settings.vocabSize} tokens, not the model's ${vocab.vocabSize} (${vocab.source})`);
  if (mismatches.length > 0)
    throw new TrainerError(`DATA=${knobs.DATA} does not fit this run: its samples have ${mismatches.join("; ")}`);
  if (manifest.eval === null)
    throw new TrainerError(
      `DATA=${knobs.DATA} has no eval set (its manifest's "eval" is null): the run phase evaluates every EVAL_STEP_FREQ steps`,
    );
  return {
    train: manifest.train.map((shard) => shardPath(knobs.DATA, shard)),
    eval: [shardPath(knobs.DATA, manifest.eval)],
  };
}

/** The model must hold a sequence of MAX_SEQ_LENGTH tokens; the train shards' widths must be the knobs'. */
function checkModelAndShards(knobs: Knobs, config: BertConfig, configSource: string, train: string[]): void {
  if (config.maxPositionEmbeddings < knobs.MAX_SEQ_LENGTH)
    throw new TrainerError(
      `the model (${configSource}) has ${config.maxPositionEmbeddings} positions, fewer than MAX_SEQ_LENGTH=${knobs.MAX_SEQ_LENGTH}`,
    );
  const first = train.find((path) => detectSampleFormat(path) === "shard");
  if (first === undefined) return; // a TFRecord's widths are known only once its records are read
  const file = openSampleFile(first, { verify: false });
  file.close();
  if (file.maxSeqLength !== knobs.MAX_SEQ_LENGTH || file.maxPredictionsPerSeq !== knobs.MAX_PREDICTIONS_PER_SEQ)
    throw new TrainerError(
      `${first} holds samples of max_seq_length ${file.maxSeqLength}, max_predictions_per_seq ${file.maxPredictionsPerSeq}, but MAX_SEQ_LENGTH=${knobs.MAX_SEQ_LENGTH}, MAX_PREDICTIONS_PER_SEQ=${knobs.MAX_PREDICTIONS_PER_SEQ}: set them to the shards'`,
    );
}

/** Reads the eval files once against their checksums; returns how many samples they hold. */
function verifyEvalFiles(paths: string[]): number {
  let samples = 0;
  for (const path of paths) {
    const file = openSampleFile(path);
    samples += file.count;
    file.close();
  }
  return samples;
}

/**
 * The samples each evaluation covers: EVAL_SET_SIZE, or all the eval files hold when that is fewer (said once,
 * or refused under STRICT_EVAL_SET), so that no sample is counted twice.
 */
export function evalSetSize(knobs: Knobs, evalSamples: number, print: (line: string) => void): number {
  if (evalSamples >= knobs.EVAL_SET_SIZE) return knobs.EVAL_SET_SIZE;
  const what = `the eval files hold ${evalSamples} samples, fewer than EVAL_SET_SIZE=${knobs.EVAL_SET_SIZE}`;
  if (knobs.STRICT_EVAL_SET)
    throw new TrainerError(`${what} (STRICT_EVAL_SET=1): make a larger eval set or lower EVAL_SET_SIZE`);
  print(`warning: ${what}: each evaluation covers those ${evalSamples} once (STRICT_EVAL_SET=1 refuses instead)`);
  return evalSamples;
}

/** systems/<platform>.json, the submission records' source. */
export function readSystem(platform: string): SystemDescription {
  const path = join(SYSTEMS_DIR, `${platform}.json`);
  if (!existsSync(path)) {
    const known = readdirSync(SYSTEMS_DIR)
      .filter((f) => f.endsWith(".json"))
      .map((f) => f.slice(0, -5));
    throw new TrainerError(`SUBMISSION_PLATFORM=${platform}: no ${path} (known: ${known.join(", ")})`);
  }
  return JSON.parse(readFileSync(path, "utf8")) as SystemDescription;
}

/** The model config from BERT_CONFIG, or BERT-large (the reference's) when that file is absent. */
export function modelConfig(knobs: Knobs): BertConfig {
  if (!existsSync(knobs.BERT_CONFIG)) return BERT_PRESETS.large;
  return bertConfigFromJson(
    JSON.parse(readFileSync(knobs.BERT_CONFIG, "utf8")) as Record<string, unknown>,
    knobs.BERT_CONFIG,
  );
}

/** Warm-up samples for any vocab: fakeBatch's ids assume BERT's 30522-token layout, so small vocabs fold them in. */
function fakeSamples(batchSize: number, knobs: Knobs, vocabSize: number, seed: number): SampleColumns {
  const batch = fakeBatch(
    batchSize,
    knobs.MAX_SEQ_LENGTH,
    knobs.MAX_PREDICTIONS_PER_SEQ,
    seed,
    Math.max(vocabSize, 1000),
  );
  if (vocabSize < 1000)
    for (const ids of [batch.input_ids, batch.masked_lm_ids]) ids.forEach((id, i) => (ids[i] = id % vocabSize));
  return batch;
}

function checkWidths(samples: SampleColumns, knobs: Knobs, source: string): void {
  if (samples.maxSeqLength !== knobs.MAX_SEQ_LENGTH || samples.maxPredictionsPerSeq !== knobs.MAX_PREDICTIONS_PER_SEQ) {
    throw new TrainerError(
      `${source} hold samples of max_seq_length ${samples.maxSeqLength}, max_predictions_per_seq ${samples.maxPredictionsPerSeq}, but MAX_SEQ_LENGTH=${knobs.MAX_SEQ_LENGTH}, MAX_PREDICTIONS_PER_SEQ=${knobs.MAX_PREDICTIONS_PER_SEQ}`,
    );
  }
}

/**
 * GPU ranks all-reduce through NCCL where it loads (RCCL, its API on HIP, for AMD GPUs; TSGRAD_NCCL=0: never);
 * otherwise, or on host devices, through MPI and host memory, said once.
 */
function ncclFor(
  comm: dist.Communicator,
  device: string,
  print: (line: string) => void,
): dist.NcclCommunicator | undefined {
  if (!/^(CUDA|AMD)/.test(device) || getenv("TSGRAD_NCCL", 1) === 0) return undefined;
  try {
    const nccl = dist.NcclCommunicator.forDevice(comm, device);
    const name = device.startsWith("AMD") ? "RCCL" : "NCCL";
    print(`gradients all-reduced by ${name} ${nccl.library.version} (${nccl.library.path})`);
    return nccl;
  } catch (error) {
    if (!(error instanceof dist.NcclError)) throw error;
    print(
      `${device.startsWith("AMD") ? "RCCL" : "NCCL"} not used (${error.message}); gradients go through MPI and host memory`,
    );
    return undefined;
  }
}

/** Sets BEAM (read live by the kernel search) to `beam` while `fn` runs: TRAIN_BEAM and EVAL_BEAM. */
function withBeam<T>(beam: number, fn: () => T): T {
  const before = process.env.BEAM;
  process.env.BEAM = String(beam);
  try {
    return fn();
  } finally {
    if (before === undefined) delete process.env.BEAM;
    else process.env.BEAM = before;
  }
}

/** What an evaluation needs: the jitted eval step, and the eval shards (fake batches when null). */
export interface Evaluation {
  knobs: Knobs;
  comm: dist.Communicator;
  devices: string[];
  evalStep: (...t: BertBatchTensors) => BertMetrics;
  evalFiles: string[] | null;
  /** Samples an evaluation covers (each once): EVAL_SET_SIZE, or fewer where the eval files hold fewer. */
  setSize: number;
  vocabSize: number;
  print: (line: string) => void;
}

/**
 * One evaluation over `limit` batches (MAX_EVAL_STEPS, fewer in a BENCHMARK run): accuracy and loss over all
 * predictions.
 */
export function evaluate(
  { knobs, comm, devices, evalStep, evalFiles, setSize, vocabSize, print }: Evaluation,
  step: number,
  limit: number,
  samplesTrained = step * knobs.BS,
): { accuracy: number; loss: number } {
  // each rank evaluates its own run of whole batches; the sums are added up across ranks at the end
  const [first, end] = [comm.rank, comm.rank + 1].map((r) => Math.floor((r * limit) / comm.size)) as [number, number];
  const batches = evalFiles ? evalBatches({ files: evalFiles, batchSize: knobs.EVAL_BS, startStep: first }) : null;
  const progress =
    knobs.BENCHMARK || comm.rank !== 0 ? null : new CountProgress("eval", end - first, { transient: true });
  let correct = 0,
    predictions = 0,
    lossSum = 0;
  const start = performance.now();
  for (let j = first; j < end; j++) {
    const samples = batches
      ? batches.next().value
      : fakeSamples(knobs.EVAL_BS, knobs, vocabSize, knobs.SEED + 1_000_000 + j);
    if (batches && j === first) checkWidths(samples, knobs, `the eval shards in ${shardFolders(knobs.BASEDIR).eval}`);
    // the last batch wraps around to the set's first samples: weight 0 on those, so each sample counts once
    const beyondSet = (j + 1) * knobs.EVAL_BS - setSize;
    if (batches && beyondSet > 0)
      samples.masked_lm_weights.fill(0, Math.max(0, knobs.EVAL_BS - beyondSet) * samples.maxPredictionsPerSeq);
    const metrics = withBeam(knobs.EVAL_BEAM, () => evalStep(...samplesToTensors(samples, devices)));
    const weight = samples.masked_lm_weights.reduce((a, b) => a + b, 0);
    correct += metrics.maskedLmAccuracy.item() * weight;
    lossSum += metrics.maskedLmLoss.item() * weight;
    predictions += weight;
    progress?.advance();
  }
  progress?.finish();
  batches?.return(undefined as never);
  [correct, lossSum, predictions] = comm.allReduce(Float64Array.of(correct, lossSum, predictions), "sum");
  const accuracy = predictions > 0 ? correct / predictions : 0;
  const loss = predictions > 0 ? lossSum / predictions : 0;
  print(
    formatEvalLine({
      step,
      samples: samplesTrained,
      maskedLmAccuracy: accuracy,
      loss,
      seconds: (performance.now() - start) / 1000,
    }),
  );
  return { accuracy, loss };
}

/**
 * What packed steps held on average against BS, the batch the learning rate was set for; a difference of more than
 * a tenth says which PACKED_BS would match BS.
 */
export function packingSummary(knobs: Knobs, samples: number, steps: number): string {
  const perStep = samples / steps;
  const line = `packing: ${perStep.toFixed(1)} samples a step on average (${(perStep / knobs.PACKED_BS).toFixed(2)} a row of ${knobs.PACKED_BS} rows), BS=${knobs.BS}`;
  if (Math.abs(perStep - knobs.BS) <= 0.1 * knobs.BS) return line;
  const rows = Math.max(1, Math.round((knobs.BS * knobs.PACKED_BS) / perStep));
  return `${line}: PACKED_BS=${rows} would hold about BS samples a step`;
}

/** The phase's first line: what it runs, and when it stops. */
export function phaseLine(phase: TrainResult["phase"], knobs: Knobs, steps: number, setSize: number): string {
  if (phase === "init")
    return `warm-up (init phase, untimed): ${steps} steps and an eval on fake data compile every kernel`;
  if (phase === "benchmark") return `benchmark: ${steps} steps on fake data, then the estimated training time`;
  const batch =
    knobs.PACKING > 0
      ? `${knobs.PACKED_BS} rows packed with up to ${knobs.PACKING} samples each (BS=${knobs.BS} nominal)`
      : `${knobs.BS} samples`;
  return `training (run phase): at most ${knobs.TRAIN_STEPS} steps of ${batch}, an eval of ${setSize} samples every ${knobs.EVAL_STEP_FREQ} steps; stops once an eval reaches TARGET=${knobs.TARGET}`;
}

/**
 * The train bar's ETA: the run stops at the first evaluation that reaches TARGET or at TRAIN_STEPS, so it gives
 * the time to the next evaluation (with the last accuracy) and to TRAIN_STEPS, the most it can take.
 */
export function trainEta(knobs: Knobs, lastAccuracy: () => number | null): (done: number, rate: number) => string {
  return (done, rate) => {
    const nextEval = Math.min(knobs.TRAIN_STEPS, (Math.floor(done / knobs.EVAL_STEP_FREQ) + 1) * knobs.EVAL_STEP_FREQ);
    const accuracy = lastAccuracy();
    const last = accuracy === null ? "" : `, last ${accuracy.toFixed(3)}`;
    return `eval ${nextEval} in ${timeAtRate(nextEval - done, rate)} (stops at ${knobs.TARGET}${last}), at most ${timeAtRate(knobs.TRAIN_STEPS - done, rate)}`;
  };
}

/** Samples the loader hands the packer at a time, at least: a window of 256 packs about as tightly as the whole set. */
const PACKING_WINDOW = 256;

/** One step's input: a batch of samples, or of packed rows; `count`: the samples in it (packed: on this rank). */
type TrainBatch =
  | { samples: SampleColumns; packed?: undefined; count: number }
  | { packed: PackedColumns; count: number };

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Steps before a jitted step replays: the first runs plainly (and compiles), the second captures. */
const JIT_WARMUP_STEPS = 2;

/** Runs the phase the knobs select; see the header. */
export async function trainBert(knobs: Knobs, options: TrainOptions = {}): Promise<TrainResult> {
  const comm = options.comm ?? dist.init();
  // rank 0 speaks for the job: console, MLPerf log, checkpoints; the others only fail loudly
  const lead = comm.rank === 0;
  const print = lead ? (options.print ?? ((line: string) => console.log(line))) : () => {};
  const phase = knobs.INITMLPERF ? "init" : knobs.RUNMLPERF ? "run" : "benchmark";
  validateKnobs(knobs, comm);
  const config = modelConfig(knobs);
  const vocab = {
    vocabSize: config.vocabSize,
    source: existsSync(knobs.BERT_CONFIG) ? knobs.BERT_CONFIG : "BERT-large",
  };
  const sampleFiles = options.sampleFiles ?? (knobs.DATA !== "" ? manifestFiles(knobs, vocab) : undefined);
  const shards = !knobs.RUNMLPERF
    ? null
    : sampleFiles
      ? checkShards(sampleFiles, vocab)
      : findShards(knobs.BASEDIR, vocab);
  checkModelAndShards(knobs, config, vocab.source, shards?.train ?? []);
  const setSize = shards ? evalSetSize(knobs, shards.evalSamples, print) : knobs.EVAL_SET_SIZE;
  // which run this is: recorded in its checkpoints, checked against RESUME's before anything loads (run_identity.ts)
  const identity = runIdentity(knobs, config, shards?.train ?? null);
  const runMetadata = identityMetadata(identity);
  if (knobs.RESUME !== "" && lead) {
    const differences = identityDifferences(io.readSafetensorsHeader(knobs.RESUME).metadata, identity);
    if (differences.length > 0 && !knobs.RESUME_ANY)
      throw new TrainerError(
        `RESUME=${knobs.RESUME} is another run's checkpoint: ${differences.join("; ")} (RESUME_ANY=1 resumes it anyway)`,
      );
    for (const difference of differences) print(`RESUME_ANY=1: resuming another run's checkpoint: ${difference}`);
  }
  const system = knobs.LOGMLPERF && lead ? readSystem(knobs.SUBMISSION_PLATFORM) : null;
  if (lead)
    for (const name of io.removeStaleTemps(knobs.SAVE_CKPT_DIR))
      print(`removed ${name}, left by a run that was killed`);

  Device.DEFAULT = knobs.DEVICE;
  // GPU ranks on one machine take the next GPUS devices each; CPU ranks each have the virtual devices 0..GPUS-1
  const kind = knobs.DEVICE.split(":")[0]!;
  const firstDevice = kind === "CPU" || kind === "JS" ? 0 : comm.localRank * knobs.GPUS;
  const devices = Array.from({ length: knobs.GPUS }, (_, i) => Device.canonicalize(`${kind}:${firstDevice + i}`));
  if (knobs.DEFAULT_FLOAT === "HALF") Tensor.defaultFloat = dtypes.float16;
  print(
    comm.size > 1
      ? `training on ${comm.size} ranks (${comm.backend}, launched by ${comm.launcher}) x ${devices.join(", ")}`
      : `training on ${devices.join(", ")}`,
  );

  const mlperfLogPath = system ? join(options.logDir ?? ".", `result_bert_${knobs.SEED}.log`) : null;
  const mllog = mlperfLogPath ? new MlperfLogger({ path: mlperfLogPath, echo: true }) : null;
  if (mllog && knobs.INITMLPERF) logSubmissionInfo(mllog, system!, knobs.SUBMISSION_PLATFORM);
  if (knobs.INITMLPERF) {
    // compiled kernels and BEAM choices of earlier runs must not shorten this one; one rank per machine
    // clears the machine's cache before any rank compiles into it: the run's own, TSGRAD_CACHE (validateKnobs)
    if (comm.localRank === 0) clearKernelCache({ onDisk: true });
    else clearKernelCache();
    comm.barrier();
    mllog?.event(K.CACHE_CLEAR, true);
    mllog?.start(K.INIT_START);
  }
  if (mllog && knobs.RUNMLPERF) {
    mllog.start(K.RUN_START);
    mllog.event(K.SEED, knobs.SEED);
  }

  // ** model, optimizer, schedule **
  Tensor.manualSeed(knobs.SEED);
  const model = new BertForPretraining(config, { disableDropout: knobs.DISABLE_DROPOUT !== 0 });
  const initPrefix = join(knobs.INIT_CKPT_DIR, INIT_CHECKPOINT);
  if (knobs.RUNMLPERF && lead && existsSync(`${initPrefix}.index`)) {
    let progress: ByteProgress | undefined;
    await model.loadFromTfCheckpoint(initPrefix, {
      onProgress: (read, total) => {
        progress ??= new ByteProgress("init checkpoint", total, process.stderr);
        progress.update(read);
      },
    });
    progress?.finish();
    print(`loaded the init checkpoint ${initPrefix}`);
  }
  if (devices.length > 1) nn.replicateParameters(model, devices); // before the optimizer, so its state is replicated too
  const { optimizer, scheduler } = createBertOptimizer(model, {
    lr: knobs.OPT_BASE_LEARNING_RATE,
    totalSteps: knobs.TRAIN_STEPS,
    warmupSteps: knobs.NUM_WARMUP_STEPS,
    power: knobs.POLY_POWER,
    weightDecay: knobs.DECAY,
    eps: knobs.EPSILON,
    b1: knobs.OPT_LAMB_BETA_1,
    b2: knobs.OPT_LAMB_BETA_2,
    lambRule: knobs.LAMB_RULE,
    lrSchedule: knobs.LR_SCHEDULE,
    startWarmupStep: knobs.START_WARMUP_STEP,
  });
  const state: BertTrainState = { model, optimizer, scheduler };
  for (const line of hparamLines(knobs)) print(line);
  print(
    `model: ${config.numHiddenLayers} layers, hidden ${config.hiddenSize}, ${config.numAttentionHeads} heads, vocab ${config.vocabSize}`,
  );

  // the eval batches that cover the set once (MAX_EVAL_STEPS, fewer where the set is smaller than asked)
  const evalSteps = Math.min(knobs.MAX_EVAL_STEPS, Math.ceil(setSize / knobs.EVAL_BS));
  const evaluatedSamples = Math.min(setSize, knobs.EVAL_BS * evalSteps);
  if (mllog && knobs.RUNMLPERF) {
    logBertHyperparameters(mllog, knobs, {
      trainSamples: knobs.BS * knobs.TRAIN_STEPS,
      evalSamples: evaluatedSamples,
      ...(knobs.PACKING > 0 ? { packing: { maxSamplesPerRow: knobs.PACKING, rowsPerStep: knobs.PACKED_BS } } : {}),
    });
  }

  let startStep = 0;
  if (knobs.RESUME !== "" && lead) {
    let metadata: Record<string, string>;
    try {
      metadata = nn.loadTrainingState(knobs.RESUME, { ...state });
    } catch (error) {
      throw new TrainerError(`cannot resume from RESUME=${knobs.RESUME}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    startStep = Number(metadata.step ?? scheduler.schedulers[0]!.stepCount.item());
    print(`resuming from ${knobs.RESUME} at step ${startStep}`);
  }
  if (comm.size > 1) {
    // every rank starts from rank 0's weights, optimizer state and step (a checkpoint of any rank count resumes)
    dist.broadcastTensors(comm, [...new Set(Object.values(nn.getStateDict({ ...state })))]);
    startStep = comm.broadcast(Float64Array.of(startStep))[0]!;
  }
  print(
    comm.size > 1
      ? `training with global batch size ${knobs.BS} (${knobs.BS / comm.size} a rank) for ${knobs.TRAIN_STEPS} steps`
      : `training with global batch size ${knobs.BS} for ${knobs.TRAIN_STEPS} steps`,
  );

  // ** jitted steps **
  const stepOptions = {
    lossScale: knobs.LOSS_SCALER,
    gradientAccSteps: knobs.GRADIENT_ACC_STEPS,
    maxGradNorm: 1.0,
    lossRule: knobs.LAMB_RULE,
  };
  const fusedStep = jit((...t: BertBatchTensors) => ({
    loss: bertTrainStep(state, bertBatchOf(t), stepOptions),
    lr: optimizer.optimizers[0]!.lr,
  }));
  // several ranks: the gradients are averaged across them between the backward and the update
  const nccl = comm.size > 1 ? ncclFor(comm, devices[0]!, print) : undefined;
  const dataParallelStep =
    comm.size > 1 || options.splitStep ? makeBertDataParallelStep(state, stepOptions, comm, { nccl }) : null;
  // packed rows (PACKING>0): eleven tensors, the model keeping each row's samples apart (docs/packing.md)
  const packedStep = jit((...t: PackedBertBatchTensors) => ({
    loss: bertTrainStep(state, packedBertBatchOf(t), stepOptions),
    lr: optimizer.optimizers[0]!.lr,
  }));
  /** One step; `samples`: the global batch's (packed parts hold different numbers on different ranks). */
  const trainStep = (batch: TrainBatch): { loss: Tensor; lr: Tensor; reduceMs?: number; samples: number } => {
    const weightSum = (weights: Float32Array) => weights.reduce((a, b) => a + b, 0);
    if (batch.packed) {
      const tensors = packedToTensors(batch.packed, devices);
      if (!dataParallelStep) return { ...packedStep(...tensors), samples: batch.count };
      return dataParallelStep(tensors, weightSum(batch.packed.masked_lm_weights), batch.count);
    }
    const tensors = samplesToTensors(batch.samples, devices);
    if (!dataParallelStep) return { ...fusedStep(...tensors), samples: knobs.BS };
    return dataParallelStep(tensors, weightSum(batch.samples.masked_lm_weights));
  };
  const evalStep = jit((...t: BertBatchTensors) => ({ ...bertEvalStep(model, bertBatchOf(t)) }));

  // ** data: the shards only in the run phase (after run_start), fake batches otherwise **
  const packing = knobs.PACKING > 0;
  // packed, the loader's batches are packing windows (a part on each rank); a resumed run replays the packing (below)
  const loaderBatch = packing ? Math.ceil(Math.max(knobs.BS, PACKING_WINDOW) / comm.size) * comm.size : knobs.BS;
  const train = shards
    ? prefetchBatches({
        kind: "train",
        files: shards.train,
        batchSize: loaderBatch,
        seed: knobs.SEED,
        startStep: packing ? 0 : startStep,
        part: { index: comm.rank, count: comm.size },
      })
    : null;
  let fakeCounter = 0;
  let widthsChecked = false;
  const nextSamples = async (): Promise<SampleColumns> => {
    // fake batches differ per rank, as real parts of one global batch do
    if (!train)
      return fakeSamples(
        loaderBatch / comm.size,
        knobs,
        config.vocabSize,
        knobs.SEED + comm.rank * 1_000_003 + fakeCounter++,
      );
    const next = await train.next();
    if (next.done) throw new TrainerError("the train loader stopped");
    if (!widthsChecked) checkWidths(next.value, knobs, `the train shards in ${shardFolders(knobs.BASEDIR).train}`);
    widthsChecked = true;
    return next.value;
  };
  const batcher = packing
    ? new PackedBatcher(knobs.PACKED_BS / comm.size, { maxPerRow: knobs.PACKING, seed: knobs.SEED + comm.rank })
    : null;
  const nextTrain = async (): Promise<TrainBatch> => {
    if (!batcher) return { samples: await nextSamples(), count: knobs.BS };
    let packed = batcher.next();
    while (!packed) {
      batcher.add(await nextSamples());
      packed = batcher.next();
    }
    return { packed, count: packed.sampleCount };
  };
  // samples trained on: MLPerf's epoch_num and the step lines count these (packed steps hold varied numbers)
  let samplesSeen = startStep * knobs.BS;
  if (batcher && startStep > 0) {
    // the packing of step k depends on every earlier window: pack them again, training on none of them
    let replayedSamples = 0;
    for (let replayed = 0; replayed < startStep; replayed++) replayedSamples += (await nextTrain()).count;
    samplesSeen = comm.size > 1 ? comm.allReduce(Float64Array.of(replayedSamples), "sum")[0]! : replayedSamples;
    print(`replayed the packing of steps 1-${startStep}: ${samplesSeen} samples`);
  }
  const evaluation: Evaluation = {
    knobs,
    comm,
    devices,
    evalStep,
    evalFiles: shards?.eval ?? null,
    setSize,
    vocabSize: config.vocabSize,
    print,
  };

  // Ctrl-C, SIGTERM, SIGUSR1: checkpoint and stop after this step (stop_signals.ts)
  const stop = new StopSignals().install();

  const result: TrainResult = {
    phase,
    stepsRun: 0,
    samplesTrained: samplesSeen,
    accuracy: null,
    converged: false,
    interrupted: false,
    exitCode: 0,
    mlperfLogPath,
    finalModelPath: null,
    checkpoints: [],
    seconds: 0,
  };
  const saveCheckpoint = (step: number): string => {
    const path = join(knobs.SAVE_CKPT_DIR, `step_${String(step).padStart(7, "0")}.safe`);
    // the state is the same on every rank: rank 0 writes it
    if (!lead) return path;
    mkdirSync(knobs.SAVE_CKPT_DIR, { recursive: true });
    const saved = saveAsOwn(knobs.SAVE_CKPT_DIR, basename(path, ".safe"), runId(identity), (to, overwrite) =>
      nn.saveTrainingState(to, { ...state }, { step: String(step), ...runMetadata }, { overwrite }),
    );
    if (saved.otherRunsFile) print(`${saved.otherRunsFile} is another run's checkpoint: left as it is`);
    result.checkpoints.push(saved.path);
    print(`saved checkpoint ${saved.path}`);
    for (const old of pruneRunCheckpoints(knobs.SAVE_CKPT_DIR, runId(identity), knobs.KEEP_CKPT_AMOUNT))
      print(`removing old checkpoint ${old}`);
    return saved.path;
  };

  // ** train loop **
  const wallStart = performance.now();
  const samplesAtStart = samplesSeen;
  const stepTimes: number[] = [];
  let step = startStep;
  if (mllog && knobs.RUNMLPERF) mllog.start(K.EPOCH_START, samplesSeen, { epoch_num: samplesSeen });
  const lastStep = knobs.BENCHMARK ? Math.min(knobs.TRAIN_STEPS, startStep + knobs.BENCHMARK) : knobs.TRAIN_STEPS;
  print(phaseLine(phase, knobs, lastStep - startStep, setSize));
  const progress = !lead
    ? null
    : knobs.BENCHMARK
      ? new CountProgress(phase === "init" ? "warm-up" : "benchmark", lastStep, { start: startStep })
      : // erased at each evaluation, whose line says where the run stands: one live bar, not one per evaluation
        new CountProgress("train", knobs.TRAIN_STEPS, {
          start: startStep,
          eta: trainEta(knobs, () => result.accuracy),
          transient: true,
        });
  try {
    // a read that fails after a step completed stops the run there, the state consistent: checkpoint, then exit
    let failure: { error: unknown } | undefined;
    const nextOrFailure = async (): Promise<TrainBatch | null> => {
      try {
        return await nextTrain();
      } catch (error) {
        failure = { error };
        return null;
      }
    };
    let batch = await nextTrain();
    while (step < lastStep && !result.converged) {
      const st = performance.now();
      GlobalCounters.reset();
      const out = withBeam(knobs.TRAIN_BEAM, () => trainStep(batch));
      const pt = performance.now();
      // kernels a host backend (CPU, JS) ran inside the call: time on the device, not host overhead
      const reduceMs = out.reduceMs;
      const kernelMs = Math.min(GlobalCounters.timeSumS * 1000, pt - st - (reduceMs ?? 0));
      const next = step + 1 < lastStep ? await nextOrFailure() : null;
      const dt = performance.now();
      const loss = out.loss.item();
      const lr = out.lr.item();
      const cl = performance.now();
      if (Number.isNaN(loss)) throw new TrainerError(`the loss is NaN at step ${step + 1}`);
      step++;
      samplesSeen += out.samples;
      result.samplesTrained = samplesSeen;
      result.stepsRun++;
      stepTimes.push(cl - st);
      print(
        formatStepLine({
          step,
          samples: samplesSeen,
          totalMs: cl - st,
          hostMs: pt - st - kernelMs - (reduceMs ?? 0),
          dataMs: dt - pt,
          deviceMs: cl - dt + kernelMs,
          loss,
          learningRate: lr,
          memoryGB: GlobalCounters.memUsed / 1e9,
          gflops: GlobalCounters.globalOps / ((cl - st) / 1000) / 1e9,
          ...(reduceMs === undefined ? {} : { reduceMs }),
        }),
      );
      progress?.advance();
      if (next) batch = next;

      if (knobs.BENCHMARK && step === lastStep) {
        // the jitted step runs plainly, then captures: replays (from the third step on) are what a run repeats
        const replays = stepTimes.length > JIT_WARMUP_STEPS ? stepTimes.slice(JIT_WARMUP_STEPS) : stepTimes;
        const stepMs = median(replays);
        const estimateMinutes = Math.floor(((stepMs / 1000) * knobs.TRAIN_STEPS) / 60);
        const what =
          replays === stepTimes
            ? "median step"
            : `median of ${replays.length} replayed step${replays.length > 1 ? "s" : ""}`;
        print(
          `Estimated training time: ${Math.floor(estimateMinutes / 60)}h${estimateMinutes % 60}m (${what} ${stepMs.toFixed(1)} ms x ${knobs.TRAIN_STEPS} steps)`,
        );
        progress?.finish();
        print(
          `${phase === "init" ? "warm-up " : ""}eval on fake data (runs the eval step; its accuracy is no result):`,
        );
        evaluate(evaluation, step, Math.min(knobs.BENCHMARK, knobs.MAX_EVAL_STEPS), samplesSeen);
        if (mllog && knobs.INITMLPERF) mllog.end(K.INIT_STOP);
        break;
      }

      if (step % knobs.EVAL_STEP_FREQ === 0 || step === knobs.TRAIN_STEPS) {
        progress?.finish();
        if (mllog && knobs.RUNMLPERF) mllog.start(K.EVAL_START, null, { epoch_num: samplesSeen, step_num: step });
        let accuracy = Number.NaN;
        try {
          accuracy = evaluate(evaluation, step, evalSteps, samplesSeen).accuracy;
        } catch (error) {
          // one rank alone cannot stop the others inside an evaluation's collectives: the job fails as a whole
          if (comm.size > 1) throw error;
          failure = { error };
        }
        result.accuracy = failure ? result.accuracy : accuracy;
        if (mllog && knobs.RUNMLPERF && !failure) {
          mllog.end(K.EVAL_STOP, samplesSeen, {
            epoch_num: samplesSeen,
            step_num: step,
            samples_count: evaluatedSamples,
          });
          mllog.event(K.EVAL_ACCURACY, accuracy, { epoch_num: samplesSeen, masked_lm_accuracy: accuracy });
        }
        if (accuracy >= knobs.TARGET) {
          const seconds = (performance.now() - wallStart) / 1000;
          print(
            `Reference Convergence point reached after ${samplesSeen} datasamples and ${Math.floor(seconds / 3600)}h${Math.floor((seconds % 3600) / 60)}m${(seconds % 60).toFixed(2)}s.`,
          );
          result.converged = true;
          if (mllog && knobs.RUNMLPERF) {
            mllog.end(K.EPOCH_STOP, samplesSeen, { epoch_num: samplesSeen });
            mllog.end(K.RUN_STOP, null, { status: "success" });
          }
          result.finalModelPath = join(knobs.SAVE_CKPT_DIR, "bert_final.safe");
          if (lead) {
            mkdirSync(knobs.SAVE_CKPT_DIR, { recursive: true });
            const metadata = { step: String(step), masked_lm_accuracy: String(accuracy), ...runMetadata };
            const saved = saveAsOwn(knobs.SAVE_CKPT_DIR, "bert_final", runId(identity), (to, overwrite) =>
              nn.safeSave(nn.getStateDict(model), to, metadata, { overwrite }),
            );
            result.finalModelPath = saved.path;
          }
          print(` *** Model saved to ${result.finalModelPath} ***`);
        }
      }

      // a prefetched batch is an already-settled promise: awaiting it never leaves the microtask queue, so
      // without this turn of the event loop a signal's handler would wait until the prefetch ran dry
      await new Promise((resolve) => setImmediate(resolve));
      if (knobs.CKPT && step % knobs.SAVE_CKPT_FREQ === 0 && !result.converged) saveCheckpoint(step);
      // the ranks stop together: an interrupt or a failed read seen by any of them counts for all
      if (comm.size > 1) {
        const [signal, failed] = comm.allReduce(Int32Array.of(stop.signal, failure ? 1 : 0), "max");
        stop.signal = signal!;
        if (failed && !failure) failure = { error: new LoaderError("another rank could not read its samples") };
      }
      if (failure) {
        const path =
          knobs.CKPT && step % knobs.SAVE_CKPT_FREQ === 0 ? result.checkpoints.at(-1)! : saveCheckpoint(step);
        if (mllog && knobs.RUNMLPERF) mllog.end(K.RUN_STOP, null, { status: "aborted" });
        const cause = failure.error instanceof Error ? failure.error.message : String(failure.error);
        throw new StoppedError(
          `stopped after step ${step}: ${cause}; the step is saved: RESUME=${path} continues once the data is fixed`,
          { cause: failure.error },
        );
      }
      if (stop.signal && !result.converged && step < lastStep) {
        result.interrupted = true;
        result.exitCode = 128 + stop.signal;
        const path =
          knobs.CKPT && step % knobs.SAVE_CKPT_FREQ === 0 ? result.checkpoints.at(-1)! : saveCheckpoint(step);
        print(`interrupted at step ${step}; continue with RESUME=${path}`);
        break;
      }
    }
    progress?.finish();
    result.seconds = (performance.now() - wallStart) / 1000;
    if (batcher && result.stepsRun > 0) print(packingSummary(knobs, samplesSeen - samplesAtStart, result.stepsRun));
    if (mllog && knobs.RUNMLPERF && !result.converged && !result.interrupted && !knobs.BENCHMARK) {
      print(`TARGET ${knobs.TARGET} not reached in ${knobs.TRAIN_STEPS} steps`);
      mllog.end(K.EPOCH_STOP, samplesSeen, { epoch_num: samplesSeen });
      mllog.end(K.RUN_STOP, null, { status: "aborted" });
    }
  } finally {
    stop.uninstall();
    await train?.close();
  }
  return result;
}

const USAGE = `usage: [KNOB=value ...] npx tsx mlperf/bert/train.ts [--knob value ...]

The MLPerf Training BERT trainer. Phases: INITMLPERF=1 BENCHMARK=N (untimed: clear the
kernel cache, compile on fake data), RUNMLPERF=1 (timed: train on BASEDIR/train, evaluate on
BASEDIR/eval every EVAL_STEP_FREQ steps, stop at TARGET), BENCHMARK=N alone (N steps, then the
estimated time of TRAIN_STEPS). run_and_time/<platform>.sh runs both phases.

Knobs (environment variable / flag; a flag wins over the environment):
`;

/** Whether this process was started by the tsx command (`npx tsx train.ts`), whose signal relay is in the way. */
function startedByTsxCommand(): boolean {
  try {
    const script = readFileSync(`/proc/${process.ppid}/cmdline`, "latin1").split("\0")[1] ?? "";
    return /(^|[\\/])tsx$|tsx[\\/]dist[\\/]cli\.mjs$/.test(script);
  } catch {
    return false; // not Linux, or the parent is gone
  }
}

/** What bad data, files or knobs throw: exit status 2 (exit_status.ts); anything else is a bug, status 1. */
export const INPUT_ERRORS = [
  KnobError,
  ManifestError,
  TrainerError,
  LoaderError,
  ShardError,
  TFRecordError,
  io.SafetensorsError,
  io.TfCheckpointError,
  nn.StateDictError,
];

export async function main(argv: string[]): Promise<number> {
  if (startedByTsxCommand())
    console.error(
      "note: under `npx tsx`, Ctrl-C kills the trainer mid-step without a checkpoint (tsx's signal relay " +
        "gives a busy process 60 ms); `node --import tsx mlperf/bert/train.ts` stops after the step with one",
    );
  try {
    const knobs = parseKnobs(argv);
    if (knobs === null) {
      console.log(USAGE + knobsHelp());
      return 0;
    }
    const result = await trainBert(knobs);
    if (result.mlperfLogPath) console.log(`MLPerf log: ${result.mlperfLogPath}`);
    return result.exitCode;
  } catch (error) {
    // in a job of several ranks, each says which it is: mpirun shows every rank's words mixed together
    const world = dist.worldFromEnv();
    return reportFailure("train", error, INPUT_ERRORS, world.size > 1 ? `rank ${world.rank} of ${world.size}: ` : "");
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await main(process.argv.slice(2));
}
