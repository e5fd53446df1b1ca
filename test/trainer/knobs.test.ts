// The trainer's knobs: the reference's defaults, flags over environment, and clear errors.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import "../../src/index.ts";
import {
  KNOB_SPECS,
  KnobError,
  flagOf,
  hparamLines,
  knobsHelp,
  misspeltKnobs,
  parseKnobs,
  validateKnobs,
  type Knobs,
} from "../../mlperf/bert/knobs.ts";
import { TrainerError, findShards } from "../../mlperf/bert/train.ts";
import { parseRunLog } from "../../mlperf/bert/report.ts";
import { fakeBatch } from "../../mlperf/bert/data/loader.ts";
import { writeShard } from "../../mlperf/bert/data/shard.ts";

const knobs = (env: NodeJS.ProcessEnv, argv: string[] = []): Knobs => parseKnobs(argv, { DEVICE: "JS", ...env })!;
const rejects = (k: Knobs, ...parts: string[]) =>
  assert.throws(
    () => validateKnobs(k),
    (e: unknown) => e instanceof KnobError && parts.every((p) => e.message.includes(p)),
    `expected a KnobError naming ${parts.join(", ")}`,
  );

test("defaults follow tinygrad's train_bert (v4.1): BS 8 per device in float32, 11 in fp16, LR and steps scaled by BS", () => {
  const fp32 = knobs({ GPUS: "2" });
  assert.equal(fp32.BS, 16);
  assert.equal(fp32.EVAL_BS, 2);
  assert.equal(fp32.LOSS_SCALER, 1);
  const tinybox = knobs({ DEFAULT_FLOAT: "HALF", GPUS: "6", EVAL_BS: "6" });
  assert.equal(tinybox.BS, 66);
  assert.equal(tinybox.OPT_BASE_LEARNING_RATE, 0.0001);
  assert.equal(tinybox.TRAIN_STEPS, 55000);
  assert.equal(tinybox.LOSS_SCALER, 1024);
  assert.equal(tinybox.MAX_EVAL_STEPS, 1667); // 6 * 1667 = 10002, as tinycorp's eval_samples
  assert.equal(tinybox.EVAL_STEP_FREQ, 2272); // 149,952 samples: tinycorp's eval cadence at GBS 66
  assert.equal(tinybox.TARGET, 0.72);
  assert.equal(tinybox.SAVE_CKPT_FREQ, 1000);
  assert.equal(tinybox.KEEP_CKPT_AMOUNT, 5);
});

test("every knob is read from its environment variable and from its flag", () => {
  const sample = (kind: string, i: number): string =>
    kind === "string" ? `value-${i}` : kind === "float" ? `${i}.5` : String(i + 2);
  KNOB_SPECS.forEach((spec, i) => {
    const raw = spec.name === "DEVICE" ? "JS" : sample(spec.kind, i);
    const expected = spec.kind === "string" ? raw : Number(raw);
    assert.equal(knobs({ [spec.name]: raw })[spec.name as keyof Knobs], expected, `${spec.name} from the environment`);
    assert.equal(
      knobs({}, [flagOf(spec.name), raw])[spec.name as keyof Knobs],
      expected,
      `${spec.name} from ${flagOf(spec.name)}`,
    );
  });
});

test("INIT_CKPT_DIR defaults to BASEDIR and BERT_CONFIG to the bert_config.json in it", () => {
  const k = knobs({ BASEDIR: "/data/wiki" });
  assert.equal(k.INIT_CKPT_DIR, "/data/wiki");
  assert.equal(k.BERT_CONFIG, join("/data/wiki", "bert_config.json"));
});

test("a flag wins over the environment, in --eval-bs and --EVAL_BS=6 spellings", () => {
  assert.equal(knobs({ BS: "4" }, ["--bs", "12"]).BS, 12);
  assert.equal(knobs({}, ["--EVAL_BS=6"]).EVAL_BS, 6);
  assert.equal(knobs({}, ["--save-ckpt-dir", "/tmp/c"]).SAVE_CKPT_DIR, "/tmp/c");
  assert.equal(knobs({}, ["--ckpt"]).CKPT, 1);
  assert.equal(flagOf("OPT_BASE_LEARNING_RATE"), "--opt-base-learning-rate");
});

