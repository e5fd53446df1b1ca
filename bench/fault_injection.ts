// Fault injection (issue 35's acceptance): kills preprocessing, training and checkpoint writing at random points,
// flips bytes in shards and checkpoints, truncates files, and runs two trainers in one folder, on tiny data with the
// real commands; then judges each try against an undisturbed run:
//
//   resumed-identical  the rerun (or resume) ends with the same bytes as the undisturbed run
//   named-error        the command stopped with status 2 and one line naming the damaged file
//   data-lost          anything else: a state that differs, another run's file gone, a crash, an unnamed error
//   silent-success     status 0 on damaged input with a result that differs (counted apart: the worst case)
//
// Usage: npx tsx bench/fault_injection.ts [--tries 10] [--seed 1] [--parallel 2]   # prints a table; exit 1 unless all is well
// test/trainer/fault_injection.test.ts runs the quick form (one try a case).
import { spawn } from "node:child_process";
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { statSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { io } from "../src/index.ts";
import { demoEnvironment, prepareDemoData, type DemoData } from "../mlperf/bert/demo.ts";
import { trainInputPath, trainShardPath, vocabPath } from "../mlperf/bert/data/basedir.ts";
import { TINY, skewedCorpus } from "../test/trainer/tiny_data.ts";
import { benchArgs } from "./args.ts";

export type Outcome = "resumed-identical" | "named-error" | "data-lost" | "silent-success";
export const OUTCOMES: readonly Outcome[] = ["resumed-identical", "named-error", "data-lost", "silent-success"];

export interface CaseResult {
  name: string;
  tries: number;
  counts: Record<Outcome, number>;
  /** What each try that ended in data-lost or silent-success did and saw. */
  problems: string[];
}

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const TRAIN_STEPS = 6;
const SEEDS = [3, 4];

/** A small seeded generator (mulberry32): the same --seed, the same faults. */
function randomSource(seed: number): (n: number) => number {
  let state = seed >>> 0;
  return (n) => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * n);
  };
}

