// Ctrl-C saves a checkpoint and stops cleanly; RESUME continues with the same data order and
// state, so the resumed steps' losses are those of an uninterrupted run.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { demoEnvironment, prepareDemoData } from "../../mlperf/bert/demo.ts";
import { parseKnobs } from "../../mlperf/bert/knobs.ts";
import { parseStepLine } from "../../mlperf/bert/report.ts";
import { trainBert, type TrainResult } from "../../mlperf/bert/train.ts";
import { TINY, skewedCorpus } from "./tiny_data.ts";

test("Ctrl-C saves a checkpoint, and RESUME from it repeats the uninterrupted run's losses", async () => {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-resume-"));
  try {
    const data = prepareDemoData(join(dir, "data"), TINY, skewedCorpus(30));
    const base = {
      ...demoEnvironment(dir, data, TINY, 7),
      DEVICE: "JS",
      BEAM: "0",
      RUNMLPERF: "1",
      LOGMLPERF: "0",
      TRAIN_STEPS: "5",
      EVAL_STEP_FREQ: "100",
      TARGET: "1",
      MAX_EVAL_STEPS: "1",
      EVAL_SET_SIZE: "32",
    };
    const run = async (env: Record<string, string>, onStep: (step: number) => void = () => {}) => {
      const losses = new Map<number, string>();
      const result: TrainResult = await trainBert(parseKnobs([], { ...base, ...env })!, {
        print: (line) => {
          const step = parseStepLine(line);
          if (step === null) return;
          losses.set(step.step, step.loss.toFixed(4));
          onStep(step.step);
        },
      });
      return { losses, result };
    };

    const whole = await run({ SAVE_CKPT_DIR: join(dir, "whole") });
    assert.equal(whole.losses.size, 5);

    // Ctrl-C during step 2: the step finishes, a checkpoint is written, the run returns
    const stopped = await run({ SAVE_CKPT_DIR: join(dir, "stopped") }, (step) => step === 2 && process.emit("SIGINT"));
    assert.equal(stopped.result.interrupted, true);
    assert.equal(stopped.result.stepsRun, 2);
    const checkpoint = join(dir, "stopped", "step_0000002.safe");
    assert.ok(existsSync(checkpoint), "the interrupt's checkpoint");

    const resumed = await run({ SAVE_CKPT_DIR: join(dir, "resumed"), RESUME: checkpoint });
    assert.deepEqual([...resumed.losses.keys()], [3, 4, 5]);
    for (const step of [3, 4, 5])
      assert.equal(resumed.losses.get(step), whole.losses.get(step), `loss at step ${step}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
