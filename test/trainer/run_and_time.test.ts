// End to end, CI-sized: run_and_time/cpu.sh runs the init phase and the run phase of a tiny BERT
// on the JS device over shards made by the real pipeline, and its MLPerf log passes the rules.
// The corpus is mostly one word so that accuracy crosses 0.72 (and stays below 1.0) within a few
// steps: this checks the plumbing; the demo (npm run demo) is where a model learns.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { DEMO_SETTINGS, demoEnvironment, prepareDemoData, type DemoSettings } from "../../mlperf/bert/demo.ts";
import { checkCompliance } from "../../mlperf/bert/compliance.ts";
import { parseMllog } from "../../mlperf/bert/mllog.ts";
import { parseEvalLine, parseStepLine } from "../../mlperf/bert/report.ts";

const CPU_SCRIPT = fileURLToPath(new URL("../../mlperf/bert/run_and_time/cpu.sh", import.meta.url));

/** 85% of documents are "ka ka ...", the rest "lo lo ...": predicting "ka" is right about 85% of the time. */
function skewedCorpus(documents: number) {
  const doc = (d: number) => Array.from({ length: 3 }, () => Array(4 + (d % 3)).fill(d % 7 === 0 ? "lo" : "ka").join(" ")).join("\n");
  const text = (from: number, count: number) => Array.from({ length: count }, (_, i) => doc(from + i)).join("\n\n") + "\n";
  return { trainText: text(0, documents), evalText: text(documents, 20), vocabText: "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nka\nlo\n" };
}

const TINY: DemoSettings = {
  ...DEMO_SETTINGS,
  preprocess: { ...DEMO_SETTINGS.preprocess, maxSeqLength: 16, maxPredictionsPerSeq: 3, dupeFactor: 2 },
  trainParts: 2,
  model: { hiddenSize: 16, numHiddenLayers: 1, numAttentionHeads: 2, intermediateSize: 32 },
  knobs: {
    ...DEMO_SETTINGS.knobs, BS: 8, EVAL_BS: 32, OPT_BASE_LEARNING_RATE: 0.05, NUM_WARMUP_STEPS: 2, TRAIN_STEPS: 40,
    EVAL_STEP_FREQ: 4, SAVE_CKPT_FREQ: 4, KEEP_CKPT_AMOUNT: 2,
  },
};

test("run_and_time/cpu.sh runs both phases and writes a compliant MLPerf log, the console log and the final model", () => {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-run-and-time-"));
  try {
    const data = prepareDemoData(join(dir, "data"), TINY, skewedCorpus(60));
    const env = { ...process.env, ...demoEnvironment(dir, data, TINY, 4242), DEVICE: "JS", BEAM: "0", INIT_BENCHMARK: "3" };
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
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
