// Each broken variant is one change from SPEC.md section 10 that the official checker rejects
// (or accepts), applied to tinycorp's real v4.1 log.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { withTempDir } from "./tempDir.ts";
import {
  bertEvalIntervalSamples,
  checkCompliance,
  type ComplianceResult,
  type Ruleset,
} from "../../mlperf/bert/compliance.ts";

const fixtures = fileURLToPath(new URL("../fixtures/mllog/", import.meta.url));
const projectRoot = fileURLToPath(new URL("../../", import.meta.url));
const v41Path = path.join(fixtures, "tinycorp_v4.1_tinybox_green_result_0.txt");
const v41 = readFileSync(v41Path, "latin1");
const v50 = readFileSync(path.join(fixtures, "tinycorp_v5.0_tinybox_green_result_0.txt"), "latin1");

type Fields = { key: string; value?: unknown; time_ms: number; metadata: { [name: string]: unknown } };
const PREFIX = ":::MLLOG ";

/** The v4.1 log with `edit` applied to its records (as objects), written back as MLLOG lines. */
function editedV41(edit: (records: Fields[]) => Fields[]): string {
  const records = v41
    .split("\n")
    .filter((l) => l.startsWith(PREFIX))
    .map((l) => JSON.parse(l.slice(PREFIX.length)) as Fields);
  return `${edit(records)
    .map((r) => PREFIX + JSON.stringify(r))
    .join("\n")}\n`;
}

const without =
  (...keys: string[]) =>
  (records: Fields[]) =>
    records.filter((r) => !keys.includes(r.key));
const changing = (key: string, change: (r: Fields) => void) => (records: Fields[]) =>
  records.map((r) => {
    if (r.key === key) change(r);
    return r;
  });
const lastIndexOf = (records: Fields[], key: string) => records.map((r) => r.key).lastIndexOf(key);
/** Moves the (first) record `key` to just before the record `before`. */
const moving = (key: string, before: string) => (records: Fields[]) => {
  const moved = records.splice(
    records.findIndex((r) => r.key === key),
    1,
  )[0]!;
  records.splice(
    records.findIndex((r) => r.key === before),
    0,
    moved,
  );
  return records;
};
const messages = (result: ComplianceResult) => result.errors.map((e) => e.message);

function assertFailsWith(result: ComplianceResult, pattern: RegExp): void {
  assert.ok(
    result.errors.some((e) => pattern.test(e.message)),
    `expected an error matching ${pattern}, got:\n${messages(result).join("\n")}`,
  );
}

for (const ruleset of ["4.1.0", "5.0.0"] as Ruleset[]) {
  test(`tinycorp's real v4.1 and v5.0 logs pass ruleset ${ruleset}`, () => {
    for (const log of [v41, v50]) {
      const result = checkCompliance(log, { ruleset });
      assert.deepEqual(result.errors, []);
      assert.deepEqual(result.warnings, []);
      assert.equal(result.division, "closed");
    }
  });
}