test("a knob that derives from another follows the flag that set it", () => {
  const k = knobs({}, ["--bs", "132"]);
  assert.equal(k.TRAIN_STEPS, Math.floor(3_630_000 / 132));
  assert.equal(k.OPT_BASE_LEARNING_RATE, 0.0001 * Math.sqrt(2));
});

test("a value that is not a number names the knob and where it came from", () => {
  assert.throws(
    () => knobs({ BS: "lots" }),
    (e: unknown) => e instanceof KnobError && e.message.includes('BS="lots"') && e.message.includes("environment"),
  );
  assert.throws(
    () => knobs({}, ["--gpus", "1.5"]),
    (e: unknown) =>
      e instanceof KnobError &&
      e.message.includes("GPUS") &&
      e.message.includes("--gpus") &&
      e.message.includes("integer"),
  );
});

test("numbers are read as decimals only: hex, exponents for integers, spaces and infinities are refused", () => {
  for (const [env, want] of [
    [{ BS: "0x20" }, 'BS="0x20" is not a decimal integer'],
    [{ BS: "1e3" }, 'BS="1e3" is not a decimal integer'],
    [{ BS: " 8" }, 'BS=" 8" is not a decimal integer'],
    [{ OPT_BASE_LEARNING_RATE: "Infinity" }, 'OPT_BASE_LEARNING_RATE="Infinity" is not a decimal number'],
    [{ OPT_BASE_LEARNING_RATE: "0x1" }, 'OPT_BASE_LEARNING_RATE="0x1" is not a decimal number'],
  ] as const) {
    assert.throws(
      () => knobs(env),
      (e: unknown) => e instanceof KnobError && e.message.includes(want),
    );
  }
  assert.equal(knobs({ BS: "+16" }).BS, 16);
  assert.equal(knobs({ OPT_BASE_LEARNING_RATE: "1.5e-4" }).OPT_BASE_LEARNING_RATE, 1.5e-4);
  assert.equal(knobs({ OPT_BASE_LEARNING_RATE: ".5" }).OPT_BASE_LEARNING_RATE, 0.5);
});

test("a variable one or two edits from a knob gets a did-you-mean warning; unrelated ones do not", (t) => {
  const env = {
    TRAIN_STPES: "5",
    SEEDS: "1",
    EVALBS: "2",
    GPU: "2",
    NODE: "/usr/bin/node",
    PS1: "$",
    PATH: "/bin",
    BS: "8",
  };
  assert.deepEqual(misspeltKnobs(env), [
    { variable: "TRAIN_STPES", knob: "TRAIN_STEPS" },
    { variable: "SEEDS", knob: "SEED" },
    { variable: "EVALBS", knob: "EVAL_BS" },
    { variable: "GPU", knob: "GPUS" },
  ]);
  const warnings: string[] = [];
  t.mock.method(console, "error", (line: string) => void warnings.push(line));
  knobs({ TRAIN_STPES: "5" });
  assert.deepEqual(warnings, [
    "warning: TRAIN_STPES is not a knob of the trainer and is ignored; did you mean TRAIN_STEPS?",
  ]);
});

test("an unknown option and a missing value are errors", () => {
  assert.throws(
    () => knobs({}, ["--batch-size", "3"]),
    (e: unknown) => e instanceof KnobError && e.message.includes("--batch-size"),
  );
  assert.throws(
    () => knobs({}, ["--bs"]),
    (e: unknown) => e instanceof KnobError && e.message.includes("--bs needs a value"),
  );
});

test("--help gives null and the help lists every knob with its flag and default", () => {
  assert.equal(parseKnobs(["--help"], {}), null);
  const help = knobsHelp();
  for (const spec of KNOB_SPECS) assert.ok(help.includes(`${spec.name} / ${flagOf(spec.name)}`), spec.name);
  assert.ok(help.includes("default 0.0001*sqrt(BS/66)"));
});

test("an unknown device is an error naming it and the known ones", () => {
  rejects(knobs({ DEVICE: "TPU" }), 'DEVICE="TPU"', "unknown device", "JS");
});

test("the run phase must evaluate the whole 10,000-sample eval set: EVAL_BS*MAX_EVAL_STEPS < 10000 is refused", () => {
  rejects(
    knobs({ RUNMLPERF: "1", EVAL_BS: "6", MAX_EVAL_STEPS: "1000" }),
    "6*1000=6000",
    "10000-sample eval set",
    "MAX_EVAL_STEPS to 1667",
  );
  assert.doesNotThrow(() => validateKnobs(knobs({ RUNMLPERF: "1", EVAL_BS: "6", MAX_EVAL_STEPS: "1667" })));
});

