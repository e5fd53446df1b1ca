// Errors mid-run (issue 35, item 4): a read that fails in the middle of training ends the run with a checkpoint of
// the last completed step and one line naming the cause (a stack only with DEBUG=1); exit statuses mean something
// in every command: 0 done, 1 internal error, 2 bad input or usage, 128 + the signal when interrupted.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { demoEnvironment, prepareDemoData } from "../../mlperf/bert/demo.ts";
import { io } from "../../src/index.ts";
import { exitStatusOf, reportFailure, StoppedError, UsageError } from "../../mlperf/bert/exit_status.ts";
import { TINY, skewedCorpus } from "./tiny_data.ts";

const root = join(import.meta.dirname, "..", "..");
const dir = mkdtempSync(join(tmpdir(), "tsgrad-mid-run-"));
test.after(() => rmSync(dir, { recursive: true, force: true }));
const data = prepareDemoData(join(dir, "data"), TINY, skewedCorpus(40));

interface Finished {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** The real trainer on a copy of the data; `onStep` sees each step line as it comes. */
function trainer(basedir: string, env: Record<string, string>, onStep: (step: number) => void): Promise<Finished> {
  const child = spawn(process.execPath, ["--import", "tsx", "mlperf/bert/train.ts"], {
    cwd: root,
    env: {
      ...process.env,
      ...demoEnvironment(dir, { ...data, basedir }, TINY, 3),
      DEVICE: "JS",
      BEAM: "0",
      RUNMLPERF: "1",
      LOGMLPERF: "0",
      TRAIN_STEPS: "100000",
      EVAL_STEP_FREQ: "100000",
      CKPT: "0",
      DEBUG: "0",
      ...env,
    },
    stdio: "pipe",
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    const before = stdout.length;
    stdout += chunk.toString();
    for (const match of stdout.slice(before).matchAll(/^step (\d+) /gm)) onStep(Number(match[1]));
  });
  child.stderr.on("data", (chunk: Buffer) => void (stderr += chunk.toString()));
  return new Promise((resolve) => child.on("close", (status) => resolve({ status, stdout, stderr })));
}

/** The train shards of `basedir`, cut short to their header and a few bytes: every later read of them fails. */
function truncateTrainShards(basedir: string): void {
  const folder = join(basedir, "train");
  for (const name of readdirSync(folder)) {
    const path = join(folder, name);
    const dataStart = Object.values(io.readSafetensorsHeader(path).entries)[0]!.byteOffset;
    truncateSync(path, Math.min(statSync(path).size, dataStart + 16));
  }
}

test("shards cut short mid-run: a checkpoint of the last step, one line naming file and cause, exit 2", {
  timeout: 120_000,
}, async () => {
  const basedir = join(dir, "truncated");
  cpSync(data.basedir, basedir, { recursive: true });
  const folder = join(dir, "ckpts-truncated");
  let cut = false;
  const run = await trainer(basedir, { SAVE_CKPT_DIR: folder }, (step) => {
    if (step >= 3 && !cut) {
      cut = true;
      truncateTrainShards(basedir);
    }
  });
  assert.equal(run.status, 2, run.stderr);
  const failure = run.stderr.split("\n").filter((line) => line.startsWith("train: "));
  assert.equal(failure.length, 1, run.stderr);
  const match =
    /^train: stopped after step (\d+): .*part-0000\d-of-00500\.safetensors.*; the step is saved: RESUME=(\S+) continues/.exec(
      failure[0]!,
    );
  assert.ok(match, failure[0]);
  assert.doesNotMatch(run.stderr, /^\s+at /m, "no stack without DEBUG");
  const lastPrinted = Math.max(...[...run.stdout.matchAll(/^step (\d+) /gm)].map((m) => Number(m[1])));
  assert.equal(Number(match[1]), lastPrinted, "the checkpoint is of the last step trained");
  assert.ok(existsSync(match[2]!), match[2]);
  assert.equal(io.readSafetensorsFile(match[2]!).metadata.step, String(lastPrinted), "a whole, verified checkpoint");
});

test("a failure's stack is printed only with DEBUG=1, and internal errors say how to see it", () => {
  const said: string[] = [];
  const error = console.error;
  console.error = (line: string) => said.push(String(line));
  try {
    process.env.DEBUG = "0";
    assert.equal(reportFailure("tool", new TypeError("x is undefined"), []), 1);
    assert.deepEqual(said, ["tool: internal error: x is undefined (DEBUG=1 prints the stack)"]);
    said.length = 0;
    process.env.DEBUG = "1";
    assert.equal(reportFailure("tool", new UsageError("unknown option --x"), []), 2);
    assert.equal(said[0], "tool: unknown option --x");
    assert.match(said[1]!, /^UsageError: unknown option --x\n\s+at /);
  } finally {
    console.error = error;
    delete process.env.DEBUG;
  }
  const readFailure = Object.assign(new Error("EIO: i/o error, read"), { code: "EIO", syscall: "read" });
  assert.equal(exitStatusOf(readFailure, []), 2, "a failing read is the input's fault, not the program's");
  assert.equal(exitStatusOf(new StoppedError("stopped", { cause: readFailure }), []), 2);
  assert.equal(exitStatusOf(new StoppedError("stopped", { cause: new RangeError("bug") }), []), 1);
});

const tsx = join(root, "node_modules", ".bin", "tsx");
const cli = (script: string, args: string[]) =>
  spawnSync(tsx, [join(root, "mlperf", "bert", script), ...args], { encoding: "utf8", timeout: 60_000 });

test("download, preprocess and report exit 2 on usage errors and missing input, with one line", () => {
  for (const [script, args, said] of [
    ["data/download.ts", ["--bogus"], /^download: unknown argument "--bogus"/m],
    ["data/preprocess.ts", ["pre-train", "--bogus", "1"], /^preprocess: unknown option --bogus/m],
    ["data/preprocess.ts", ["pre-eval", "--basedir", join(dir, "nowhere")], /^preprocess: .*nowhere/m],
    ["report.ts", [join(dir, "no-such.log")], /^report: cannot read .*no-such\.log/m],
  ] as const) {
    const run = cli(script, [...args]);
    assert.equal(run.status, 2, `${script} ${args.join(" ")}: ${run.stderr}`);
    assert.match(run.stderr, said);
    assert.doesNotMatch(run.stderr, /^\s+at /m, "no stack");
  }
});
