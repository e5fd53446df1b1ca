// Real signals to the real command (issue 35, item 1): Ctrl-C (SIGINT to the whole process group, as a
// terminal sends it) or a scheduler's SIGTERM stops training within one step, with a checkpoint, and the
// command exits 128 + the signal; the same signal again, a second later, quits at once.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { demoEnvironment, prepareDemoData } from "../../mlperf/bert/demo.ts";
import { REPEAT_WINDOW_MS, StopSignals } from "../../mlperf/bert/stop_signals.ts";
import { TINY, skewedCorpus } from "./tiny_data.ts";

const root = join(import.meta.dirname, "..", "..");
const dir = mkdtempSync(join(tmpdir(), "tsgrad-signals-"));
test.after(() => rmSync(dir, { recursive: true, force: true }));
const data = prepareDemoData(join(dir, "data"), TINY, skewedCorpus(40));

interface Stopped {
  status: number | null;
  signal: NodeJS.Signals | null;
  /** The last step printed before the (first) signal was sent. */
  sentAfter: number;
  output: string;
}

/**
 * Starts the trainer in its own process group; after step 3 sends `signals[0]` to the group, and each further
 * signal once the trainer has said it saw the one before.
 */
function signalled(command: string[], signals: NodeJS.Signals[], folder: string): Promise<Stopped> {
  const env = {
    ...process.env,
    ...demoEnvironment(dir, data, TINY, 3),
    DEVICE: "JS",
    BEAM: "0",
    RUNMLPERF: "1",
    LOGMLPERF: "0",
    TRAIN_STEPS: "100000",
    EVAL_STEP_FREQ: "100000",
    CKPT: "0",
    SAVE_CKPT_DIR: folder,
  };
  const child = spawn(command[0]!, command.slice(1), { cwd: root, env, detached: true, stdio: "pipe" });
  let output = "";
  let sentAfter = 0;
  child.stdout.on("data", (chunk: Buffer) => {
    output += chunk.toString();
    const steps = [...output.matchAll(/^step (\d+) /gm)].map((m) => Number(m[1]));
    if (sentAfter === 0 && steps.length > 0 && steps.at(-1)! >= 3) {
      sentAfter = steps.at(-1)!;
      process.kill(-child.pid!, signals[0]!);
    }
  });
  let acknowledged = 0;
  child.stderr.on("data", (chunk: Buffer) => {
    output += chunk.toString();
    const seen = output.split("saving a checkpoint after this step").length - 1;
    for (; acknowledged < seen && acknowledged + 1 < signals.length; acknowledged++)
      process.kill(-child.pid!, signals[acknowledged + 1]!);
  });
  return new Promise((resolve) =>
    child.on("close", (status, signal) => resolve({ status, signal, sentAfter, output })),
  );
}

const node = [process.execPath, "--import", "tsx", "mlperf/bert/train.ts"];

/** The step the run stopped at and the checkpoint it names, checked to exist. */
function checkpointOf(run: Stopped): number {
  const match = /interrupted at step (\d+); continue with RESUME=(\S+)/.exec(run.output);
  assert.ok(match, `no interrupt message:\n${run.output}`);
  assert.ok(existsSync(match[2]!), `the checkpoint ${match[2]}`);
  return Number(match[1]);
}

test("Ctrl-C to plain node: the step finishes, a checkpoint is written, exit 130", { timeout: 120_000 }, async () => {
  const run = await signalled(node, ["SIGINT"], join(dir, "int"));
  assert.equal(run.status, 130, run.output);
  const step = checkpointOf(run);
  assert.ok(step <= run.sentAfter + 1, `signalled after step ${run.sentAfter}, stopped at ${step}`);
});

test("SIGTERM to plain node: a checkpoint, exit 143", { timeout: 120_000 }, async () => {
  const run = await signalled(node, ["SIGTERM"], join(dir, "term"));
  assert.equal(run.status, 143, run.output);
  const step = checkpointOf(run);
  assert.ok(step <= run.sentAfter + 1, `signalled after step ${run.sentAfter}, stopped at ${step}`);
});

test("under npx tsx, whose relay kills a busy child on Ctrl-C, the trainer says how to run it instead", {
  timeout: 60_000,
}, () => {
  const run = spawnSync("npx", ["tsx", "mlperf/bert/train.ts", "--help"], { cwd: root, encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  assert.match(
    run.stderr,
    /under `npx tsx`, Ctrl-C kills the trainer mid-step .* `node --import tsx mlperf\/bert\/train\.ts`/,
  );
  const plain = spawnSync(process.execPath, ["--import", "tsx", "mlperf/bert/train.ts", "--help"], {
    cwd: root,
    encoding: "utf8",
  });
  assert.doesNotMatch(plain.stderr, /npx tsx/);
});

test("copies of one Ctrl-C arriving together are one request: the checkpoint is still written", {
  timeout: 120_000,
}, async () => {
  // what a wrapper's relay looks like: the group's SIGINT and the wrapper's copy, back to back
  const run = await signalled(node, ["SIGINT", "SIGINT"], join(dir, "twice"));
  assert.equal(run.status, 130, run.output);
  checkpointOf(run);
});

test("a stop signal again a second later quits at once, without a checkpoint", () => {
  let clock = 0;
  const exits: number[] = [];
  const said: string[] = [];
  const stop = new StopSignals({
    exit: (code) => exits.push(code),
    now: () => clock,
    say: (l) => said.push(l),
  }).install();
  try {
    process.emit("SIGTERM");
    assert.equal(stop.signal, 15);
    clock = REPEAT_WINDOW_MS - 1;
    process.emit("SIGTERM"); // a relayed copy
    assert.deepEqual(exits, []);
    clock = REPEAT_WINDOW_MS + 1;
    process.emit("SIGINT"); // the user insists
    assert.deepEqual(exits, [130]);
    assert.match(said.join("\n"), /SIGTERM: saving a checkpoint after this step[\s\S]*SIGINT again: quitting/);
  } finally {
    stop.uninstall();
  }
});
