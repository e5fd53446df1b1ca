// Checks an MLPerf BERT log against what the official checkers (mlcommons/logging:
// compliance_checker rulesets 4.1.0 and 5.0.0, and the package checker's seed check)
// reject, as ../shared/mllog/SPEC.md records them. Messages quote the official wording so a
// failure here reads like the failure the official tool would print.
//
//   npx tsx mlperf/bert/compliance.ts result_bert_1234.log [--ruleset 4.1.0|5.0.0] [--werror]
//
// errors:   the official checkers fail the log;
// warnings: the official checker warns (fails only with --werror);
// notes:    written rules no checker verifies (eval cadence, eval set size, run_stop status).
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { MLLOG_KEYS as K, parseMllog, type ParsedMllogRecord } from "./mllog.ts";

export const RULESETS = ["4.1.0", "5.0.0"] as const;
export type Ruleset = (typeof RULESETS)[number];

export interface ComplianceIssue {
  /** 0-based index among MLLOG records (the official checker's "line N"); null for whole-log issues. */
  index: number | null;
  /** 1-based line in the file; null for whole-log issues. */
  lineNumber: number | null;
  key: string | null;
  message: string;
}

export interface ComplianceResult {
  ruleset: Ruleset;
  division: string | null;
  errors: ComplianceIssue[];
  warnings: ComplianceIssue[];
  notes: ComplianceIssue[];
}

export interface ComplianceOptions {
  ruleset?: Ruleset;
}

/** A record whose required fields are present and typed. */
interface LogRecord {
  index: number;
  lineNumber: number;
  line: string;
  timeMs: number;
  key: string;
  value: unknown;
  metadata: { [name: string]: unknown };
}

const INIT_BUDGET_MINUTES: { [division: string]: number } = { closed: 30, open: 240 };

const BENCHMARKS_BY_RULESET: { [ruleset in Ruleset]: string[] } = {
  "4.1.0": [
    "resnet",
    "ssd",
    "stable_diffusion",
    "maskrcnn",
    "gpt3",
    "dlrm_dcnv2",
    "bert",
    "rnnt",
    "unet3d",
    "gnn",
    "llama2_70b_lora",
  ],
  "5.0.0": ["retinanet", "stable_diffusion", "dlrm_dcnv2", "bert", "rgat", "llama2_70b_lora"],
};

/** closed_bert.yaml: the hyper-parameters a closed BERT log must log exactly once. */
const CLOSED_BERT_HPARAMS = [
  K.GLOBAL_BATCH_SIZE,
  K.OPT_BASE_LEARNING_RATE,
  K.OPT_LAMB_EPSILON,
  K.OPT_LEARNING_RATE_TRAINING_STEPS,
  K.OPT_LEARNING_RATE_WARMUP_STEPS,
  K.NUM_WARMUP_STEPS,
  K.START_WARMUP_STEP,
  K.OPT_LAMB_BETA_1,
  K.OPT_LAMB_BETA_2,
  K.OPT_LAMB_WEIGHT_DECAY_RATE,
];

/** Keys the RCP checker finds by substring search of whole lines (SPEC.md section 8). */
const RCP_SUBSTRING_KEYS = [K.GLOBAL_BATCH_SIZE, K.EVAL_ACCURACY, K.RUN_STOP, K.SUBMISSION_BENCHMARK, K.TRAIN_SAMPLES];

const TARGET_ACCURACY = 0.72;

/** MLPerf BERT evaluation interval in samples for a global batch size (training rules). */
export function bertEvalIntervalSamples(globalBatchSize: number): number {
  return Math.floor((0.05 * (230.23 * globalBatchSize + 3_000_000)) / 25_000) * 25_000;
}

function hasField(object: object, name: string): boolean {
  return Object.hasOwn(object, name);
}

/** Python's float(x) for a time_ms field: numbers and numeric strings. */
function timeOf(raw: unknown): number | null {
  if (typeof raw === "number" && Number.isFinite(raw)) return raw;
  if (typeof raw === "string" && raw.trim() !== "" && Number.isFinite(Number(raw))) return Number(raw);
  return null;
}

