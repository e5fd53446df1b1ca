// The BERT trainer's knobs: every variable of ../shared/MISSION.md with the reference's name
// and default (tinygrad's train_bert, v4.1 submission), read from the environment and
// overridable by command-line flags (`--eval-bs 6` or `--EVAL_BS=6`). Defaults that depend on
// other knobs (BS on GPUS and DEFAULT_FLOAT, TRAIN_STEPS on BS, ...) are resolved in order.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { Device, dist, getenv } from "../../src/index.ts";
import { basedirFromEnv } from "./data/basedir.ts";
import { bertEvalIntervalSamples } from "./compliance.ts";

export class KnobError extends Error {
  override name = "KnobError";
}

type KnobKind = "int" | "float" | "string" | "flag";
type Resolved = Record<string, number | string>;

interface KnobSpec {
  name: string;
  kind: KnobKind;
  /** The default, from the knobs resolved before this one. */
  fallback: (k: Resolved) => number | string;
  /** How the default is derived, for --help. */
  fallbackText: string;
  help: string;
}

const knob = (
  name: string,
  kind: KnobKind,
  fallback: KnobSpec["fallback"],
  fallbackText: string,
  help: string,
): KnobSpec => ({ name, kind, fallback, fallbackText, help });
const num = (k: Resolved, name: string): number => k[name] as number;
const isHalf = (k: Resolved): boolean => k.DEFAULT_FLOAT === "HALF";
/** Processes of this job, as its launcher (mpirun, srun) announces them: the default batch grows with them. */
const ranks = (): number => dist.worldFromEnv().size;

/** Samples in the MLPerf eval set, which every evaluation must cover. */
export const MLPERF_EVAL_SAMPLES = 10_000;

