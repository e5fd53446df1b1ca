import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { withTempDir } from "./tempDir.ts";
import {
  formatMllogLine,
  logBertHyperparameters,
  logSubmissionInfo,
  MLLOG_KEYS as K,
  MllogError,
  MlperfLogger,
  parseMllog,
  type MllogRecord,
} from "../../mlperf/bert/mllog.ts";
import { checkCompliance } from "../../mlperf/bert/compliance.ts";

const fixtures = fileURLToPath(new URL("../fixtures/mllog/", import.meta.url));
const thisFile = fileURLToPath(import.meta.url);

/** 1-based line of this file that ends with `marker`, to know where a call sits. */
function lineEndingWith(marker: string): number {
  return (
    readFileSync(thisFile, "utf8")
      .split("\n")
      .findIndex((line) => line.trimEnd().endsWith(marker)) + 1
  );
}

const recordsOf = (file: string) =>
  parseMllog(readFileSync(file, "utf8")).records.map((r) => r.fields as unknown as MllogRecord);

test("formatMllogLine writes the reference logger's layout byte for byte", () => {
  const text = readFileSync(path.join(fixtures, "tinycorp_v4.1_tinybox_green_result_0.txt"), "utf8");
  // Python prints the floats 1.0 and 1e-06 in a form JavaScript does not; every other line matches.
  const lines = text.split("\n").filter((l) => l.startsWith(":::MLLOG ") && !/"value": (1\.0|1e-06),/.test(l));
  assert.equal(lines.length, 85);
  for (const line of lines) assert.equal(formatMllogLine(JSON.parse(line.slice(":::MLLOG ".length))), line);
});

test("records carry the caller's file, relative to the project root, and line", () => {
  withTempDir((dir) => {
    const logger = new MlperfLogger({ path: path.join(dir, "result.log") });
    const record = logger.event(K.SEED, 1234); // caller-line-marker
    assert.deepEqual(record.metadata, {
      file: "test/mlperf/mllog.test.ts",
      lineno: lineEndingWith("// caller-line-marker"),
    });
  });
});

test("helpers attribute their records to the line that called the helper", () => {
  withTempDir((dir) => {
    const logger = new MlperfLogger({ path: path.join(dir, "result.log") });
    const system = { submitter: "tsgrad", division: "closed", status: "Available on-premise", system_name: "cpu" };
    logSubmissionInfo(logger, system, "cpu"); // helper-marker
    const linenos = new Set(recordsOf(path.join(dir, "result.log")).map((r) => r.metadata.lineno));
    assert.deepEqual([...linenos], [lineEndingWith("// helper-marker")]);
  });
});

test("start, end and event write INTERVAL_START, INTERVAL_END and POINT_IN_TIME with the keys in reference order", () => {
  withTempDir((dir) => {
    const file = path.join(dir, "result.log");
    const logger = new MlperfLogger({ path: file, clock: () => 1728518110874 });
    logger.start(K.RUN_START);
    logger.end(K.RUN_STOP, null, { status: "success" });
    logger.event(K.EVAL_ACCURACY, 0.7203, { epoch_num: 149952 });
    const records = recordsOf(file);
    assert.deepEqual(
      records.map((r) => r.event_type),
      ["INTERVAL_START", "INTERVAL_END", "POINT_IN_TIME"],
    );
    assert.deepEqual(
      records.map((r) => Object.keys(r)),
      Array(3).fill(["namespace", "time_ms", "event_type", "key", "value", "metadata"]),
    );
    assert.deepEqual(Object.keys(records[2]!.metadata), ["file", "lineno", "epoch_num"]);
    assert.equal(records[0]!.value, null);
    assert.equal(records[0]!.namespace, "");
  });
});

test("time_ms is an integer even when the clock has a fraction", () => {
  const logger = new MlperfLogger({ clock: () => 1728518110874.6 });
  assert.equal(logger.event(K.CACHE_CLEAR, true).time_ms, 1728518110875);
});

test("two loggers on one file append, as the init and run processes do", () => {
  withTempDir((dir) => {
    const file = path.join(dir, "result.log");
    new MlperfLogger({ path: file }).event(K.INIT_STOP);
    new MlperfLogger({ path: file }).start(K.RUN_START);
    assert.deepEqual(
      recordsOf(file).map((r) => r.key),
      ["init_stop", "run_start"],
    );
  });
});

test("echo prints the same line on stdout", () => {
  const printed: string[] = [];
  const write = process.stdout.write;
  process.stdout.write = ((chunk: string) => printed.push(chunk) > 0) as typeof process.stdout.write;
  try {
    new MlperfLogger({ echo: true, clock: () => 5 }).event(K.SEED, 7);
  } finally {
    process.stdout.write = write;
  }
  assert.equal(printed.length, 1);
  assert.match(
    printed[0]!,
    /^:::MLLOG \{"namespace": "", "time_ms": 5, "event_type": "POINT_IN_TIME", "key": "seed", "value": 7, .*\}\n$/,
  );
});

test("non-ASCII text is written as \\u escapes", () => {
  const line = formatMllogLine({
    namespace: "",
    time_ms: 1,
    event_type: "POINT_IN_TIME",
    key: "submission_org",
    value: "Zürich é",
    metadata: {},
  });
  assert.ok(/^[ -~]*$/.test(line), "printable ASCII only");
  assert.equal(JSON.parse(line.slice(":::MLLOG ".length)).value, "Zürich é");
});