/** Python's int(x) succeeds: ints, finite floats (truncated), integer strings, booleans. */
function convertsToInt(value: unknown): boolean {
  if (typeof value === "number") return Number.isFinite(value);
  if (typeof value === "boolean") return true;
  return typeof value === "string" && /^\s*[+-]?\d+(_\d+)*\s*$/.test(value);
}

const sameValue = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);
const show = (value: unknown): string => JSON.stringify(value) ?? String(value);

class IssueList {
  readonly issues: ComplianceIssue[] = [];

  /** `record` null: an issue of the whole log, optionally about one key. */
  add(record: { index: number; lineNumber: number; key?: string } | null, message: string, key?: string): void {
    this.issues.push({
      index: record?.index ?? null,
      lineNumber: record?.lineNumber ?? null,
      key: record?.key ?? key ?? null,
      message,
    });
  }

  /** A failed per-record CHECK, worded like the official checker's. */
  check(record: LogRecord, why: string, officialTest: string): void {
    this.add(
      record,
      `CHECK for '${record.key}' failed in record ${record.index} (line ${record.lineNumber}): ${why} (failed test: ${officialTest})`,
    );
  }
}

/** Drops records the checker cannot read (it would report or crash on them) and types the rest. */
function readRecords(parsedRecords: ParsedMllogRecord[], errors: IssueList): LogRecord[] {
  const records: LogRecord[] = [];
  for (const { index, lineNumber, line, fields } of parsedRecords) {
    const where = { index, lineNumber, key: typeof fields.key === "string" ? fields.key : undefined };
    const missing = ["time_ms", "key", "value", "metadata"].filter((name) => !hasField(fields, name));
    if (missing.length > 0) {
      const crash = missing.includes("value") ? " (the official checker crashes with KeyError: 'value')" : "";
      errors.add(
        where,
        `record ${index} (line ${lineNumber}) has no ${missing.map((m) => `"${m}"`).join(", ")} field${crash}`,
      );
      continue;
    }
    const timeMs = timeOf(fields.time_ms);
    const metadata = fields.metadata;
    if (timeMs === null)
      errors.add(where, `record ${index} (line ${lineNumber}): time_ms ${show(fields.time_ms)} is not a number`);
    if (typeof fields.key !== "string")
      errors.add(where, `record ${index} (line ${lineNumber}): key ${show(fields.key)} is not a string`);
    if (typeof metadata !== "object" || metadata === null || Array.isArray(metadata)) {
      errors.add(where, `record ${index} (line ${lineNumber}): metadata ${show(metadata)} is not an object`);
      continue;
    }
    if (timeMs === null || typeof fields.key !== "string") continue;
    records.push({
      index,
      lineNumber,
      line,
      timeMs,
      key: fields.key,
      value: fields.value,
      metadata: metadata as LogRecord["metadata"],
    });
  }
  return records;
}

/** REQ EXACTLY_ONE: none is an error, several different values an error, several equal values a warning. */
function requireExactlyOne(records: LogRecord[], key: string, errors: IssueList, warnings: IssueList): void {
  const found = records.filter((r) => r.key === key);
  if (found.length === 0) {
    errors.add(null, `Required EXACTLY_ONE occurrence of '${key}' but found 0`, key);
  } else if (found.length > 1) {
    const values = found.map((r) => r.value);
    const distinct = values.filter((v, i) => values.findIndex((w) => sameValue(v, w)) === i);
    const last = found[found.length - 1]!;
    if (distinct.length > 1) {
      errors.add(
        last,
        `Required EXACTLY_ONE occurrence of '${key}' but found ${found.length} with different values: ${show(distinct)}`,
      );
    } else {
      warnings.add(last, `Required EXACTLY_ONE occurrence of '${key}' but found ${found.length}`);
    }
  }
}

function requireAtLeastOne(records: LogRecord[], keys: string[], errors: IssueList): void {
  if (records.some((r) => keys.includes(r.key))) return;
  const names = keys.map((k) => `'${k}'`).join(" or ");
  errors.add(null, `Required AT_LEAST_ONE occurrence of ${names} but found 0`, keys[0]);
}

