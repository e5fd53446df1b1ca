// End to end, CI-sized: run_and_time/cpu.sh runs the init phase and the run phase of a tiny BERT
// on the JS device over shards made by the real pipeline, and its MLPerf log passes the rules.
// The corpus is mostly one word (tiny_data.ts): this checks the plumbing, not learning.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { demoEnvironment, prepareDemoData } from "../../mlperf/bert/demo.ts";
import { TINY, skewedCorpus } from "./tiny_data.ts";
import { checkCompliance } from "../../mlperf/bert/compliance.ts";
import { parseMllog } from "../../mlperf/bert/mllog.ts";
import { parseEvalLine, parseStepLine } from "../../mlperf/bert/report.ts";

const CPU_SCRIPT = fileURLToPath(new URL("../../mlperf/bert/run_and_time/cpu.sh", import.meta.url));

test("run_and_time/cpu.sh runs both phases and writes a compliant MLPerf log, the console log, the final model and the report", () => {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-run-and-time-"));
  try {
    const data = prepareDemoData(join(dir, "data"), TINY, skewedCorpus(60));
    const env = {
      ...process.env,
      ...demoEnvironment(dir, data, TINY, 4242),
      DEVICE: "JS",
      BEAM: "0",
      INIT_BENCHMARK: "3",
    };
    const run = spawnSync("bash", [CPU_SCRIPT], { cwd: dir, env, encoding: "utf8", timeout: 240_000 });
    assert.equal(run.status, 0, `cpu.sh failed:\n${run.stdout.slice(-3000)}\n${run.stderr.slice(-3000)}`);

    const consoleLogs = readdirSync(dir).filter((f) => /^bert_cpu_\d{8}_4242\.log$/.test(f));
    assert.equal(consoleLogs.length, 1, `console log missing: ${readdirSync(dir).join(", ")}`);
    const consoleText = readFileSync(join(dir, consoleLogs[0]!), "utf8");
    const lines = consoleText.split("\n");
    assert.ok(lines.includes('HParam: "BS": 8'));
    assert.ok(lines.filter((l) => parseStepLine(l) !== null).length >= 3 + 4, "step lines of both phases");
    assert.ok(lines.some((l) => parseEvalLine(l) !== null));
    assert.ok(lines.some((l) => l.startsWith("Reference Convergence point reached after")));
    // the estimate comes from the replayed step: the first two steps compile and capture the jitted step
    const estimate = lines.find((l) => l.startsWith("Estimated training time:"));
    assert.match(estimate ?? "", /\(median of 1 replayed step [\d.]+ ms x \d+ steps\)$/, estimate);
    const initSteps = lines
      .filter((l) => parseStepLine(l) !== null)
      .slice(0, 3)
      .map((l) => parseStepLine(l)!.totalMs);
    assert.equal(
      Number(/step ([\d.]+) ms/.exec(estimate!)![1]),
      Number(initSteps[2]!.toFixed(1)),
      "the third (replayed) step's time",
    );
    // the JS device runs its kernels inside the step call: their time is the device's, not host overhead
    const replayed = lines.map((l) => parseStepLine(l)).filter((s) => s !== null && s.step >= 3);
    assert.ok(replayed.length >= 2);
    for (const s of replayed)
      assert.ok(s!.deviceMs > s!.hostMs, `step ${s!.step}: device ${s!.deviceMs} ms, host ${s!.hostMs} ms`);

    const mlperfText = readFileSync(join(dir, "result_bert_4242.log"), "latin1");
    const result = checkCompliance(mlperfText);
    assert.deepEqual(result.errors, [], "the official rules' errors");
    assert.deepEqual(checkCompliance(mlperfText, { ruleset: "4.1.0" }).errors, []);
    const keys = parseMllog(mlperfText).records.map((r) => r.fields.key);
    assert.ok(keys.indexOf("cache_clear") < keys.indexOf("init_start"));
    assert.ok(keys.indexOf("init_stop") < keys.indexOf("run_start"));
    assert.equal(keys.at(-1), "run_stop");
    const runStop = parseMllog(mlperfText).records.at(-1)!.fields.metadata as { status: string };
    assert.equal(runStop.status, "success");
    assert.ok(existsSync(join(dir, "ckpts", "bert_final.safe")), "the final model");
    assert.match(readFileSync(join(dir, consoleLogs[0]!.replace(/\.log$/, ".html")), "utf8"), /<svg/, "the run report");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** cpu.sh on the tiny data with `env` over the demo's knobs; its console lines and MLPerf log, checked to exit 0. */
function runCpuScript(seed: number, env: Record<string, string>): { lines: string[]; mlperfText: string } {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-run-and-time-"));
  try {
    const data = prepareDemoData(join(dir, "data"), TINY, skewedCorpus(60));
    const full = { ...process.env, ...demoEnvironment(dir, data, TINY, seed), BEAM: "0", INIT_BENCHMARK: "3", ...env };
    const run = spawnSync("bash", [CPU_SCRIPT], { cwd: dir, env: full, encoding: "utf8", timeout: 240_000 });
    const what = Object.entries(env)
      .map(([k, v]) => `${k}=${v}`)
      .join(" ");
    assert.equal(run.status, 0, `cpu.sh with ${what} failed:\n${run.stdout.slice(-3000)}\n${run.stderr.slice(-3000)}`);
    const consoleLog = readdirSync(dir).find((f) => new RegExp(`^bert_cpu_\\d{8}_${seed}\\.log$`).test(f))!;
    assert.ok(existsSync(join(dir, "ckpts", "bert_final.safe")), "the final model");
    return {
      lines: readFileSync(join(dir, consoleLog), "utf8").split("\n"),
      mlperfText: readFileSync(join(dir, `result_bert_${seed}.log`), "latin1"),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The log passes the rules and its run ended in success. */
function assertConverged(mlperfText: string): void {
  assert.deepEqual(checkCompliance(mlperfText).errors, []);
  assert.equal((parseMllog(mlperfText).records.at(-1)!.fields.metadata as { status: string }).status, "success");
}

test("with GPUS=2 both phases run data-parallel on two devices and the run converges with a compliant log", () => {
  const { lines, mlperfText } = runCpuScript(4243, { DEVICE: "JS", GPUS: "2" });
  assert.ok(lines.includes('HParam: "GPUS": 2'));
  const losses = lines
    .map((l) => parseStepLine(l))
    .filter((s) => s !== null)
    .map((s) => s!.loss);
  assert.ok(losses.length >= 3 && losses.every(Number.isFinite), `losses ${losses.join(", ")}`);
  assertConverged(mlperfText);
});

test("with RANKS=2 both phases run under mpirun, rank 0 alone logs, and the run converges with a compliant log", () => {
  // two ranks on a two-core machine
  const { lines, mlperfText } = runCpuScript(4244, { DEVICE: "JS", RANKS: "2", MPIRUN_FLAGS: "--oversubscribe" });
  assert.ok(lines.some((l) => l.startsWith("training on 2 ranks (mpi, launched by openmpi)")));
  // one rank's lines: each step once
  const steps = lines.map((l) => parseStepLine(l)).filter((s) => s !== null);
  const runSteps = steps.slice(3).map((s) => s!.step);
  assert.deepEqual(runSteps, [...new Set(runSteps)], "a step printed twice");
  assert.ok(steps.every((s) => Number.isFinite(s!.loss) && s!.reduceMs !== undefined));
  assertConverged(mlperfText);
});

test("with PACKING=3 on RANKS=2 x GPUS=2 both phases train packed rows and converge with a compliant log", () => {
  const run = { DEVICE: "JS", GPUS: "2", RANKS: "2", MPIRUN_FLAGS: "--oversubscribe", PACKING: "3" };
  const { lines, mlperfText } = runCpuScript(4245, run);
  assert.ok(lines.some((l) => l.startsWith("training on 2 ranks (mpi, launched by openmpi) x JS, JS:1")));
  assert.ok(lines.includes('HParam: "PACKED_BS": 4'), "BS/2 rows by default: 2 a rank, 1 a device");
  assert.ok(lines.some((l) => l.startsWith("packing: ") && l.includes("a row of 4 rows")));
  assertConverged(mlperfText);
  const records = parseMllog(mlperfText).records.map((r) => r.fields);
  const value = (key: string) => records.find((r) => r.key === key)?.value;
  assert.equal(value("packing_max_samples_per_row"), 3);
  assert.equal(value("packing_rows_per_step"), 4);
  assert.equal(value("global_batch_size"), 8, "BS, the nominal samples a step");
  // epoch_num counts the samples trained on, which the step lines count too
  const steps = lines.map((l) => parseStepLine(l)).filter((s) => s !== null);
  const lastEval = records.filter((r) => r.key === "eval_accuracy").at(-1)!;
  const epoch = (lastEval.metadata as { epoch_num: number }).epoch_num;
  assert.ok(
    steps.some((s) => s!.samples === epoch),
    `epoch_num ${epoch} is a step line's sample count`,
  );
});
