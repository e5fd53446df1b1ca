// The trainer's and the demo's command lines: --help, and usage errors with status 2.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const TSX = fileURLToPath(new URL("../../node_modules/.bin/tsx", import.meta.url));
const script = (name: string) => fileURLToPath(new URL(`../../mlperf/bert/${name}`, import.meta.url));
const run = (name: string, args: string[], env: NodeJS.ProcessEnv = {}) =>
  spawnSync(TSX, [script(name), ...args], {
    encoding: "utf8",
    env: { ...process.env, DEVICE: "JS", ...env },
    timeout: 60_000,
  });

test("train.ts --help lists the phases and every knob, and exits 0", () => {
  const result = run("train.ts", ["--help"]);
  assert.equal(result.status, 0, result.stderr);
  for (const text of [
    "INITMLPERF=1 BENCHMARK=N",
    "RUNMLPERF=1",
    "EVAL_STEP_FREQ / --eval-step-freq",
    "SAVE_CKPT_DIR / --save-ckpt-dir",
  ])
    assert.ok(result.stdout.includes(text), text);
});

test("train.ts stops with status 2 and the knob's name on a bad value, before logging anything", () => {
  const result = run("train.ts", ["--eval-bs", "6", "--max-eval-steps", "10"], { RUNMLPERF: "1", LOGMLPERF: "0" });
  assert.equal(result.status, 2);
  assert.match(result.stderr, /^train: EVAL_BS\*MAX_EVAL_STEPS=6\*10=60 does not cover the 10000-sample eval set/m);
  assert.equal(result.stdout, "");
});

test("demo.ts --help exits 0 and an unknown option exits 2 with the usage", () => {
  const help = run("demo.ts", ["--help"]);
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /^usage: npx tsgrad demo/);
  const bad = run("demo.ts", ["--fast"]);
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /unknown option --fast/);
});