const rejected: [string, (records: Fields[]) => Fields[], RegExp][] = [
  ["no run_stop", without("run_stop"), /^Required EXACTLY_ONE occurrence of 'run_stop' but found 0$/],
  [
    "opt_lamb_epsilon missing",
    without("opt_lamb_epsilon"),
    /^Required EXACTLY_ONE occurrence of 'opt_lamb_epsilon' but found 0$/,
  ],
  [
    "gradient_accumulation_steps missing",
    without("gradient_accumulation_steps"),
    /^Required EXACTLY_ONE occurrence of 'gradient_accumulation_steps' but found 0$/,
  ],
  [
    "gradient_accumulation_steps 0",
    changing("gradient_accumulation_steps", (r) => (r.value = 0)),
    /CHECK for 'gradient_accumulation_steps' failed .*v\['value'\] > 0/,
  ],
  [
    "train_samples missing",
    without("train_samples"),
    /^Required EXACTLY_ONE occurrence of 'train_samples' but found 0$/,
  ],
  ["cache_clear missing", without("cache_clear"), /^Required AT_LEAST_ONE occurrence of 'cache_clear' but found 0$/],
  [
    "no epoch_start/epoch_stop",
    without("epoch_start", "epoch_stop"),
    /^Required AT_LEAST_ONE occurrence of 'epoch_start' or 'block_start' but found 0$/,
  ],
  [
    "no eval_start/eval_stop",
    without("eval_start", "eval_stop"),
    /^Required AT_LEAST_ONE occurrence of 'eval_start' or 'block_start' but found 0$/,
  ],
  [
    "run_stop without status",
    changing("run_stop", (r) => delete r.metadata.status),
    /CHECK for 'run_stop' failed .*'status' in v\['metadata'\]/,
  ],
  [
    "eval_accuracy without epoch_num",
    changing("eval_accuracy", (r) => delete r.metadata.epoch_num),
    /CHECK for 'eval_accuracy' failed .*'epoch_num' in v\['metadata'\]/,
  ],
  [
    "eval_accuracy with samples_count instead of epoch_num",
    changing("eval_accuracy", (r) => {
      r.metadata.samples_count = r.metadata.epoch_num;
      delete r.metadata.epoch_num;
    }),
    /CHECK for 'eval_accuracy' failed .*'epoch_num' in v\['metadata'\]/,
  ],
  [
    "run_start moved before init_start",
    moving("run_start", "init_start"),
    /CHECK for 'init_start' failed .*not s\['run_started'\]/,
  ],
  [
    "init_stop before init_start",
    moving("init_stop", "init_start"),
    /CHECK for 'init_stop' failed .*s\['init_started'\]/,
  ],
  [
    "init took 31 min",
    (records) =>
      changing(
        "init_stop",
        (r) => (r.time_ms = records.find((s) => s.key === "init_start")!.time_ms + 31 * 60e3),
      )(records),
    /CHECK for 'init_stop' failed .*init took 31\.0 min, over the 30 min budget .*compile_time_mins/,
  ],
  [
    "submission_division after init_stop",
    moving("submission_division", "run_start"),
    /CHECK for 'init_stop' failed .*no submission_division before init_stop/,
  ],
  [
    "best accuracy 0.7199",
    (records) => {
      records[lastIndexOf(records, "eval_accuracy")]!.value = 0.7199;
      return records;
    },
    /^Failed checks for eval_accuracy : \(v\['value'\] >= 0\.720\) and v\['value'\] < 1\.0; no record passes, best 0\.7199\d*$/,
  ],
  [
    "accuracy logged as percent",
    changing("eval_accuracy", (r) => (r.value = (r.value as number) * 100)),
    /Failed checks for eval_accuracy .*not a percent/,
  ],
  [
    "global_batch_size twice, 66 and 132",
    (records) => {
      records.splice(lastIndexOf(records, "global_batch_size") + 1, 0, {
        ...records.find((r) => r.key === "global_batch_size")!,
        value: 132,
      });
      return records;
    },
    /^Required EXACTLY_ONE occurrence of 'global_batch_size' but found 2 with different values: \[66,132\]$/,
  ],
  ["seed missing", without("seed"), /logs no seed/],
  ["seed without file and lineno", changing("seed", (r) => (r.metadata = {})), /seed metadata lacks file and lineno/],
  [
    "a metadata file named after an RCP key",
    changing("init_start", (r) => (r.metadata.file = "eval_accuracy.ts")),
    /contains the string 'eval_accuracy'/,
  ],
  [
    "submission_org missing under ruleset 4.1.0",
    without("submission_org"),
    /^Required EXACTLY_ONE occurrence of 'submission_org' but found 0$/,
  ],
];

for (const [variant, edit, expected] of rejected) {
  test(`rejects a log with ${variant}`, () => {
    assertFailsWith(checkCompliance(editedV41(edit), { ruleset: "4.1.0" }), expected);
  });
}

test("run_start before init_start fails all three ordering checks, as the official checker does", () => {
  const errors = messages(checkCompliance(editedV41(moving("run_start", "init_start")), { ruleset: "4.1.0" }));
  assert.equal(errors.filter((m) => /^CHECK for '(run_start|init_start|init_stop)' failed/.test(m)).length, 3);
});

test("an error names the record index and key of the offending record", () => {
  const result = checkCompliance(editedV41(changing("run_stop", (r) => delete r.metadata.status)), {
    ruleset: "4.1.0",
  });
  assert.equal(result.errors.length, 1);
  assert.deepEqual({ index: result.errors[0]!.index, key: result.errors[0]!.key }, { index: 85, key: "run_stop" });
});

test("rejects a truncated JSON line as a parsing error, naming its line", () => {
  const lines = v41.split("\n");
  lines[20] = lines[20]!.slice(0, 60);
  assertFailsWith(
    checkCompliance(lines.join("\n"), { ruleset: "4.1.0" }),
    /^Found parsing errors: record 20 \(line 21\): invalid JSON/,
  );
});

test("rejects a record without a value field (the official checker crashes on it)", () => {
  const result = checkCompliance(editedV41(changing("cache_clear", (r) => delete r.value)), { ruleset: "4.1.0" });
  assertFailsWith(result, /record 5 \(line 6\) has no "value" field .*KeyError: 'value'/);
});

test("submission_org is not required by ruleset 5.0.0", () => {
  assert.deepEqual(checkCompliance(editedV41(without("submission_org")), { ruleset: "5.0.0" }).errors, []);
});