/** The official rule files' REQ counts, for a ruleset and division. */
function checkCounts(
  records: LogRecord[],
  ruleset: Ruleset,
  division: string,
  errors: IssueList,
  warnings: IssueList,
): void {
  const exactlyOne: string[] = [
    K.SUBMISSION_DIVISION,
    K.SUBMISSION_BENCHMARK,
    K.INIT_STOP,
    K.RUN_START,
    K.RUN_STOP,
    K.TRAIN_SAMPLES,
    K.EVAL_SAMPLES,
  ];
  if (ruleset === "4.1.0") exactlyOne.unshift(K.SUBMISSION_ORG, K.SUBMISSION_PLATFORM);
  if (division === "closed") exactlyOne.push(K.GRADIENT_ACCUMULATION_STEPS, ...CLOSED_BERT_HPARAMS);
  for (const key of exactlyOne) requireExactlyOne(records, key, errors, warnings);
  for (const key of [K.CACHE_CLEAR, K.INIT_START, K.EVAL_ACCURACY]) requireAtLeastOne(records, [key], errors);
  requireAtLeastOne(records, [K.EPOCH_START, K.BLOCK_START], errors);
  requireAtLeastOne(records, [K.EPOCH_STOP, K.BLOCK_STOP], errors);
  requireAtLeastOne(records, [K.EVAL_START, K.BLOCK_START], errors);
  requireAtLeastOne(records, [K.EVAL_STOP, K.BLOCK_STOP], errors);
}

