// The MLPerf log format: `:::MLLOG {json}` lines, written the way the reference logger
// (mlcommons/logging `mllog`) writes them and read the way the official checkers read
// them. ../shared/mllog/SPEC.md (section 2) is the contract.
//
//   const mllog = new MlperfLogger({ path: "result_bert_1234.log", echo: true });
//   mllog.start(MLLOG_KEYS.RUN_START);
//   mllog.event(MLLOG_KEYS.EVAL_ACCURACY, 0.72, { epoch_num: 149952 });
//   mllog.end(MLLOG_KEYS.RUN_STOP, null, { status: "success" });
import { appendFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** The token that marks a record; text before it on the line is ignored by the checkers. */
export const MLLOG_PREFIX = ":::MLLOG ";

/** Every key the BERT reference logs, named as mlperf_logging's `constants` names them. */
export const MLLOG_KEYS = {
  SUBMISSION_ORG: "submission_org",
  SUBMISSION_PLATFORM: "submission_platform",
  SUBMISSION_DIVISION: "submission_division",
  SUBMISSION_STATUS: "submission_status",
  SUBMISSION_BENCHMARK: "submission_benchmark",
  CACHE_CLEAR: "cache_clear",
  INIT_START: "init_start",
  INIT_STOP: "init_stop",
  RUN_START: "run_start",
  RUN_STOP: "run_stop",
  SEED: "seed",
  GLOBAL_BATCH_SIZE: "global_batch_size",
  GRADIENT_ACCUMULATION_STEPS: "gradient_accumulation_steps",
  MAX_SEQUENCE_LENGTH: "max_sequence_length",
  MAX_PREDICTIONS_PER_SEQ: "max_predictions_per_seq",
  OPT_NAME: "opt_name",
  OPT_BASE_LEARNING_RATE: "opt_base_learning_rate",
  OPT_LAMB_WEIGHT_DECAY_RATE: "opt_lamb_weight_decay_rate",
  OPT_LAMB_BETA_1: "opt_lamb_beta_1",
  OPT_LAMB_BETA_2: "opt_lamb_beta_2",
  OPT_LAMB_LEARNING_RATE_DECAY_POLY_POWER: "opt_lamb_learning_rate_decay_poly_power",
  OPT_LAMB_EPSILON: "opt_lamb_epsilon",
  OPT_EPSILON: "opt_epsilon",
  OPT_LEARNING_RATE_WARMUP_STEPS: "opt_learning_rate_warmup_steps",
  NUM_WARMUP_STEPS: "num_warmup_steps",
  START_WARMUP_STEP: "start_warmup_step",
  OPT_LEARNING_RATE_TRAINING_STEPS: "opt_learning_rate_training_steps",
  TRAIN_SAMPLES: "train_samples",
  EVAL_SAMPLES: "eval_samples",
  EPOCH_START: "epoch_start",
  EPOCH_STOP: "epoch_stop",
  BLOCK_START: "block_start",
  BLOCK_STOP: "block_stop",
  EVAL_START: "eval_start",
  EVAL_STOP: "eval_stop",
  EVAL_ACCURACY: "eval_accuracy",
} as const;

/**
 * Keys of our own, beside the rules' (the checker reads only the keys its rules name; NVIDIA and Graphcore log such
 * records too): what a packed run packed (docs/packing.md).
 */
export const PACKING_KEYS = {
  MAX_SAMPLES_PER_ROW: "packing_max_samples_per_row",
  ROWS_PER_STEP: "packing_rows_per_step",
} as const;

export type MllogKey = (typeof MLLOG_KEYS)[keyof typeof MLLOG_KEYS];
export type MllogEventType = "INTERVAL_START" | "INTERVAL_END" | "POINT_IN_TIME";
export type MllogValue = null | boolean | number | string | MllogValue[] | { [name: string]: MllogValue };
export type MllogMetadata = { [name: string]: MllogValue };

/** One record, with its fields in the order the reference logger writes them. */
export interface MllogRecord {
  namespace: string;
  time_ms: number;
  event_type: MllogEventType;
  key: string;
  value: MllogValue;
  metadata: MllogMetadata;
}

export class MllogError extends Error {
  override name = "MllogError";
}

/** Python's json.dumps layout (", " and ": " separators), ASCII only (\uXXXX escapes). */
function toAsciiJson(value: MllogValue, where: string): string {
  if (value === null || typeof value === "boolean") return String(value);
  if (typeof value === "number") {
    // Python writes NaN/Infinity, which is not JSON: the checker would report a parsing error.
    if (!Number.isFinite(value)) throw new MllogError(`${where}: ${value} cannot be written as JSON`);
    return JSON.stringify(value);
  }
  if (typeof value === "string") {
    return JSON.stringify(value).replace(
      /[\u007f-\uffff]/g,
      (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`,
    );
  }
  if (Array.isArray(value)) return `[${value.map((item, i) => toAsciiJson(item, `${where}[${i}]`)).join(", ")}]`;
  const fields = Object.entries(value).map(
    ([name, item]) => `${toAsciiJson(name, where)}: ${toAsciiJson(item, `${where}.${name}`)}`,
  );
  return `{${fields.join(", ")}}`;
}

/** The full `:::MLLOG {...}` line (no newline) for a record. */
export function formatMllogLine(record: MllogRecord): string {
  if (!Number.isInteger(record.time_ms))
    throw new MllogError(`${record.key}: time_ms ${record.time_ms} is not an integer`);
  const ordered: MllogValue = {
    namespace: record.namespace,
    time_ms: record.time_ms,
    event_type: record.event_type,
    key: record.key,
    value: record.value,
    metadata: record.metadata,
  };
  return MLLOG_PREFIX + toAsciiJson(ordered, record.key);
}

/** A record as found in a log: its 0-based index among MLLOG records (the checker's "line N")
 *  and its 1-based line number in the file. Fields are whatever the JSON held. */
export interface ParsedMllogRecord {
  index: number;
  lineNumber: number;
  line: string;
  fields: { [name: string]: unknown };
}

export interface MllogParseProblem {
  index: number;
  lineNumber: number;
  message: string;
}

export interface ParsedMllog {
  records: ParsedMllogRecord[];
  problems: MllogParseProblem[];
}

/** Reads every line that holds the `:::MLLOG ` token; other lines (console output) are skipped. */
export function parseMllog(text: string): ParsedMllog {
  const records: ParsedMllogRecord[] = [];
  const problems: MllogParseProblem[] = [];
  let index = 0;
  text.split(/\r\n|\n|\r/).forEach((line, lineIndex) => {
    const at = line.indexOf(MLLOG_PREFIX);
    if (at < 0) return;
    const json = line.slice(at + MLLOG_PREFIX.length);
    const where = { index: index++, lineNumber: lineIndex + 1 };
    let fields: unknown;
    try {
      fields = JSON.parse(json);
    } catch (error) {
      problems.push({ ...where, message: `invalid JSON: ${(error as Error).message}` });
      return;
    }
    if (typeof fields !== "object" || fields === null || Array.isArray(fields)) {
      problems.push({ ...where, message: "the JSON is not an object" });
      return;
    }
    records.push({ ...where, line, fields: fields as { [name: string]: unknown } });
  });
  return { records, problems };
}

const PROJECT_ROOT = fileURLToPath(new URL("../../", import.meta.url));
const THIS_FILE = fileURLToPath(import.meta.url);

/** The first stack frame outside this file: the trainer line that asked for the record. */
function callerLocation(): { file: string; lineno: number } {
  const frames = (new Error().stack ?? "").split("\n").slice(1);
  for (const frame of frames) {
    const match = /^at (?:.*\()?(.*?):(\d+):\d+\)?$/.exec(frame.trim());
    if (match === null) continue;
    const location = match[1]!;
    if (location.startsWith("node:")) continue;
    const file = location.startsWith("file://") ? fileURLToPath(location) : location;
    if (file === THIS_FILE) continue;
    return { file: path.relative(PROJECT_ROOT, file).split(path.sep).join("/"), lineno: Number(match[2]) };
  }
  return { file: "unknown", lineno: 0 };
}

export interface MlperfLoggerOptions {
  /** Log file, opened for append: the init and run phases are two processes writing one file. */
  path?: string;
  /** Also print each line on stdout, so the console log holds the records too. */
  echo?: boolean;
  /** Wall clock in ms since the Unix epoch (tests pass a fake one). */
  clock?: () => number;
}

/** Writes MLLOG records: `start` for *_start keys, `end` for *_stop keys, `event` for the rest. */
export class MlperfLogger {
  readonly path: string | undefined;
  private readonly echo: boolean;
  private readonly clock: () => number;

  constructor(options: MlperfLoggerOptions = {}) {
    this.path = options.path;
    this.echo = options.echo ?? false;
    this.clock = options.clock ?? Date.now;
  }

  start(key: string, value: MllogValue = null, metadata: MllogMetadata = {}): MllogRecord {
    return this.write("INTERVAL_START", key, value, metadata);
  }

  end(key: string, value: MllogValue = null, metadata: MllogMetadata = {}): MllogRecord {
    return this.write("INTERVAL_END", key, value, metadata);
  }

  event(key: string, value: MllogValue = null, metadata: MllogMetadata = {}): MllogRecord {
    return this.write("POINT_IN_TIME", key, value, metadata);
  }

  private write(eventType: MllogEventType, key: string, value: MllogValue, metadata: MllogMetadata): MllogRecord {
    const record: MllogRecord = {
      namespace: "",
      time_ms: Math.round(this.clock()),
      event_type: eventType,
      key,
      value,
      metadata: { ...callerLocation(), ...metadata },
    };
    const line = `${formatMllogLine(record)}\n`;
    if (this.path !== undefined) appendFileSync(this.path, line);
    if (this.echo) process.stdout.write(line);
    return record;
  }
}

/** The fields of an MLPerf `systems/<platform>.json` that the submission records come from. */
export interface SystemDescription {
  submitter: string;
  division: string;
  status: string;
  system_name: string;
}

/** systems/*.json status -> the `submission_status` value the reference logs. */
const SUBMISSION_STATUS_BY_SYSTEM_STATUS: { [status: string]: string } = {
  "Available on-premise": "onprem",
  "Available cloud": "cloud",
  "Research, Development, or Internal (RDI)": "research",
  Preview: "preview",
};

/** submission_org/platform/division/status/benchmark, as the init phase logs them first.
 *  `platform` is the system's id (the json file's base name, e.g. "tinybox_green"). */
export function logSubmissionInfo(logger: MlperfLogger, system: SystemDescription, platform: string): void {
  const status = SUBMISSION_STATUS_BY_SYSTEM_STATUS[system.status];
  if (status === undefined) {
    const known = Object.keys(SUBMISSION_STATUS_BY_SYSTEM_STATUS)
      .map((s) => JSON.stringify(s))
      .join(", ");
    throw new MllogError(`systems/${platform}.json: status ${JSON.stringify(system.status)} is not one of ${known}`);
  }
  if (system.division !== "closed" && system.division !== "open") {
    throw new MllogError(
      `systems/${platform}.json: division ${JSON.stringify(system.division)} is not "closed" or "open"`,
    );
  }
  if (system.submitter === "") throw new MllogError(`systems/${platform}.json: submitter is empty`);
  if (platform === "") throw new MllogError("submission platform is empty");
  logger.event(MLLOG_KEYS.SUBMISSION_ORG, system.submitter);
  logger.event(MLLOG_KEYS.SUBMISSION_PLATFORM, platform);
  logger.event(MLLOG_KEYS.SUBMISSION_DIVISION, system.division);
  logger.event(MLLOG_KEYS.SUBMISSION_STATUS, status);
  logger.event(MLLOG_KEYS.SUBMISSION_BENCHMARK, "bert");
}

/** The trainer's resolved knobs that the BERT hyper-parameter records come from, under the
 *  environment variables' names (../shared/MISSION.md). Optional ones default to the reference. */
export interface BertKnobs {
  BS: number;
  OPT_BASE_LEARNING_RATE: number;
  TRAIN_STEPS: number;
  NUM_WARMUP_STEPS: number;
  POLY_POWER: number;
  DECAY: number;
  EPSILON: number;
  GRADIENT_ACC_STEPS?: number;
  START_WARMUP_STEP?: number;
  OPT_LAMB_BETA_1?: number;
  OPT_LAMB_BETA_2?: number;
  MAX_SEQ_LENGTH?: number;
  MAX_PREDICTIONS_PER_SEQ?: number;
}

export interface BertSampleCounts {
  /** Samples the schedule trains on (tinycorp logs BS * TRAIN_STEPS up front). */
  trainSamples?: number;
  /** Size of the eval set; the rules fix it at 10,000. */
  evalSamples?: number;
  /** A packed run's rows: samples a row at most, rows a step (global_batch_size stays BS, the nominal samples). */
  packing?: { maxSamplesPerRow: number; rowsPerStep: number };
}

function requirePositiveInteger(name: string, value: number): number {
  if (!Number.isInteger(value) || value <= 0) throw new MllogError(`knob ${name}: ${value} is not a positive integer`);
  return value;
}

function requireFinite(name: string, value: number): number {
  if (!Number.isFinite(value)) throw new MllogError(`knob ${name}: ${value} is not a finite number`);
  return value;
}

/** Logs every hyper-parameter key of SPEC.md section 4.2 once, plus train_samples and eval_samples. */
export function logBertHyperparameters(logger: MlperfLogger, knobs: BertKnobs, counts: BertSampleCounts = {}): void {
  const batchSize = requirePositiveInteger("BS", knobs.BS);
  const trainingSteps = requirePositiveInteger("TRAIN_STEPS", knobs.TRAIN_STEPS);
  const warmupSteps = requireFinite("NUM_WARMUP_STEPS", knobs.NUM_WARMUP_STEPS);
  const epsilon = requireFinite("EPSILON", knobs.EPSILON);
  const entries: [MllogKey, MllogValue][] = [
    [MLLOG_KEYS.GLOBAL_BATCH_SIZE, batchSize],
    [MLLOG_KEYS.MAX_SEQUENCE_LENGTH, requirePositiveInteger("MAX_SEQ_LENGTH", knobs.MAX_SEQ_LENGTH ?? 512)],
    [
      MLLOG_KEYS.MAX_PREDICTIONS_PER_SEQ,
      requirePositiveInteger("MAX_PREDICTIONS_PER_SEQ", knobs.MAX_PREDICTIONS_PER_SEQ ?? 76),
    ],
    [MLLOG_KEYS.OPT_NAME, "LAMB"],
    [MLLOG_KEYS.OPT_BASE_LEARNING_RATE, requireFinite("OPT_BASE_LEARNING_RATE", knobs.OPT_BASE_LEARNING_RATE)],
    [MLLOG_KEYS.OPT_LAMB_WEIGHT_DECAY_RATE, requireFinite("DECAY", knobs.DECAY)],
    [MLLOG_KEYS.OPT_LAMB_BETA_1, requireFinite("OPT_LAMB_BETA_1", knobs.OPT_LAMB_BETA_1 ?? 0.9)],
    [MLLOG_KEYS.OPT_LAMB_BETA_2, requireFinite("OPT_LAMB_BETA_2", knobs.OPT_LAMB_BETA_2 ?? 0.999)],
    [MLLOG_KEYS.OPT_LAMB_LEARNING_RATE_DECAY_POLY_POWER, requireFinite("POLY_POWER", knobs.POLY_POWER)],
    [MLLOG_KEYS.OPT_LAMB_EPSILON, epsilon],
    [MLLOG_KEYS.OPT_EPSILON, epsilon],
    [MLLOG_KEYS.OPT_LEARNING_RATE_WARMUP_STEPS, warmupSteps],
    [MLLOG_KEYS.NUM_WARMUP_STEPS, warmupSteps],
    [MLLOG_KEYS.START_WARMUP_STEP, requireFinite("START_WARMUP_STEP", knobs.START_WARMUP_STEP ?? 0)],
    [MLLOG_KEYS.OPT_LEARNING_RATE_TRAINING_STEPS, trainingSteps],
    [
      MLLOG_KEYS.GRADIENT_ACCUMULATION_STEPS,
      requirePositiveInteger("GRADIENT_ACC_STEPS", knobs.GRADIENT_ACC_STEPS ?? 1),
    ],
    [MLLOG_KEYS.EVAL_SAMPLES, requirePositiveInteger("evalSamples", counts.evalSamples ?? 10000)],
    [
      MLLOG_KEYS.TRAIN_SAMPLES,
      requirePositiveInteger("trainSamples", counts.trainSamples ?? batchSize * trainingSteps),
    ],
  ];
  for (const [key, value] of entries) logger.event(key, value);
  if (counts.packing) {
    logger.event(PACKING_KEYS.MAX_SAMPLES_PER_ROW, requirePositiveInteger("PACKING", counts.packing.maxSamplesPerRow));
    logger.event(PACKING_KEYS.ROWS_PER_STEP, requirePositiveInteger("PACKED_BS", counts.packing.rowsPerStep));
  }
}
