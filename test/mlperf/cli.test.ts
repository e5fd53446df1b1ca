// The tsgrad command line (bin/tsgrad.mjs): --help on every subcommand, usage errors with exit status 2 and one
// line naming the option, and what the screen shows of a trainer's console output.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { SUBCOMMANDS } from "../../mlperf/bert/cli.ts";
import { runScript } from "../../mlperf/bert/cli/child.ts";
import { ConsoleView, summaryLines } from "../../mlperf/bert/cli/screen.ts";
import { sizeForData } from "../../mlperf/bert/cli/model_size.ts";
import { parseKnobs } from "../../mlperf/bert/knobs.ts";
import { evalSetSize, phaseLine, trainEta } from "../../mlperf/bert/train.ts";
import { CountProgress } from "../../mlperf/bert/progress.ts";
import { tinyDataFolder } from "../trainer/tiny_manifest.ts";

const BIN = fileURLToPath(new URL("../../bin/tsgrad.mjs", import.meta.url));
const tsgrad = (args: string[]) =>
  spawnSync(process.execPath, [BIN, ...args], {
    encoding: "utf8",
    env: { ...process.env, DEVICE: "JS" },
    timeout: 60_000,
  });

test("tsgrad --help lists every subcommand and exits 0", () => {
  const result = tsgrad(["--help"]);
  assert.equal(result.status, 0, result.stderr);
  for (const name of Object.keys(SUBCOMMANDS)) assert.match(result.stdout, new RegExp(`^  ${name} `, "m"));
});

test("every subcommand answers --help with its options and exits 0", () => {
  const options: Record<string, string> = {
    download: "--wiki-train",
    preprocess: "pre-eval",
    train: "--data DIR",
    eval: "--checkpoint FILE",
    report: "--output FILE",
    demo: "--verbose",
  };
  for (const name of Object.keys(SUBCOMMANDS)) {
    const result = tsgrad([name, "--help"]);
    assert.equal(result.status, 0, `${name}: ${result.stderr}`);
    assert.ok(result.stdout.includes(options[name]!), `${name} --help names ${options[name]}`);
  }
});

test("an unknown command or option exits 2 with one line naming it", () => {
  const command = tsgrad(["trian"]);
  assert.equal(command.status, 2);
  assert.match(command.stderr, /^tsgrad: unknown command "trian"/);
  const option = tsgrad(["train", "--frob"]);
  assert.equal(option.status, 2);
  assert.equal(option.stderr.trim(), 'tsgrad train: unknown option "--frob" (see --help)');
  const missing = tsgrad(["eval", "--checkpoint"]);
  assert.equal(missing.status, 2);
  assert.equal(missing.stderr.trim(), "tsgrad eval: option --checkpoint needs a value");
});

test("train --data on a folder without a manifest exits 2 naming the file", () => {
  const result = tsgrad(["train", "--data", "/nonexistent/folder", "--out", "/nonexistent/folder/run"]);
  assert.equal(result.status, 2);
  assert.match(result.stderr, /\/nonexistent\/folder\/manifest\.json: no manifest/);
});

test("the screen shows phases and evaluations; steps, hyperparameters and MLPerf lines go to the log only", () => {
  const view = new ConsoleView();
  const lines = [
    "training on CPU",
    'HParam: "TARGET": 0.72',
    "model: 2 layers, hidden 64, 2 heads, vocab 77",
    "warm-up (init phase, untimed): 5 steps and an eval on fake data compile every kernel",
    ':::MLLOG {"key": "init_start"}',
    "step 1 | 32 samples | 9.0 ms (host 1.0 ms, data 0.1 ms, device 7.9 ms) | loss 4.3 | lr 1.50e-3 | 0.04 GB | 80.0 GFLOP/s",
    "warm-up eval on fake data (runs the eval step; its accuracy is no result):",
    "eval step 5 | 160 samples | masked-LM accuracy 0.714000 | loss 1.2000 | 0.1 s",
    "Estimated training time: 0h0m (median of 3 replayed steps 8.0 ms x 1500 steps)",
    "training on CPU",
    "model: 2 layers, hidden 64, 2 heads, vocab 77",
    "eval step 100 | 3200 samples | masked-LM accuracy 0.754514 | loss 1.2174 | 0.1 s",
    "Reference Convergence point reached after 3200 datasamples and 0h0m4.20s.",
    "saved checkpoint ckpts/step_0000100.safe",
  ];
  const shown = lines.map((line) => view.show(line)).filter((line) => line !== null);
  assert.deepEqual(shown, [
    "training on CPU",
    "model: 2 layers, hidden 64, 2 heads, vocab 77",
    "warm-up (init phase, untimed): 5 steps and an eval on fake data compile every kernel",
    "  eval on fake data: masked-LM accuracy 0.714 (random batches: a check of the eval step, no result)",
    "  eval at step 100: masked-LM accuracy 0.755, loss 1.2174",
  ]);
  assert.deepEqual(view.outcome, {
    lastEval: { step: 100, samples: 3200, accuracy: 0.754514 },
    convergedSeconds: 4.2,
    interrupted: null,
    target: 0.72,
  });
  const files = {
    runDir: "runs/x",
    consoleLog: "runs/x/bert.log",
    mlperfLog: { path: "runs/x/result_bert_1.log", verdict: "compliant" },
    report: "runs/x/report.html",
    checkpoints: "runs/x/ckpts",
  };
  const summary = summaryLines(view.outcome, files);
  assert.equal(
    summary[0],
    "result:      masked-LM accuracy 0.755 at step 100 (3200 samples): target 0.72 reached after 4.2 s of training",
  );
  assert.equal(summary.length, 6);
  const failed = summaryLines({ ...view.outcome, lastEval: null }, { ...files, mlperfLog: null, report: null }, 2);
  assert.equal(failed[0], "result:      stopped by an error (exit status 2), said above");
});