test("a value JSON cannot hold is refused with the key in the message", () => {
  assert.throws(
    () => new MlperfLogger().event(K.EVAL_ACCURACY, NaN),
    (e: unknown) => e instanceof MllogError && /eval_accuracy/.test(e.message),
  );
});

test("parseMllog skips console lines, drops text before the token, and reports bad JSON with its line", () => {
  const text =
    'step 1 | loss 7.0\n[rank0]: :::MLLOG {"key": "a", "value": 1}\n:::MLLOG {"key": \n:::MLLOG{"key": "b"}\n';
  const parsed = parseMllog(text);
  assert.deepEqual(
    parsed.records.map((r) => [r.index, r.lineNumber, r.fields.key]),
    [[0, 2, "a"]],
  );
  assert.equal(parsed.problems.length, 1);
  assert.equal(parsed.problems[0]!.index, 1);
  assert.equal(parsed.problems[0]!.lineNumber, 3);
});

test("logSubmissionInfo maps a systems json to the submission records", () => {
  withTempDir((dir) => {
    const file = path.join(dir, "result.log");
    logSubmissionInfo(
      new MlperfLogger({ path: file }),
      { submitter: "tsgrad", division: "closed", status: "Available on-premise", system_name: "1x H200" },
      "h200",
    );
    assert.deepEqual(
      recordsOf(file).map((r) => [r.key, r.value]),
      [
        ["submission_org", "tsgrad"],
        ["submission_platform", "h200"],
        ["submission_division", "closed"],
        ["submission_status", "onprem"],
        ["submission_benchmark", "bert"],
      ],
    );
  });
});

test("logSubmissionInfo refuses an unknown system status, naming the systems file", () => {
  assert.throws(
    () =>
      logSubmissionInfo(
        new MlperfLogger(),
        { submitter: "tsgrad", division: "closed", status: "on my desk", system_name: "cpu" },
        "cpu",
      ),
    /systems\/cpu\.json: status "on my desk"/,
  );
});

const tinycorpKnobs = {
  BS: 66,
  OPT_BASE_LEARNING_RATE: 0.0001,
  TRAIN_STEPS: 55000,
  NUM_WARMUP_STEPS: 1,
  POLY_POWER: 1.0,
  DECAY: 0.01,
  EPSILON: 1e-6,
};

test("logBertHyperparameters logs tinycorp v4.1's values from its knobs", () => {
  withTempDir((dir) => {
    const file = path.join(dir, "result.log");
    logBertHyperparameters(new MlperfLogger({ path: file }), tinycorpKnobs, { evalSamples: 10002 });
    const ours = new Map(recordsOf(file).map((r) => [r.key, r.value]));
    const theirs = recordsOf(path.join(fixtures, "tinycorp_v4.1_tinybox_green_result_0.txt"));
    const hyperparameters = theirs.slice(
      theirs.findIndex((r) => r.key === K.GLOBAL_BATCH_SIZE),
      theirs.findIndex((r) => r.key === K.EPOCH_START),
    );
    assert.equal(hyperparameters.length, 17);
    for (const record of hyperparameters) assert.equal(ours.get(record.key), record.value, record.key);
    assert.equal(ours.get(K.OPT_EPSILON), 1e-6);
  });
});

test("logBertHyperparameters refuses a knob out of range, naming it", () => {
  assert.throws(
    () => logBertHyperparameters(new MlperfLogger(), { ...tinycorpKnobs, BS: 0 }),
    /knob BS: 0 is not a positive integer/,
  );
  assert.throws(
    () => logBertHyperparameters(new MlperfLogger(), { ...tinycorpKnobs, GRADIENT_ACC_STEPS: 0 }),
    /knob GRADIENT_ACC_STEPS/,
  );
});

test("a run logged with the helpers passes the compliance check", () => {
  withTempDir((dir) => {
    const file = path.join(dir, "result_bert_42.log");
    let now = 1_700_000_000_000;
    const clock = () => (now += 1000);
    const init = new MlperfLogger({ path: file, clock });
    logSubmissionInfo(
      init,
      { submitter: "tsgrad", division: "closed", status: "Available on-premise", system_name: "cpu" },
      "cpu",
    );
    init.event(K.CACHE_CLEAR, true);
    init.start(K.INIT_START);
    init.end(K.INIT_STOP);
    const run = new MlperfLogger({ path: file, clock });
    run.start(K.RUN_START);
    run.event(K.SEED, 42);
    logBertHyperparameters(run, tinycorpKnobs);
    run.start(K.EPOCH_START, 0, { epoch_num: 0 });
    for (const [samples, accuracy] of [
      [149952, 0.5],
      [299904, 0.7201],
    ] as const) {
      run.start(K.EVAL_START, null, { epoch_num: samples });
      run.end(K.EVAL_STOP, samples, { epoch_num: samples });
      run.event(K.EVAL_ACCURACY, accuracy, { epoch_num: samples });
    }
    run.end(K.EPOCH_STOP, 299904, { epoch_num: 299904 });
    run.end(K.RUN_STOP, null, { status: "success" });
    const result = checkCompliance(readFileSync(file, "latin1"), { ruleset: "4.1.0" });
    assert.deepEqual(result.errors, []);
    assert.deepEqual(result.warnings, []);
    assert.deepEqual(result.notes, []);
  });
});