interface Finished {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

interface RunOptions {
  /** Sees stdout as it comes; may kill the child. */
  watch?: (stdout: string, kill: (signal: NodeJS.Signals) => void) => void;
  /** Kill the child this long after it starts. */
  killAfter?: { ms: number; signal: NodeJS.Signals };
  timeoutMs?: number;
}

/** Runs `args` under node with tsx's loader, in the repository root. */
function runNode(args: string[], env: Record<string, string>, options: RunOptions = {}): Promise<Finished> {
  const { watch, killAfter, timeoutMs = 120_000 } = options;
  const child = spawn(process.execPath, ["--import", "tsx", ...args], {
    cwd: ROOT,
    env: { ...process.env, DEBUG: "0", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  let killed = false;
  const kill = (signal: NodeJS.Signals) => {
    if (killed) return;
    killed = true;
    child.kill(signal);
  };
  const timers = [setTimeout(() => kill("SIGKILL"), timeoutMs)];
  if (killAfter) timers.push(setTimeout(() => kill(killAfter.signal), killAfter.ms));
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
    watch?.(stdout, kill);
  });
  child.stderr.on("data", (chunk: Buffer) => void (stderr += chunk.toString()));
  return new Promise((resolve) =>
    child.on("close", (status, signal) => {
      for (const timer of timers) clearTimeout(timer);
      resolve({ status, signal, stdout, stderr });
    }),
  );
}

/** Whether `run` stopped with status 2 and one line of `tool` naming `path` (and no stack). */
function namedError(run: Finished, tool: string, path: string): boolean {
  const lines = run.stderr.split("\n").filter((line) => line.startsWith(`${tool}: `));
  return run.status === 2 && lines.length === 1 && lines[0]!.includes(path) && !/^\s+at /m.test(run.stderr);
}

const sameBytes = (a: string, b: string): boolean =>
  existsSync(a) && existsSync(b) && readFileSync(a).equals(readFileSync(b));

const stepFile = (step: number) => `step_${String(step).padStart(7, "0")}.safe`;

/** Everything the cases share: the tiny data, the undisturbed runs, a scratch folder and the random source. */
interface Bench {
  dir: string;
  data: DemoData;
  random: (n: number) => number;
  /** The undisturbed run's checkpoint folder, by seed. */
  reference: Map<number, string>;
  /** The undisturbed preprocessing's BASEDIR and how long it took. */
  preprocessed: { basedir: string; ms: number };
  fresh: (name: string) => string;
}

function trainerEnv(bench: Bench, seed: number, folder: string, basedir = bench.data.basedir): Record<string, string> {
  return {
    ...demoEnvironment(bench.dir, { ...bench.data, basedir }, TINY, seed),
    DEVICE: "JS",
    BEAM: "0",
    RUNMLPERF: "1",
    LOGMLPERF: "0",
    TRAIN_STEPS: String(TRAIN_STEPS),
    EVAL_STEP_FREQ: "100000",
    EVAL_BS: "8",
    MAX_EVAL_STEPS: "1",
    EVAL_SET_SIZE: "8",
    TARGET: "1",
    CKPT: "1",
    SAVE_CKPT_FREQ: "2",
    KEEP_CKPT_AMOUNT: "2",
    SAVE_CKPT_DIR: folder,
  };
}

const train = (
  bench: Bench,
  seed: number,
  folder: string,
  extra: Record<string, string> = {},
  options: RunOptions = {},
) => runNode(["mlperf/bert/train.ts"], { ...trainerEnv(bench, seed, folder), ...extra }, options);

/** The newest step checkpoint in `folder` (by step), if any. */
function newestCheckpoint(folder: string): string | undefined {
  if (!existsSync(folder)) return undefined;
  const steps = readdirSync(folder)
    .map((name) => /^step_(\d+)(-[0-9a-f]+)?\.safe$/.exec(name))
    .filter((match) => match !== null)
    .sort((a, b) => Number(a[1]) - Number(b[1]));
  return steps.length > 0 ? join(folder, steps.at(-1)![0]) : undefined;
}

/** Resumes (or restarts) the run of `seed` in `folder` to the end; identical if its last checkpoint is the reference's. */
async function finishAndCompare(bench: Bench, seed: number, folder: string): Promise<[Outcome, string]> {
  const final = join(folder, stepFile(TRAIN_STEPS));
  const resume = existsSync(final) ? undefined : newestCheckpoint(folder);
  if (!existsSync(final)) {
    const run = await train(bench, seed, folder, resume ? { RESUME: resume } : {});
    if (run.status !== 0) return ["data-lost", `resume from ${resume ?? "scratch"} failed: ${run.stderr.trim()}`];
  }
  const leftovers = readdirSync(folder).filter((name) => name.endsWith(".tmp"));
  if (leftovers.length > 0) return ["data-lost", `temp files left: ${leftovers.join(", ")}`];
  if (sameBytes(final, join(bench.reference.get(seed)!, stepFile(TRAIN_STEPS)))) return ["resumed-identical", ""];
  return ["data-lost", `${final} differs from the undisturbed run's (resumed from ${resume ?? "scratch"})`];
}

type Case = (bench: Bench, attempt: number) => Promise<[Outcome, string]>;

const SIGNALS: NodeJS.Signals[] = ["SIGKILL", "SIGKILL", "SIGTERM", "SIGINT"];

/** Kills the trainer after a random step (and a random few ms more), then resumes it from its newest checkpoint. */
const killTraining: Case = async (bench, attempt) => {
  const folder = bench.fresh(`kill-train-${attempt}`);
  const afterStep = 1 + bench.random(TRAIN_STEPS - 1);
  const delayMs = bench.random(200);
  const signal = SIGNALS[bench.random(SIGNALS.length)]!;
  await train(
    bench,
    SEEDS[0]!,
    folder,
    {},
    {
      watch: (stdout, kill) => {
        if (new RegExp(`^step ${afterStep} `, "m").test(stdout)) setTimeout(() => kill(signal), delayMs);
      },
    },
  );
  const [outcome, why] = await finishAndCompare(bench, SEEDS[0]!, folder);
  return [outcome, `${signal} after step ${afterStep} + ${delayMs} ms: ${why}`];
};

/**
 * What a kill while a checkpoint is written leaves: the undisturbed run's step 2 and 4 checkpoints, and a process
 * killed (SIGKILL) after writing a random number of step 6's bytes through the atomic writer; then the run resumes
 * from the newest checkpoint there.
 */
const killCheckpointWrite: Case = async (bench, attempt) => {
  const folder = bench.fresh(`kill-write-${attempt}`);
  const reference = bench.reference.get(SEEDS[0]!)!;
  for (const step of [2, 4]) copyFileSync(join(reference, stepFile(step)), join(folder, stepFile(step)));
  const source = join(reference, stepFile(TRAIN_STEPS));
  const cut = bench.random(statSync(source).size);
  const writer = await runNode([fileURLToPath(import.meta.url), "--write-and-die", source, folder, String(cut)], {});
  if (writer.signal !== "SIGKILL") return ["data-lost", `the writer was not killed: ${writer.stderr}`];
  const [outcome, why] = await finishAndCompare(bench, SEEDS[0]!, folder);
  return [outcome, `killed after ${cut} bytes: ${why}`];
};

/** A copy of the data with one shard (train or eval, at random) damaged by `damage`; the trainer must name it. */
function shardCase(what: string, damage: (path: string, random: (n: number) => number) => string): Case {
  return async (bench, attempt) => {
    const basedir = join(bench.dir, `${what}-data-${attempt}`);
    cpSync(bench.data.basedir, basedir, { recursive: true });
    const shards = [
      ...readdirSync(join(basedir, "train")).map((name) => join(basedir, "train", name)),
      join(basedir, "eval", "eval.safetensors"),
    ];
    const path = shards[bench.random(shards.length)]!;
    const how = damage(path, bench.random);
    const folder = bench.fresh(`${what}-${attempt}`);
    const run = await runNode(["mlperf/bert/train.ts"], trainerEnv(bench, SEEDS[0]!, folder, basedir));
    if (namedError(run, "train", path)) return ["named-error", ""];
    if (run.status === 0) {
      const same = sameBytes(
        join(folder, stepFile(TRAIN_STEPS)),
        join(bench.reference.get(SEEDS[0]!)!, stepFile(TRAIN_STEPS)),
      );
      return [same ? "resumed-identical" : "silent-success", `${how} in ${path}: trained without a word`];
    }
    return ["data-lost", `${how} in ${path}: status ${run.status}: ${run.stderr.trim()}`];
  };
}

/** A copy of the undisturbed run's step 4 checkpoint damaged by `damage`; RESUME from it must name it. */
function checkpointCase(what: string, damage: (path: string, random: (n: number) => number) => string): Case {
  return async (bench, attempt) => {
    const folder = bench.fresh(`${what}-${attempt}`);
    const path = join(folder, stepFile(4));
    copyFileSync(join(bench.reference.get(SEEDS[0]!)!, stepFile(4)), path);
    const how = damage(path, bench.random);
    const run = await train(bench, SEEDS[0]!, bench.fresh(`${what}-out-${attempt}`), { RESUME: path });
    if (namedError(run, "train", path)) return ["named-error", ""];
    if (run.status === 0) return ["silent-success", `${how}: resumed without a word`];
    return ["data-lost", `${how}: status ${run.status}: ${run.stderr.trim()}`];
  };
}

function flipByte(path: string, random: (n: number) => number): string {
  const bytes = readFileSync(path);
  const offset = random(bytes.length);
  const bit = 1 << random(8);
  bytes[offset]! ^= bit;
  writeFileSync(path, bytes);
  return `bit ${Math.log2(bit)} of byte ${offset} flipped`;
}

function truncate(path: string, random: (n: number) => number): string {
  const length = random(statSync(path).size);
  truncateSync(path, length);
  return `cut to ${length} bytes`;
}

/** Two trainers of different seeds at once in one folder: each must end with its own run's bytes, none lost. */
const twoTrainers: Case = async (bench, attempt) => {
  const folder = bench.fresh(`two-${attempt}`);
  const runs = await Promise.all(SEEDS.map((seed) => train(bench, seed, folder)));
  const failed = runs.find((run) => run.status !== 0);
  if (failed) return ["data-lost", `a trainer failed: ${failed.stderr.trim()}`];
  const files = readdirSync(folder).map((name) => join(folder, name));
  for (const seed of SEEDS) {
    const reference = bench.reference.get(seed)!;
    // the run's newest two checkpoints, wherever they went, byte for byte
    for (const step of [TRAIN_STEPS - 2, TRAIN_STEPS]) {
      const expected = join(reference, stepFile(step));
      if (!files.some((file) => sameBytes(file, expected)))
        return ["data-lost", `seed ${seed}'s step ${step} checkpoint is missing or differs: ${files.join(", ")}`];
    }
  }
  if (files.length !== 2 * SEEDS.length) return ["data-lost", `expected 4 checkpoints: ${files.join(", ")}`];
  return ["resumed-identical", ""];
};

/** Kills preprocessing at a random time (any signal), then runs it again: the shard must be the undisturbed one. */
const killPreprocessing: Case = async (bench, attempt) => {
  const basedir = join(bench.dir, `preprocess-${attempt}`);
  mkdirSync(join(basedir, "results4"), { recursive: true });
  copyFileSync(vocabPath(bench.preprocessed.basedir), vocabPath(basedir));
  copyFileSync(trainInputPath(bench.preprocessed.basedir, 0), trainInputPath(basedir, 0));
  const delayMs = bench.random(Math.ceil(bench.preprocessed.ms * 1.1));
  const signal = SIGNALS[bench.random(SIGNALS.length)]!;
  const command = ["mlperf/bert/data/preprocess.ts", "pre-train", "0"];
  const env = preprocessEnv(basedir);
  await runNode(command, env, { killAfter: { ms: delayMs, signal } });
  const rerun = await runNode(command, env);
  const how = `${signal} after ${delayMs} ms`;
  if (rerun.status !== 0) return ["data-lost", `${how}: the rerun failed: ${rerun.stderr.trim()}`];
  const leftovers = readdirSync(join(basedir, "train")).filter((name) => name.endsWith(".tmp"));
  if (leftovers.length > 0) return ["data-lost", `${how}: temp files left: ${leftovers.join(", ")}`];
  if (sameBytes(trainShardPath(basedir, 0), trainShardPath(bench.preprocessed.basedir, 0)))
    return ["resumed-identical", ""];
  return ["data-lost", `${how}: the shard differs from the undisturbed one`];
};

function preprocessEnv(basedir: string): Record<string, string> {
  const { maxSeqLength, maxPredictionsPerSeq, dupeFactor } = TINY.preprocess;
  return {
    BASEDIR: basedir,
    NUM_WORKERS: "1",
    MAX_SEQ_LENGTH: String(maxSeqLength),
    MAX_PREDICTIONS_PER_SEQ: String(maxPredictionsPerSeq),
    DUPE_FACTOR: String(dupeFactor),
  };
}

export const CASES: Record<string, Case> = {
  "kill preprocessing": killPreprocessing,
  "kill training": killTraining,
  "kill checkpoint writing": killCheckpointWrite,
  "flip a byte in a shard": shardCase("flip-shard", flipByte),
  "truncate a shard": shardCase("cut-shard", truncate),
  "flip a byte in a checkpoint": checkpointCase("flip-ckpt", flipByte),
  "truncate a checkpoint": checkpointCase("cut-ckpt", truncate),
  "two trainers, one folder": twoTrainers,
};

/** The tiny data, the undisturbed runs of both seeds and an undisturbed preprocessing, in a scratch folder. */
async function prepare(seed: number, dir: string): Promise<Bench> {
  const data = prepareDemoData(join(dir, "data"), TINY, skewedCorpus(40));
  let folders = 0;
  const bench: Bench = {
    dir,
    data,
    random: randomSource(seed),
    reference: new Map(),
    preprocessed: { basedir: join(dir, "preprocessed"), ms: 0 },
    fresh: (name) => {
      const folder = join(dir, `${name}-${folders++}`);
      mkdirSync(folder, { recursive: true });
      return folder;
    },
  };
  const { basedir } = bench.preprocessed;
  mkdirSync(join(basedir, "results4"), { recursive: true });
  const corpus = skewedCorpus(6000);
  writeFileSync(vocabPath(basedir), corpus.vocabText);
  writeFileSync(trainInputPath(basedir, 0), corpus.trainText);
  const start = performance.now();
  const references = SEEDS.map(async (seed) => {
    const folder = bench.fresh(`reference-${seed}`);
    const run = await train(bench, seed, folder, { KEEP_CKPT_AMOUNT: "100" });
    if (run.status !== 0) throw new Error(`the undisturbed run of seed ${seed} failed: ${run.stderr}`);
    bench.reference.set(seed, folder);
  });
  const preprocessing = runNode(["mlperf/bert/data/preprocess.ts", "pre-train", "0"], preprocessEnv(basedir)).then(
    (run) => {
      if (run.status !== 0) throw new Error(`the undisturbed preprocessing failed: ${run.stderr}`);
      bench.preprocessed.ms = performance.now() - start;
    },
  );
  await Promise.all([...references, preprocessing]);
  return bench;
}

export interface FaultInjectionOptions {
  /** Tries of each case. */
  tries: number;
  /** Seeds the faults (which byte, which step, which signal). */
  seed: number;
  /** Cases run at once (each runs one or two processes). */
  parallel?: number;
  /** Only these cases (all by default). */
  cases?: string[];
  /** Called as each case finishes. */
  onCase?: (result: CaseResult) => void;
}

/** Runs every case `tries` times in a scratch folder (removed after) and counts the outcomes. */
export async function runFaultInjection(options: FaultInjectionOptions): Promise<CaseResult[]> {
  const { tries, seed, parallel = 2, cases = Object.keys(CASES), onCase } = options;
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-faults-"));
  try {
    const bench = await prepare(seed, dir);
    const results = cases.map((name) => ({
      name,
      tries,
      counts: Object.fromEntries(OUTCOMES.map((outcome) => [outcome, 0])) as Record<Outcome, number>,
      problems: [] as string[],
    }));
    const work = results.flatMap((result) => Array.from({ length: tries }, (_, attempt) => ({ result, attempt })));
    const left = new Map(results.map((result) => [result, tries]));
    const worker = async () => {
      for (let item = work.shift(); item !== undefined; item = work.shift()) {
        const { result, attempt } = item;
        const [outcome, why] = await CASES[result.name]!(bench, attempt);
        result.counts[outcome]++;
        if (outcome === "data-lost" || outcome === "silent-success") result.problems.push(`${outcome}: ${why}`);
        left.set(result, left.get(result)! - 1);
        if (left.get(result) === 0) onCase?.(result);
      }
    };
    await Promise.all(Array.from({ length: parallel }, worker));
    return results;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The results as a table: case, tries, one column per outcome. */
export function formatTable(results: CaseResult[]): string {
  const header = ["case", "tries", ...OUTCOMES];
  const rows = results.map((r) => [r.name, String(r.tries), ...OUTCOMES.map((o) => String(r.counts[o]))]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(" | ")} |`;
  return [
    line(header),
    `|${widths.map((w, i) => (i === 0 ? "-".repeat(w + 2) : `${"-".repeat(w + 1)}:`)).join("|")}|`,
    ...rows.map(line),
  ].join("\n");
}

/**
 * `--write-and-die SOURCE FOLDER BYTES`: writes SOURCE's bytes into FOLDER under its name through the atomic writer,
 * and kills itself after BYTES of them: what a kill while a checkpoint is written leaves behind.
 */
function writeAndDie(source: string, folder: string, bytes: number): void {
  const data = readFileSync(source);
  io.writeFileAtomicFrom(join(folder, source.split("/").at(-1)!), (write) => {
    write(data.subarray(0, bytes));
    process.kill(process.pid, "SIGKILL");
    write(data.subarray(bytes));
  });
}

async function main(argv: string[]): Promise<number> {
  if (argv[0] === "--write-and-die") {
    writeAndDie(argv[1]!, argv[2]!, Number(argv[3]));
    return 1;
  }
  const { values } = benchArgs(import.meta.url, {
    tries: { type: "string", default: "10" },
    seed: { type: "string", default: "1" },
    parallel: { type: "string", default: "2" },
  });
  const started = performance.now();
  const results = await runFaultInjection({
    tries: Number(values.tries),
    seed: Number(values.seed),
    parallel: Number(values.parallel),
    onCase: (result) => process.stderr.write(`${result.name}: ${JSON.stringify(result.counts)}\n`),
  });
  console.log(formatTable(results));
  console.log(`(seed ${values.seed}, ${((performance.now() - started) / 1000).toFixed(0)} s)`);
  for (const result of results) for (const problem of result.problems) console.log(`${result.name}: ${problem}`);
  return results.some((r) => r.counts["data-lost"] + r.counts["silent-success"] > 0) ? 1 : 0;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href)
  process.exitCode = await main(process.argv.slice(2));