test("--verbose shows every line", () => {
  const view = new ConsoleView(true);
  assert.equal(view.show('HParam: "BS": 8'), 'HParam: "BS": 8');
});

test("the train bar's ETA names the next evaluation, the target and the most the run can take", () => {
  const knobs = parseKnobs([], { DEVICE: "JS", TRAIN_STEPS: "1500", EVAL_STEP_FREQ: "50", TARGET: "0.72" })!;
  const eta = trainEta(knobs, () => 0.653);
  assert.equal(eta(120, 10), "eval 150 in 3s (stops at 0.72, last 0.653), at most 2m18s");
  const written: string[] = [];
  const bar = new CountProgress("train", 1500, { eta, sink: { write: (t) => written.push(t), isTTY: false } });
  bar.advance();
  assert.match(
    written[0]!,
    /^train 1\/1500 \[>\s+\] [\d.]+ it\/s, eval 50 in .* \(stops at 0\.72, last 0\.653\), at most /,
  );
  assert.match(
    phaseLine("run", knobs, 1500, 771),
    /at most 1500 steps .* an eval of 771 samples every 50 steps; stops once an eval reaches TARGET=0\.72$/,
  );
});

test("a terminal's bar is cut to its width, so a redraw never wraps", () => {
  const written: string[] = [];
  const bar = new CountProgress("train", 10, { sink: { write: (t) => written.push(t), isTTY: true, columns: 40 } });
  bar.advance();
  assert.equal(written[0]!.replace("\r", "").replace("\x1b[K", "").length, 39);
});

test("an eval set smaller than EVAL_SET_SIZE is evaluated once, with a warning, or refused under STRICT_EVAL_SET", () => {
  const said: string[] = [];
  const knobs = parseKnobs([], { DEVICE: "JS" })!;
  assert.equal(
    evalSetSize(knobs, 771, (line) => said.push(line)),
    771,
  );
  assert.match(
    said[0]!,
    /^warning: the eval files hold 771 samples, fewer than EVAL_SET_SIZE=10000: each evaluation covers those 771 once/,
  );
  assert.equal(
    evalSetSize(knobs, 20_000, () => assert.fail("no warning")),
    10_000,
  );
  const strict = parseKnobs([], { DEVICE: "JS", STRICT_EVAL_SET: "1" })!;
  assert.throws(() => evalSetSize(strict, 771, () => {}), /STRICT_EVAL_SET=1/);
});

test("a model is sized by the train samples: tiny under 100,000, then mini, small, base, large", () => {
  assert.deepEqual(sizeForData(39_195), { size: "tiny", reason: "39,195 train samples (under 100,000)" });
  assert.equal(sizeForData(500_000).size, "mini");
  assert.equal(sizeForData(5_000_000).size, "small");
  assert.equal(sizeForData(20_000_000).size, "base");
  assert.deepEqual(sizeForData(156_725_653), { size: "large", reason: "156,725,653 train samples (over 50,000,000)" });
});

test("train --data stops before building anything, in one line, when the data does not fit or the eval set is short", {
  timeout: 120_000,
}, () => {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-cli-data-"));
  try {
    const data = tinyDataFolder(join(dir, "data"));
    const widths = tsgrad(["train", "--data", data, "--out", join(dir, "run"), "--max-seq-length", "32"]);
    assert.equal(widths.status, 2);
    assert.equal(
      widths.stderr.trim(),
      `tsgrad train: DATA=${data} does not fit this run: its samples have sequences of 16 tokens, not MAX_SEQ_LENGTH=32`,
    );
    const strict = tsgrad(["train", "--data", data, "--out", join(dir, "run"), "--strict-eval-set"]);
    assert.equal(strict.status, 2);
    assert.match(
      strict.stderr,
      /^train: the eval files hold \d+ samples, fewer than EVAL_SET_SIZE=10000 \(STRICT_EVAL_SET=1\)/m,
    );
    assert.doesNotMatch(strict.stdout, /^training on /m, "nothing built");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a script run as a child gets the node flags asked for (tsgrad preprocess's small young generation)", async () => {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-child-"));
  try {
    const script = join(dir, "flags.ts");
    writeFileSync(
      script,
      `import { writeFileSync } from "node:fs";\nwriteFileSync(process.argv[2]!, process.execArgv.join(" "));\n`,
    );
    const out = join(dir, "flags.txt");
    assert.equal(await runScript(script, [out], {}, ["--max-semi-space-size=2"]), 0);
    assert.match(readFileSync(out, "utf8"), /^--max-semi-space-size=2 --import /);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