test("epoch records may carry samples_count instead of epoch_num in 5.0.0 only", () => {
  const log = editedV41(
    changing("epoch_start", (r) => {
      r.metadata.samples_count = r.metadata.epoch_num;
      delete r.metadata.epoch_num;
    }),
  );
  assert.deepEqual(checkCompliance(log, { ruleset: "5.0.0" }).errors, []);
  assertFailsWith(
    checkCompliance(log, { ruleset: "4.1.0" }),
    /CHECK for 'epoch_start' failed .*'epoch_num' in v\['metadata'\]/,
  );
});

test("a key logged twice with the same value is a warning, not an error", () => {
  const result = checkCompliance(
    editedV41((records) => {
      records.splice(lastIndexOf(records, "global_batch_size") + 1, 0, {
        ...records.find((r) => r.key === "global_batch_size")!,
      });
      return records;
    }),
    { ruleset: "4.1.0" },
  );
  assert.deepEqual(result.errors, []);
  assert.deepEqual(
    result.warnings.map((w) => w.message),
    ["Required EXACTLY_ONE occurrence of 'global_batch_size' but found 2"],
  );
});

test("the optional hyper-parameters and submission_status may be left out", () => {
  const log = editedV41(
    without(
      "max_sequence_length",
      "max_predictions_per_seq",
      "opt_name",
      "opt_lamb_learning_rate_decay_poly_power",
      "submission_status",
    ),
  );
  assert.deepEqual(checkCompliance(log, { ruleset: "4.1.0" }).errors, []);
});

test("the open division needs no hyper-parameters and no seed", () => {
  const log = editedV41((records) =>
    without(
      "opt_lamb_epsilon",
      "gradient_accumulation_steps",
      "opt_lamb_beta_1",
      "seed",
    )(changing("submission_division", (r) => (r.value = "open"))(records)),
  );
  const result = checkCompliance(log, { ruleset: "4.1.0" });
  assert.deepEqual(result.errors, []);
  assert.equal(result.division, "open");
});

test("a success without a passing evaluation before run_stop is noted", () => {
  const result = checkCompliance(editedV41(moving("run_stop", "eval_start")), { ruleset: "4.1.0" });
  assert.deepEqual(result.errors, []);
  assert.ok(
    result.notes.some((n) =>
      /run_stop says success but the last eval_accuracy before it is below 0\.720/.test(n.message),
    ),
  );
});

test("evaluations further apart than the MLPerf interval are noted", () => {
  const sparse = editedV41((records) => {
    const first = records.findIndex((r) => r.key === "eval_accuracy");
    return records.filter((r, i) => !(r.key === "eval_accuracy" && i === first));
  });
  assert.ok(
    checkCompliance(sparse, { ruleset: "4.1.0" }).notes.some((n) =>
      /the rules evaluate every 150000 samples at global batch size 66/.test(n.message),
    ),
  );
});

test("the eval interval follows the MLPerf formula", () => {
  assert.equal(bertEvalIntervalSamples(66), 150000);
  assert.equal(bertEvalIntervalSamples(2172), 175000);
  assert.equal(bertEvalIntervalSamples(8192), 225000);
});

function runCli(args: string[]): { status: number; stdout: string; stderr: string } {
  try {
    const stdout = execFileSync(process.execPath, ["--import", "tsx", "mlperf/bert/compliance.ts", ...args], {
      cwd: projectRoot,
      encoding: "utf8",
      stdio: "pipe",
    });
    return { status: 0, stdout, stderr: "" };
  } catch (error) {
    const failed = error as { status: number; stdout: string; stderr: string };
    return { status: failed.status, stdout: failed.stdout, stderr: failed.stderr };
  }
}

test("the CLI passes a compliant log and fails a broken one with a clear message", () => {
  const ok = runCli([v41Path, "--ruleset", "4.1.0"]);
  assert.equal(ok.status, 0);
  assert.match(
    ok.stdout,
    /PASS: .*tinycorp_v4\.1_tinybox_green_result_0\.txt \(ruleset 4\.1\.0, closed division\) is compliant/,
  );
  withTempDir((dir) => {
    const broken = path.join(dir, "result_0.txt");
    writeFileSync(broken, editedV41(without("run_stop")));
    const bad = runCli([broken]);
    assert.equal(bad.status, 1);
    assert.match(bad.stdout, /ERROR: Required EXACTLY_ONE occurrence of 'run_stop' but found 0/);
    assert.match(bad.stdout, /FAIL: .*result_0\.txt \(ruleset 5\.0\.0, closed division\): 1 error$/m);
  });
});

test("the CLI refuses a ruleset without BERT", () => {
  const result = runCli([v41Path, "--ruleset", "5.1.0"]);
  assert.equal(result.status, 2);
  assert.match(result.stderr, /--ruleset must be one of 4\.1\.0, 5\.0\.0 \(got 5\.1\.0\)/);
});
