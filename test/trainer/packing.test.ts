// Packed training (PACKING>0) through the trainer: steps count the samples they held, a resumed packed run
// replays the packing and repeats the uninterrupted run's losses, and what packing cannot do yet is refused.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { demoEnvironment, prepareDemoData, type DemoSettings } from "../../mlperf/bert/demo.ts";
import { KnobError, parseKnobs, validateKnobs } from "../../mlperf/bert/knobs.ts";
import { parseStepLine } from "../../mlperf/bert/report.ts";
import { TrainerError, packingSummary, trainBert, type TrainResult } from "../../mlperf/bert/train.ts";
import { TINY, skewedCorpus } from "./tiny_data.ts";
import { assertClose } from "../close.ts";

// rows of 32 tokens: the skewed corpus's samples (4 to 18 tokens) pack two or three a row
const PACKABLE: DemoSettings = {
  ...TINY,
  preprocess: { ...TINY.preprocess, maxSeqLength: 32, maxPredictionsPerSeq: 5 },
};

async function withRun<T>(fn: (run: Runner) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-packing-"));
  try {
    const data = prepareDemoData(join(dir, "data"), PACKABLE, skewedCorpus(30));
    const base = {
      ...demoEnvironment(dir, data, PACKABLE, 7),
      DEVICE: "JS",
      BEAM: "0",
      RUNMLPERF: "1",
      LOGMLPERF: "0",
      TRAIN_STEPS: "5",
      EVAL_STEP_FREQ: "100",
      TARGET: "1",
      MAX_EVAL_STEPS: "1",
      EVAL_SET_SIZE: "32",
      PACKING: "3",
      PACKED_BS: "4",
    };
    return await fn(async (env, onStep = () => {}, splitStep = false) => {
      const steps: { step: number; samples: number; loss: string }[] = [];
      const lines: string[] = [];
      const result: TrainResult = await trainBert(parseKnobs([], { ...base, ...env })!, {
        splitStep,
        print: (line) => {
          lines.push(line);
          const step = parseStepLine(line);
          if (step === null) return;
          steps.push({ step: step.step, samples: step.samples, loss: step.loss.toFixed(5) });
          onStep(step.step);
        },
      });
      return { steps, lines, result, dir };
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
type Runner = (
  env: Record<string, string>,
  onStep?: (step: number) => void,
  splitStep?: boolean,
) => Promise<{
  steps: { step: number; samples: number; loss: string }[];
  lines: string[];
  result: TrainResult;
  dir: string;
}>;

test("packed steps count the samples they held, and a packed run resumes exactly", async () => {
  await withRun(async (run) => {
    const whole = await run({});
    assert.equal(whole.steps.length, 5);
    // each step's samples: one a row at least, PACKING at most; more than one a row on average
    let before = 0;
    for (const { step, samples } of whole.steps) {
      const held = samples - before;
      assert.ok(held >= 4 && held <= 12, `step ${step} held ${held} samples in 4 rows of at most 3`);
      before = samples;
    }
    assert.equal(whole.result.samplesTrained, before);
    assert.ok(before > 5 * 4 * 1.3, `${before} samples in 5 steps of 4 rows`);
    assert.ok(
      whole.lines.some((line) => line.startsWith("packing: ") && line.includes("samples a step on average")),
      "the run says what packing held",
    );
    assert.ok(whole.lines.some((line) => line.includes('HParam: "PACKING": 3')));

    const stopped = await run({ SAVE_CKPT_DIR: join(whole.dir, "stopped") }, (s) => s === 2 && process.emit("SIGINT"));
    assert.equal(stopped.result.stepsRun, 2);
    const checkpoint = join(whole.dir, "stopped", "step_0000002.safe");
    assert.ok(existsSync(checkpoint));
    const resumed = await run({ SAVE_CKPT_DIR: join(whole.dir, "resumed"), RESUME: checkpoint });
    assert.deepEqual(
      resumed.steps.map(({ step, samples, loss }) => [step, samples, loss]),
      whole.steps.slice(2).map(({ step, samples, loss }) => [step, samples, loss]),
      "steps 3-5 resumed: the same samples and losses",
    );
    assert.ok(resumed.lines.some((line) => line.startsWith("replayed the packing of steps 1-2: ")));

    // an unpacked run does not take the packed run's checkpoint for its own
    await assert.rejects(
      run({ SAVE_CKPT_DIR: join(whole.dir, "unpacked"), RESUME: checkpoint, PACKING: "0" }),
      (error: Error) =>
        error instanceof TrainerError &&
        /packing: PACKING=3 PACKED_BS=4 in the checkpoint, off now/.test(error.message),
    );
  });
});

test("packed rows split over micro-batches and the data-parallel step train as the fused step does", async () => {
  await withRun(async (run) => {
    const losses = async (env: Record<string, string>, splitStep = false) =>
      (await run(env, () => {}, splitStep)).steps.map((s) => s.loss);
    const fused = await losses({});
    // the whole step's weights and samples divide every micro-batch's sums: float32 rounding apart
    const micro = await losses({ GRADIENT_ACC_STEPS: "2" });
    const split = await losses({}, true);
    for (const [what, other] of [
      ["GRADIENT_ACC_STEPS=2", micro],
      ["the data-parallel step", split],
    ] as const)
      assertClose(other.map(Number), fused.map(Number), { atol: 2e-4, rtol: 0, what: `losses with ${what}` });
  });
});

test("packed rows must split over ranks, micro-batches and devices", () => {
  const knobs = (env: Record<string, string>) => parseKnobs([], { DEVICE: "JS", PACKING: "3", ...env })!;
  assert.throws(
    () => validateKnobs(knobs({ BS: "8", PACKED_BS: "3" }), { rank: 0, size: 2 }),
    /over the job's 2 ranks/,
  );
  assert.throws(
    () => validateKnobs(knobs({ BS: "8", PACKED_BS: "6", GRADIENT_ACC_STEPS: "4" })),
    /6 packed rows are not a multiple of GRADIENT_ACC_STEPS=4/,
  );
  assert.throws(() => validateKnobs(knobs({ BS: "8", PACKED_BS: "3", GPUS: "2" })), /does not split over GPUS=2/);
  assert.throws(() => validateKnobs(knobs({ PACKING: "-1" })), KnobError);
  validateKnobs(knobs({ BS: "8", PACKED_BS: "4", GRADIENT_ACC_STEPS: "2" }), { rank: 0, size: 2 });
  assert.equal(knobs({ BS: "66" }).PACKED_BS, 33, "BS/2 rows by default");
  assert.equal(knobs({ BS: "66", PACKING: "0" }).PACKED_BS, 66);
});

test("the packing summary says which PACKED_BS would hold BS samples", () => {
  const k = parseKnobs([], { DEVICE: "JS", BS: "66", PACKING: "3", PACKED_BS: "33" })!;
  assert.equal(packingSummary(k, 660, 10), "packing: 66.0 samples a step on average (2.00 a row of 33 rows), BS=66");
  assert.match(packingSummary(k, 330 * 3, 10), /99\.0 samples a step .*: PACKED_BS=22 would hold about BS samples/);
});