/** In resolution order: a default may read any knob above it. */
export const KNOB_SPECS: readonly KnobSpec[] = [
  knob("MODEL", "string", () => "bert", "bert", "the model to train (only bert)"),
  knob(
    "DEVICE",
    "string",
    () => Device.DEFAULT,
    "the first available device",
    "device kind the run uses (CPU, JS, ...)",
  ),
  knob("GPUS", "int", () => 1, "1", "number of devices: DEVICE:0 .. DEVICE:GPUS-1, batches sharded over them"),
  knob("DEFAULT_FLOAT", "string", () => "FLOAT", "FLOAT", "FLOAT (float32) or HALF (float16 with loss scaling)"),
  knob(
    "BS",
    "int",
    (k) => (isHalf(k) ? 11 : 8) * num(k, "GPUS") * ranks(),
    "11*GPUS*ranks with HALF, else 8*GPUS*ranks",
    "global train batch size (over all ranks of an mpirun/srun job)",
  ),
  knob("EVAL_BS", "int", (k) => num(k, "GPUS"), "1*GPUS", "eval batch size (each rank evaluates whole batches)"),
  knob(
    "PACKING",
    "int",
    () => 0,
    "0",
    "pack up to this many train samples into one row of MAX_SEQ_LENGTH tokens (0: no packing; docs/packing.md)",
  ),
  knob(
    "PACKED_BS",
    "int",
    (k) => (num(k, "PACKING") > 1 ? Math.max(1, Math.round(num(k, "BS") / 2)) : num(k, "BS")),
    "BS/2 with PACKING>1, else BS",
    "packed rows a step (PACKING>0): about BS/(samples a row); BS stays the logged global batch",
  ),
  knob("GRADIENT_ACC_STEPS", "int", () => 1, "1", "micro-batches per step (BS is split into them)"),
  knob(
    "OPT_BASE_LEARNING_RATE",
    "float",
    (k) => 0.0001 * Math.sqrt(num(k, "BS") / 66),
    "0.0001*sqrt(BS/66)",
    "peak learning rate",
  ),
  knob("OPT_LAMB_BETA_1", "float", () => 0.9, "0.9", "LAMB beta1"),
  knob("OPT_LAMB_BETA_2", "float", () => 0.999, "0.999", "LAMB beta2"),
  knob(
    "TRAIN_STEPS",
    "int",
    (k) => Math.floor(3_630_000 / num(k, "BS")),
    "3630000//BS",
    "steps of the LR schedule (and the most the run trains)",
  ),
  knob("NUM_WARMUP_STEPS", "int", () => 1, "1", "linear warmup steps"),
  knob("START_WARMUP_STEP", "int", () => 0, "0", "the step the warmup counts from (LR_SCHEDULE=reference)"),
  knob("POLY_POWER", "float", () => 1.0, "1.0", "polynomial decay power"),
  knob(
    "LR_SCHEDULE",
    "string",
    () => "reference",
    "reference",
    "reference: decay from step 0 over TRAIN_STEPS, warmup replacing it; seed: decay from the warmup's end",
  ),
  knob(
    "LAMB_RULE",
    "string",
    () => "reference",
    "reference",
    "reference: no trust ratio for biases/LayerNorm, masked-LM loss / (weights + 1e-5); seed: trust ratio everywhere",
  ),
  knob("DECAY", "float", () => 0.01, "0.01", "LAMB weight decay (not on biases and LayerNorm)"),
  knob("EPSILON", "float", () => 1e-6, "1e-6", "LAMB epsilon"),
  knob("LOSS_SCALER", "float", (k) => (isHalf(k) ? 2 ** 10 : 1), "2^10 with HALF, else 1", "loss scale for fp16"),
  knob(
    "EVAL_SET_SIZE",
    "int",
    () => MLPERF_EVAL_SAMPLES,
    "10000",
    "samples in the eval set, which every evaluation covers",
  ),
  knob(
    "STRICT_EVAL_SET",
    "flag",
    () => 0,
    "0",
    "refuse eval files holding fewer than EVAL_SET_SIZE samples (else: warn, evaluate on those once)",
  ),
  knob(
    "MAX_EVAL_STEPS",
    "int",
    (k) => Math.ceil(num(k, "EVAL_SET_SIZE") / num(k, "EVAL_BS")),
    "ceil(EVAL_SET_SIZE/EVAL_BS)",
    "eval batches per evaluation",
  ),
  knob(
    "EVAL_STEP_FREQ",
    "int",
    (k) => Math.floor(bertEvalIntervalSamples(num(k, "BS")) / num(k, "BS")),
    "MLPerf interval / BS",
    "evaluate every this many steps",
  ),
  knob("TARGET", "float", () => 0.72, "0.72", "masked-LM accuracy that ends the run"),
  knob("SEED", "int", () => 12345, "12345", "weights init and data order"),
  knob(
    "BASEDIR",
    "string",
    () => basedirFromEnv({ ...process.env, BASEDIR: "" }),
    "$XDG_DATA_HOME/tsgrad/wiki",
    "data folder (train/, eval/ shards)",
  ),
  knob(
    "DATA",
    "string",
    () => "",
    "none",
    "data folder with a manifest.json (tsgrad preprocess writes it): its shards instead of BASEDIR's",
  ),
  knob(
    "INIT_CKPT_DIR",
    "string",
    (k) => k.BASEDIR!,
    "BASEDIR",
    "folder of the init checkpoint model.ckpt-28252 and bert_config.json",
  ),
  knob(
    "BERT_CONFIG",
    "string",
    (k) => join(k.INIT_CKPT_DIR as string, "bert_config.json"),
    "INIT_CKPT_DIR/bert_config.json",
    "model config (BERT-large when the file is absent)",
  ),
  knob("MAX_SEQ_LENGTH", "int", () => 512, "512", "sequence length of the samples"),
  knob("MAX_PREDICTIONS_PER_SEQ", "int", () => 76, "76", "masked positions per sample"),
  knob(
    "INITMLPERF",
    "flag",
    () => 0,
    "0",
    "init phase: clear the run's kernel cache (TSGRAD_CACHE), compile on fake data (needs BENCHMARK)",
  ),
  knob("RUNMLPERF", "flag", () => 0, "0", "run phase: train on the real shards to TARGET"),
  knob("BENCHMARK", "int", () => 0, "0", "run this many steps, then print the estimated training time"),
  knob("LOGMLPERF", "flag", () => 0, "0", "write the MLPerf log result_bert_<SEED>.log"),
  knob("SUBMISSION_PLATFORM", "string", () => "cpu", "cpu", "system name; systems/<name>.json describes it"),
  knob("DISABLE_DROPOUT", "flag", () => 0, "0", "turn every dropout off"),
  knob("TRAIN_BEAM", "int", () => getenv("BEAM", 0), "BEAM", "BEAM width for train kernels"),
  knob("EVAL_BEAM", "int", () => getenv("BEAM", 0), "BEAM", "BEAM width for eval kernels"),
  knob("CKPT", "flag", () => 0, "0", "save a checkpoint every SAVE_CKPT_FREQ steps"),
  knob("SAVE_CKPT_FREQ", "int", () => 1000, "1000", "steps between checkpoints"),
  knob("KEEP_CKPT_AMOUNT", "int", () => 5, "5", "checkpoints kept (oldest deleted)"),
  knob("SAVE_CKPT_DIR", "string", () => "./ckpts", "./ckpts", "checkpoint folder"),
  knob("RESUME", "string", () => "", "none", "checkpoint file to continue from"),
  knob(
    "RESUME_ANY",
    "flag",
    () => 0,
    "0",
    "RESUME even from another run's checkpoint (other seed, model, batch, data or rules)",
  ),
];