/** The per-record CHECKs, run in log order over the same state the official rule files keep. */
function checkRecords(records: LogRecord[], ruleset: Ruleset, errors: IssueList): void {
  let initStarted = false;
  let initStopped = false;
  let runStarted = false;
  let firstInitStart = Infinity;
  let initBudgetMinutes = 0; // armed by submission_division, as in common.yaml
  const has = (r: LogRecord, name: string) => hasField(r.metadata, name);
  for (const r of records) {
    switch (r.key) {
      case K.SUBMISSION_ORG:
      case K.SUBMISSION_PLATFORM:
        if (ruleset === "4.1.0" && r.value === "") errors.check(r, "the value is empty", "v['value'] != ''");
        break;
      case K.TRAIN_SAMPLES:
      case K.EVAL_SAMPLES:
        if (r.value === "") errors.check(r, "the value is empty", "v['value'] != ''");
        break;
      case K.SUBMISSION_DIVISION:
        if (r.value === "closed" || r.value === "open") initBudgetMinutes = INIT_BUDGET_MINUTES[r.value]!;
        else errors.check(r, `division ${show(r.value)} is not "closed" or "open"`, "v['value'] in ['closed', 'open']");
        break;
      case K.SUBMISSION_BENCHMARK:
        if (!BENCHMARKS_BY_RULESET[ruleset].includes(String(r.value))) {
          errors.check(
            r,
            `${show(r.value)} is not a benchmark of training ruleset ${ruleset}`,
            `v['value'] in ${show(BENCHMARKS_BY_RULESET[ruleset])}`,
          );
        } else if (r.value !== "bert") {
          errors.add(
            r,
            `record ${r.index} (line ${r.lineNumber}): submission_benchmark is ${show(r.value)}; this validator checks BERT logs only`,
          );
        }
        break;
      case K.GRADIENT_ACCUMULATION_STEPS:
        if (!(typeof r.value === "number" && r.value > 0))
          errors.check(r, `value ${show(r.value)} is not a number > 0`, "v['value'] > 0");
        break;
      case K.INIT_START:
        if (initStopped) errors.check(r, "init_start after init_stop", "not s['init_stopped']");
        if (runStarted) errors.check(r, "init_start after run_start", "not s['run_started']");
        initStarted = true;
        firstInitStart = Math.min(firstInitStart, r.timeMs);
        break;
      case K.INIT_STOP: {
        if (!initStarted) errors.check(r, "init_stop before any init_start", "s['init_started']");
        if (runStarted) errors.check(r, "init_stop after run_start", "not s['run_started']");
        const elapsedMs = r.timeMs - firstInitStart;
        if (!(elapsedMs < initBudgetMinutes * 60e3)) {
          const why =
            initBudgetMinutes === 0
              ? "no submission_division before init_stop, so the init budget is 0 min (log the submission records first)"
              : `init took ${(elapsedMs / 60e3).toFixed(1)} min, over the ${initBudgetMinutes} min budget`;
          errors.check(r, why, "ll.timestamp - s['first_init_start'] < (s['compile_time_mins']*60*1e3)");
        }
        initStopped = true;
        break;
      }
      case K.RUN_START:
        if (!initStopped) errors.check(r, "run_start before init_stop", "( s['init_stopped'] == True )");
        runStarted = true;
        break;
      case K.RUN_STOP:
        if (!runStarted) errors.check(r, "run_stop before run_start", "s['run_started']");
        if (!has(r, "status"))
          errors.check(r, 'metadata has no status ("success" or "aborted")', "'status' in v['metadata']");
        break;
      case K.BLOCK_START: {
        if (!runStarted) errors.check(r, "block_start before run_start", "s['run_started']");
        const epochCount = r.metadata.epoch_count;
        const samplesCount = r.metadata.samples_count;
        if (!has(r, "epoch_count") && !has(r, "samples_count")) {
          errors.check(
            r,
            "metadata has neither epoch_count nor samples_count",
            "('epoch_count' in v['metadata']) | ('samples_count' in v['metadata'])",
          );
        }
        if (has(r, "epoch_count") && !has(r, "first_epoch_num"))
          errors.check(r, "epoch_count without first_epoch_num", "'first_epoch_num' in v['metadata']");
        if (has(r, "epoch_count") && !(typeof epochCount === "number" && epochCount > 0))
          errors.check(r, `epoch_count ${show(epochCount)} is not > 0`, "v['metadata']['epoch_count'] > 0");
        if (has(r, "samples_count") && !(typeof samplesCount === "number" && samplesCount >= 0))
          errors.check(r, `samples_count ${show(samplesCount)} is not >= 0`, "v['metadata']['samples_count'] >= 0");
        break;
      }
      case K.BLOCK_STOP:
        if (!has(r, "first_epoch_num") && !has(r, "samples_count")) {
          errors.check(
            r,
            "metadata has neither first_epoch_num nor samples_count",
            "('first_epoch_num' in v['metadata']) | ('samples_count' in v['metadata'])",
          );
        }
        break;
      case K.EPOCH_START:
      case K.EPOCH_STOP:
        if (ruleset === "4.1.0" && !has(r, "epoch_num"))
          errors.check(r, "metadata has no epoch_num", "'epoch_num' in v['metadata']");
        if (ruleset === "5.0.0" && !has(r, "epoch_num") && !has(r, "samples_count")) {
          errors.check(
            r,
            "metadata has neither epoch_num nor samples_count",
            "('epoch_num' in v['metadata']) | ('samples_count' in v['metadata'])",
          );
        }
        break;
      case K.EVAL_START:
      case K.EVAL_STOP:
        if (!has(r, "epoch_num") && !has(r, "samples_count")) {
          errors.check(
            r,
            "metadata has neither epoch_num nor samples_count",
            "('epoch_num' in v['metadata']) | ('samples_count' in v['metadata'])",
          );
        }
        break;
      case K.EVAL_ACCURACY:
        if (!has(r, "epoch_num"))
          errors.check(
            r,
            "metadata has no epoch_num (BERT needs it; samples_count is not accepted)",
            "'epoch_num' in v['metadata']",
          );
        if (typeof r.value !== "number")
          errors.check(r, `value ${show(r.value)} is not a number`, "(v['value'] >= 0.720) and v['value'] < 1.0");
        break;
    }
  }
}

/** closed_bert's ATLEAST_ONE_CHECK (open: only value < 1.0). */
function checkTargetReached(records: LogRecord[], division: string, errors: IssueList): void {
  const accuracies = records
    .filter((r) => r.key === K.EVAL_ACCURACY && typeof r.value === "number")
    .map((r) => r.value as number);
  if (accuracies.length === 0) return; // the count check already reported it
  const closed = division !== "open";
  const passes = (v: number) => (closed ? v >= TARGET_ACCURACY : true) && v < 1.0;
  if (accuracies.some(passes)) return;
  const test = closed ? "(v['value'] >= 0.720) and v['value'] < 1.0" : "v['value'] < 1.0";
  const best = Math.max(...accuracies);
  const hint = best >= 1.0 ? " (accuracy must be a fraction, not a percent)" : "";
  errors.add(null, `Failed checks for eval_accuracy : ${test}; no record passes, best ${best}${hint}`, K.EVAL_ACCURACY);
}