test("a smaller eval set (the demo's) is covered by EVAL_SET_SIZE", () => {
  assert.doesNotThrow(() =>
    validateKnobs(knobs({ RUNMLPERF: "1", EVAL_SET_SIZE: "800", EVAL_BS: "100", MAX_EVAL_STEPS: "8" })),
  );
  rejects(knobs({ RUNMLPERF: "1", EVAL_SET_SIZE: "800", EVAL_BS: "100", MAX_EVAL_STEPS: "7" }), "800-sample eval set");
});

test("INITMLPERF needs BENCHMARK, and the two phases are not one process", () => {
  rejects(knobs({ INITMLPERF: "1" }), "BENCHMARK");
  rejects(knobs({ INITMLPERF: "1", RUNMLPERF: "1", BENCHMARK: "10" }), "two phases");
});

test("the init phase clears only a kernel cache TSGRAD_CACHE names, never the user-wide one unasked", () => {
  const before = process.env.TSGRAD_CACHE;
  try {
    delete process.env.TSGRAD_CACHE;
    rejects(knobs({ INITMLPERF: "1", BENCHMARK: "10" }), "TSGRAD_CACHE names none for this run");
    process.env.TSGRAD_CACHE = "/tmp/run/kernel-cache";
    validateKnobs(knobs({ INITMLPERF: "1", BENCHMARK: "10" }));
  } finally {
    if (before === undefined) delete process.env.TSGRAD_CACHE;
    else process.env.TSGRAD_CACHE = before;
  }
});

test("batches that do not split over the devices or micro-batches are refused", () => {
  rejects(knobs({ GPUS: "4", BS: "66" }), "GPUS=4");
  rejects(knobs({ BS: "10", GRADIENT_ACC_STEPS: "4" }), "GRADIENT_ACC_STEPS=4");
  rejects(knobs({ GPUS: "4", BS: "64", EVAL_BS: "6" }), "EVAL_BS=6");
});

test("other bad values name their knob", () => {
  rejects(knobs({ DEFAULT_FLOAT: "DOUBLE" }), "DEFAULT_FLOAT");
  rejects(knobs({ TARGET: "72" }), "TARGET=72", "fraction");
  rejects(knobs({ MODEL: "resnet" }), "MODEL");
  rejects(knobs({ BS: "0" }), "BS=0");
  rejects(knobs({ RESUME: "/no/such/ckpt.safe" }), "RESUME=/no/such/ckpt.safe");
});

test("a missing data folder names the folder and the command that makes it", () => {
  const basedir = mkdtempSync(join(tmpdir(), "tsgrad-knobs-"));
  try {
    const says =
      (...parts: string[]) =>
      (e: unknown) =>
        e instanceof TrainerError && parts.every((p) => e.message.includes(p));
    assert.throws(
      () => findShards(basedir),
      says(join(basedir, "train"), "download.ts", "preprocess.ts pre-train all"),
    );
    mkdirSync(join(basedir, "results4"));
    assert.throws(
      () => findShards(basedir),
      (e: unknown) => says("preprocess.ts pre-train all")(e) && !(e as Error).message.includes("download.ts"),
    );
    mkdirSync(join(basedir, "train"));
    writeShard(join(basedir, "train", "part-00000-of-00500.safetensors"), fakeBatch(1, 8, 2, 0));
    assert.throws(() => findShards(basedir), says(join(basedir, "eval"), "preprocess.ts pre-eval"));
  } finally {
    rmSync(basedir, { recursive: true, force: true });
  }
});

test("HParam lines are the report's knob lines, one per knob", () => {
  const k = knobs({ BS: "66" });
  const lines = hparamLines(k);
  assert.equal(lines.length, KNOB_SPECS.length);
  assert.ok(lines.includes('HParam: "BS": 66'));
  const run = parseRunLog(lines.join("\n"), "hparams");
  assert.equal(run.knobs.get("BS"), "66");
  assert.equal(run.knobs.get("EVAL_STEP_FREQ"), String(k.EVAL_STEP_FREQ));
});