/** The names of the knobs. */
export const KNOB_NAMES: ReadonlySet<string> = new Set(KNOB_SPECS.map((s) => s.name));

/** Every knob, resolved: numbers for int/float/flag knobs, strings for the rest. */
export interface Knobs {
  MODEL: string;
  DEVICE: string;
  GPUS: number;
  DEFAULT_FLOAT: string;
  BS: number;
  EVAL_BS: number;
  PACKING: number;
  PACKED_BS: number;
  GRADIENT_ACC_STEPS: number;
  OPT_BASE_LEARNING_RATE: number;
  OPT_LAMB_BETA_1: number;
  OPT_LAMB_BETA_2: number;
  TRAIN_STEPS: number;
  NUM_WARMUP_STEPS: number;
  START_WARMUP_STEP: number;
  POLY_POWER: number;
  LR_SCHEDULE: "reference" | "seed";
  LAMB_RULE: "reference" | "seed";
  DECAY: number;
  EPSILON: number;
  LOSS_SCALER: number;
  EVAL_SET_SIZE: number;
  STRICT_EVAL_SET: number;
  MAX_EVAL_STEPS: number;
  EVAL_STEP_FREQ: number;
  TARGET: number;
  SEED: number;
  BASEDIR: string;
  DATA: string;
  INIT_CKPT_DIR: string;
  BERT_CONFIG: string;
  MAX_SEQ_LENGTH: number;
  MAX_PREDICTIONS_PER_SEQ: number;
  INITMLPERF: number;
  RUNMLPERF: number;
  BENCHMARK: number;
  LOGMLPERF: number;
  SUBMISSION_PLATFORM: string;
  DISABLE_DROPOUT: number;
  TRAIN_BEAM: number;
  EVAL_BEAM: number;
  CKPT: number;
  SAVE_CKPT_FREQ: number;
  KEEP_CKPT_AMOUNT: number;
  SAVE_CKPT_DIR: string;
  RESUME: string;
  RESUME_ANY: number;
}

/** `--eval-bs` for EVAL_BS. */
export const flagOf = (name: string): string => `--${name.toLowerCase().replaceAll("_", "-")}`;

// Decimal only: Number() would also take "0x20", "1e3" for an integer, " 8 ", "Infinity"
const INTEGER = /^[+-]?\d+$/;
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

function parseValue(spec: KnobSpec, raw: string, from: string): number | string {
  if (spec.kind === "string") return raw;
  const bad = (want: string) => new KnobError(`${from}: ${spec.name}=${JSON.stringify(raw)} is not ${want}`);
  if (spec.kind === "float") {
    if (!DECIMAL.test(raw)) throw bad("a decimal number");
  } else if (!INTEGER.test(raw)) {
    throw bad("a decimal integer");
  }
  return Number(raw);
}

/** Levenshtein distance, for suggesting the knob a misspelt variable meant. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}

/**
 * Environment variables that are not knobs but one or two edits from one (`MAX_STPES`), each with the knob it
 * probably meant: the trainer would otherwise run on the default without a word. Short names allow one edit only,
 * and a typo keeps the first letter, so that unrelated variables (`PS1`, npm's `NODE`) are not taken for knobs.
 */
export function misspeltKnobs(env: NodeJS.ProcessEnv): { variable: string; knob: string }[] {
  const names = KNOB_NAMES;
  const found: { variable: string; knob: string }[] = [];
  for (const variable of Object.keys(env)) {
    if (names.has(variable) || !/^[A-Z][A-Z0-9_]*$/.test(variable)) continue;
    let best: { knob: string; distance: number } | undefined;
    for (const knob of names) {
      const allowed = knob.length <= 4 ? 1 : 2;
      if (knob[0] !== variable[0] || Math.abs(knob.length - variable.length) > allowed) continue;
      const distance = editDistance(variable, knob);
      if (distance <= allowed && (best === undefined || distance < best.distance)) best = { knob, distance };
    }
    if (best) found.push({ variable, knob: best.knob });
  }
  return found;
}