/** The package checker's seed check (closed division). */
function checkSeeds(records: LogRecord[], errors: IssueList, warnings: IssueList): void {
  const seeds = records.filter((r) => r.key === K.SEED);
  if (seeds.length === 0)
    errors.add(
      null,
      "Result file logs no seed. (package checker, closed division: every run logs an MLLOG seed record)",
      K.SEED,
    );
  if (seeds.length > 1) warnings.add(seeds[1]!, `seed logged ${seeds.length} times (the seed checker only warns)`);
  for (const r of seeds) {
    if (!convertsToInt(r.value))
      errors.add(
        r,
        `record ${r.index} (line ${r.lineNumber}): seed value ${show(r.value)} does not convert with int()`,
      );
    if (!hasField(r.metadata, "file") || !hasField(r.metadata, "lineno")) {
      errors.add(
        r,
        `record ${r.index} (line ${r.lineNumber}): seed metadata lacks file and lineno (the seed checker keys on them)`,
      );
    }
  }
}

/** The RCP checker reads some keys by substring search; they must not appear in other records. */
function checkRcpSubstrings(records: LogRecord[], errors: IssueList): void {
  for (const r of records) {
    for (const key of RCP_SUBSTRING_KEYS) {
      if (r.key !== key && r.line.includes(key)) {
        errors.add(
          r,
          `record ${r.index} (line ${r.lineNumber}, key '${r.key}') contains the string '${key}', which the RCP checker's substring search would take for a '${key}' record`,
        );
      }
    }
  }
}

/** Written rules that no checker verifies (SPEC.md sections 3, 4.3, 4.4). */
function checkRules(records: LogRecord[], notes: IssueList): void {
  for (let i = 1; i < records.length; i++) {
    if (records[i]!.timeMs < records[i - 1]!.timeMs) {
      notes.add(records[i]!, `time_ms goes backwards at record ${records[i]!.index} (line ${records[i]!.lineNumber})`);
      break;
    }
  }
  const evalSamples = records.find((r) => r.key === K.EVAL_SAMPLES);
  if (evalSamples !== undefined && !(typeof evalSamples.value === "number" && evalSamples.value >= 10000)) {
    notes.add(
      evalSamples,
      `eval_samples is ${show(evalSamples.value)}; the rules evaluate on the whole 10,000-sample eval set`,
    );
  }
  const runStop = records.find((r) => r.key === K.RUN_STOP);
  const status = runStop?.metadata.status;
  if (runStop !== undefined && status !== undefined && status !== "success" && status !== "aborted") {
    notes.add(runStop, `run_stop status ${show(status)} is neither "success" nor "aborted"`);
  }
  const evals = records.filter((r) => r.key === K.EVAL_ACCURACY && typeof r.metadata.epoch_num === "number");
  if (runStop !== undefined && status === "success") {
    const before = evals.filter((r) => r.index < runStop.index);
    const last = before[before.length - 1];
    if (last === undefined || typeof last.value !== "number" || last.value < TARGET_ACCURACY) {
      notes.add(
        runStop,
        "run_stop says success but the last eval_accuracy before it is below 0.720 (the RCP checker takes samples-to-converge from it)",
      );
    }
    if (evals.some((r) => r.index > runStop.index))
      notes.add(runStop, "eval_accuracy records after run_stop: the run should stop at the first accuracy >= 0.720");
  }
  const batch = records.find((r) => r.key === K.GLOBAL_BATCH_SIZE);
  if (batch !== undefined && typeof batch.value === "number" && batch.value > 0) {
    const interval = bertEvalIntervalSamples(batch.value);
    let previous = 0;
    for (const r of evals) {
      const samples = r.metadata.epoch_num as number;
      if (samples - previous > interval + batch.value) {
        notes.add(
          r,
          `eval at ${samples} samples comes ${samples - previous} samples after the previous one; the rules evaluate every ${interval} samples at global batch size ${batch.value}`,
        );
        break;
      }
      previous = samples;
    }
  }
  const firstInitStart = records.findIndex((r) => r.key === K.INIT_START);
  const firstCacheClear = records.findIndex((r) => r.key === K.CACHE_CLEAR);
  if (firstInitStart >= 0 && firstCacheClear > firstInitStart)
    notes.add(records[firstCacheClear]!, "cache_clear comes after init_start; clear caches before the run begins");
}

/** Checks one log's text; `errors` empty means the official compliance and seed checks would pass. */
export function checkCompliance(text: string, options: ComplianceOptions = {}): ComplianceResult {
  const ruleset = options.ruleset ?? "5.0.0";
  const errors = new IssueList();
  const warnings = new IssueList();
  const notes = new IssueList();
  const parsed = parseMllog(text);
  for (const problem of parsed.problems) {
    errors.add(
      problem,
      `Found parsing errors: record ${problem.index} (line ${problem.lineNumber}): ${problem.message}. Log lines had parsing errors.`,
    );
  }
  const records = readRecords(parsed.records, errors);
  const divisionRecord = records.find((r) => r.key === K.SUBMISSION_DIVISION);
  const division = typeof divisionRecord?.value === "string" ? divisionRecord.value : null;
  const rulesDivision = division === "open" ? "open" : "closed"; // the stricter rules when unknown
  checkCounts(records, ruleset, rulesDivision, errors, warnings);
  checkRecords(records, ruleset, errors);
  checkTargetReached(records, rulesDivision, errors);
  if (rulesDivision === "closed") checkSeeds(records, errors, warnings);
  checkRcpSubstrings(records, errors);
  checkRules(records, notes);
  return { ruleset, division, errors: errors.issues, warnings: warnings.issues, notes: notes.issues };
}

const USAGE = `usage: npx tsx mlperf/bert/compliance.ts LOG [--ruleset ${RULESETS.join("|")}] [--werror]

Checks an MLPerf Training BERT log (":::MLLOG {json}" lines; other lines are ignored)
against the rules the official compliance checker and seed checker enforce
(see ../shared/mllog/SPEC.md). Exit status: 0 compliant, 1 not compliant, 2 usage error.

  --ruleset R   training ruleset to check against (default 5.0.0)
  --werror      treat the checker's warnings (a key logged twice with the same value) as errors`;

function formatIssue(kind: string, issue: ComplianceIssue): string {
  return `${kind}: ${issue.message}`;
}

function main(argv: string[]): number {
  let ruleset: Ruleset = "5.0.0";
  let werror = false;
  const logs: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--help" || arg === "-h") {
      console.log(USAGE);
      return 0;
    } else if (arg === "--ruleset") {
      const value = argv[++i];
      if (!RULESETS.includes(value as Ruleset)) {
        console.error(
          `compliance: --ruleset must be one of ${RULESETS.join(", ")} (got ${value ?? "nothing"}); BERT is not a benchmark of later rulesets`,
        );
        return 2;
      }
      ruleset = value as Ruleset;
    } else if (arg === "--werror") {
      werror = true;
    } else if (arg.startsWith("-")) {
      console.error(`compliance: unknown option ${arg}\n\n${USAGE}`);
      return 2;
    } else {
      logs.push(arg);
    }
  }
  if (logs.length !== 1) {
    console.error(`compliance: expected one LOG, got ${logs.length}\n\n${USAGE}`);
    return 2;
  }
  const log = logs[0]!;
  let text: string;
  try {
    text = readFileSync(log, "latin1");
  } catch (error) {
    console.error(`compliance: cannot read ${log}: ${(error as Error).message}`);
    return 2;
  }
  const result = checkCompliance(text, { ruleset });
  for (const issue of result.errors) console.log(formatIssue("ERROR", issue));
  for (const issue of result.warnings) console.log(formatIssue(werror ? "ERROR" : "WARNING", issue));
  for (const issue of result.notes) console.log(formatIssue("NOTE", issue));
  const failures = result.errors.length + (werror ? result.warnings.length : 0);
  const what = `${log} (ruleset ${ruleset}, ${result.division ?? "unknown"} division)`;
  if (failures > 0) {
    console.log(`FAIL: ${what}: ${failures} error${failures === 1 ? "" : "s"}`);
    return 1;
  }
  console.log(`PASS: ${what} is compliant`);
  return 0;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = main(process.argv.slice(2));
}