/** Flag values by knob name (`--eval-bs 6` or `--EVAL_BS=6`); `help` when --help was asked. */
export function parseKnobFlags(argv: readonly string[]): { values: Map<string, string>; help: boolean } {
  const byFlag = new Map(
    KNOB_SPECS.flatMap(
      (s) =>
        [
          [flagOf(s.name), s],
          [`--${s.name}`, s],
        ] as const,
    ),
  );
  const values = new Map<string, string>();
  let help = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--help" || arg === "-h") {
      help = true;
      continue;
    }
    const eq = arg.indexOf("=");
    const flag = eq < 0 ? arg : arg.slice(0, eq);
    const spec = byFlag.get(flag);
    if (spec === undefined) throw new KnobError(`unknown option ${JSON.stringify(arg)} (see --help)`);
    let value = eq < 0 ? undefined : arg.slice(eq + 1);
    if (value === undefined)
      value = spec.kind === "flag" && (argv[i + 1] === undefined || argv[i + 1]!.startsWith("--")) ? "1" : argv[++i];
    if (value === undefined) throw new KnobError(`option ${flag} needs a value`);
    values.set(spec.name, value);
  }
  return { values, help };
}

/** Knobs from flags, then the environment, then the defaults; `null` when --help was asked. */
export function parseKnobs(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Knobs | null {
  const { values, help } = parseKnobFlags(argv);
  if (help) return null;
  for (const { variable, knob } of misspeltKnobs(env)) {
    console.error(`warning: ${variable} is not a knob of the trainer and is ignored; did you mean ${knob}?`);
  }
  const resolved: Resolved = {};
  for (const spec of KNOB_SPECS) {
    const flagValue = values.get(spec.name);
    const envValue = env[spec.name];
    if (flagValue !== undefined) resolved[spec.name] = parseValue(spec, flagValue, `option ${flagOf(spec.name)}`);
    else if (envValue !== undefined && envValue !== "") resolved[spec.name] = parseValue(spec, envValue, "environment");
    else resolved[spec.name] = spec.fallback(resolved);
  }
  return resolved as unknown as Knobs;
}

/** Rejects values the trainer cannot run with, naming the knob; `world`: this rank among the job's processes. */
export function validateKnobs(k: Knobs, world: { rank: number; size: number } = { rank: 0, size: 1 }): void {
  if (k.MODEL !== "bert") throw new KnobError(`MODEL=${JSON.stringify(k.MODEL)}: this trainer trains bert only`);
  for (const name of ["LR_SCHEDULE", "LAMB_RULE"] as const)
    if (k[name] !== "reference" && k[name] !== "seed")
      throw new KnobError(
        `${name}=${JSON.stringify(k[name])}: reference (the MLPerf reference's) or seed (tinygrad's)`,
      );
  const kind = k.DEVICE.split(":")[0]!;
  try {
    Device.canonicalize(kind);
  } catch (error) {
    throw new KnobError(`DEVICE=${JSON.stringify(k.DEVICE)}: ${(error as Error).message}`);
  }
  if (!Device.isAvailable(kind))
    throw new KnobError(
      `DEVICE=${JSON.stringify(k.DEVICE)}: the ${kind.toUpperCase()} device is not available on this machine`,
    );
  if (k.DEFAULT_FLOAT !== "FLOAT" && k.DEFAULT_FLOAT !== "HALF")
    throw new KnobError(`DEFAULT_FLOAT=${JSON.stringify(k.DEFAULT_FLOAT)}: use FLOAT or HALF`);
  const positive: (keyof Knobs)[] = [
    "GPUS",
    "BS",
    "EVAL_BS",
    "PACKED_BS",
    "GRADIENT_ACC_STEPS",
    "TRAIN_STEPS",
    "EVAL_SET_SIZE",
    "MAX_EVAL_STEPS",
    "EVAL_STEP_FREQ",
    "SAVE_CKPT_FREQ",
    "KEEP_CKPT_AMOUNT",
    "MAX_SEQ_LENGTH",
    "MAX_PREDICTIONS_PER_SEQ",
    "LOSS_SCALER",
  ];
  for (const name of positive)
    if (!((k[name] as number) > 0)) throw new KnobError(`${name}=${k[name]} must be positive`);
  const nonNegative: (keyof Knobs)[] = [
    "NUM_WARMUP_STEPS",
    "PACKING",
    "BENCHMARK",
    "SEED",
    "TRAIN_BEAM",
    "EVAL_BEAM",
    "OPT_BASE_LEARNING_RATE",
    "DECAY",
    "EPSILON",
  ];
  for (const name of nonNegative)
    if (!((k[name] as number) >= 0)) throw new KnobError(`${name}=${k[name]} must not be negative`);
  if (!(k.TARGET > 0 && k.TARGET <= 1))
    throw new KnobError(`TARGET=${k.TARGET} is a masked-LM accuracy, a fraction in (0, 1]`);
  if (k.BS % world.size !== 0)
    throw new KnobError(`BS=${k.BS} does not split over the job's ${world.size} ranks (one part of the batch each)`);
  const rankBatch = k.BS / world.size;
  const onRank = world.size > 1 ? ` (a rank's part of BS=${k.BS} over ${world.size} ranks)` : "";
  if (rankBatch % k.GRADIENT_ACC_STEPS !== 0)
    throw new KnobError(
      `BS=${world.size > 1 ? `${rankBatch}${onRank}` : k.BS} is not a multiple of GRADIENT_ACC_STEPS=${k.GRADIENT_ACC_STEPS}`,
    );
  if (k.GPUS > 1 && (rankBatch / k.GRADIENT_ACC_STEPS) % k.GPUS !== 0)
    throw new KnobError(
      `the micro-batch BS/GRADIENT_ACC_STEPS=${rankBatch / k.GRADIENT_ACC_STEPS}${onRank} does not split over GPUS=${k.GPUS} devices`,
    );
  if (k.PACKING > 0) checkPacking(k, world);
  if (k.GPUS > 1 && k.EVAL_BS % k.GPUS !== 0)
    throw new KnobError(`EVAL_BS=${k.EVAL_BS} does not split over GPUS=${k.GPUS} devices`);
  if (k.INITMLPERF && k.RUNMLPERF)
    throw new KnobError("INITMLPERF and RUNMLPERF are two phases, two processes: set one");
  if (k.INITMLPERF && !k.BENCHMARK)
    throw new KnobError("INITMLPERF=1 needs BENCHMARK=N: the number of fake steps that compile every kernel");
  // the init phase deletes the kernel cache: only one the run owns, which TSGRAD_CACHE names
  if (k.INITMLPERF && !process.env.TSGRAD_CACHE)
    throw new KnobError(
      "INITMLPERF=1 clears the kernel cache, and TSGRAD_CACHE names none for this run: set it to a folder of the run's own (run_and_time uses ./kernel-cache); the user-wide cache ($XDG_CACHE_HOME/tsgrad, ~/.cache/tsgrad) is not deleted unless TSGRAD_CACHE names it",
    );
  if (k.RUNMLPERF && k.EVAL_BS * k.MAX_EVAL_STEPS < k.EVAL_SET_SIZE) {
    throw new KnobError(
      `EVAL_BS*MAX_EVAL_STEPS=${k.EVAL_BS}*${k.MAX_EVAL_STEPS}=${k.EVAL_BS * k.MAX_EVAL_STEPS} does not cover the ${k.EVAL_SET_SIZE}-sample eval set (EVAL_SET_SIZE): raise MAX_EVAL_STEPS to ${Math.ceil(k.EVAL_SET_SIZE / k.EVAL_BS)}`,
    );
  }
  // rank 0 reads the checkpoint and sends it to the others, whose machines need not have it
  if (k.RESUME !== "" && world.rank === 0 && !existsSync(k.RESUME))
    throw new KnobError(`RESUME=${k.RESUME}: no such checkpoint file`);
}

/** Packed rows split over the ranks, then the micro-batches, then the devices, as BS does. */
function checkPacking(k: Knobs, world: { size: number }): void {
  const onRank = world.size > 1 ? ` (a rank's part of PACKED_BS=${k.PACKED_BS} over ${world.size} ranks)` : "";
  if (k.PACKED_BS % world.size !== 0)
    throw new KnobError(`PACKED_BS=${k.PACKED_BS} packed rows do not split over the job's ${world.size} ranks`);
  const rankRows = k.PACKED_BS / world.size;
  if (rankRows % k.GRADIENT_ACC_STEPS !== 0)
    throw new KnobError(
      `${rankRows} packed rows${onRank} are not a multiple of GRADIENT_ACC_STEPS=${k.GRADIENT_ACC_STEPS}`,
    );
  if (k.GPUS > 1 && (rankRows / k.GRADIENT_ACC_STEPS) % k.GPUS !== 0)
    throw new KnobError(
      `the packed micro-batch of ${rankRows / k.GRADIENT_ACC_STEPS} rows${onRank} does not split over GPUS=${k.GPUS} devices`,
    );
}

/** --help text: every knob with its flag and default. */
export function knobsHelp(): string {
  const rows = KNOB_SPECS.map(
    (s) => `  ${`${s.name} / ${flagOf(s.name)}`.padEnd(54)} ${s.help} (default ${s.fallbackText})`,
  );
  return rows.join("\n");
}

/** `HParam: "NAME": value`, one line per knob, as the reference prints its config. */
export function hparamLines(k: Knobs): string[] {
  return KNOB_SPECS.map((s) => `HParam: "${s.name}": ${k[s.name as keyof Knobs]}`);
}
