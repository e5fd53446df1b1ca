// Two runs, one folder (issue 35, item 3): checkpoints record their run's identity; RESUME refuses another run's
// checkpoint naming each field that differs (RESUME_ANY=1 resumes it anyway); pruning and saving never touch
// another run's files.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BERT_PRESETS } from "../../models/bert.ts";
import { demoEnvironment, prepareDemoData } from "../../mlperf/bert/demo.ts";
import { parseKnobs } from "../../mlperf/bert/knobs.ts";
import { identityDifferences, identityMetadata, runIdentity } from "../../mlperf/bert/run_identity.ts";
import { trainBert } from "../../mlperf/bert/train.ts";
import { TINY, skewedCorpus } from "./tiny_data.ts";

const dir = mkdtempSync(join(tmpdir(), "tsgrad-run-identity-"));
test.after(() => rmSync(dir, { recursive: true, force: true }));
const data = prepareDemoData(join(dir, "data"), TINY, skewedCorpus(30));

/** The run phase on the tiny data, checkpointing every 4 steps into `folder`; what it printed. */
async function run(folder: string, env: Record<string, string>): Promise<string> {
  const lines: string[] = [];
  const knobs = parseKnobs([], {
    ...demoEnvironment(dir, data, TINY, 3),
    DEVICE: "JS",
    BEAM: "0",
    RUNMLPERF: "1",
    LOGMLPERF: "0",
    CKPT: "1",
    TARGET: "1",
    EVAL_STEP_FREQ: "100",
    SAVE_CKPT_DIR: folder,
    ...env,
  })!;
  await trainBert(knobs, { print: (line) => lines.push(line) });
  return lines.join("\n");
}

const contents = (folder: string) =>
  Object.fromEntries(
    readdirSync(folder)
      .sort()
      .map((name) => [name, readFileSync(join(folder, name)).toString("base64")]),
  );

test("a second run in the folder neither replaces nor prunes the first run's checkpoints", async () => {
  const folder = join(dir, "shared");
  await run(folder, { SEED: "3", TRAIN_STEPS: "8" });
  const first = contents(folder);
  assert.deepEqual(Object.keys(first), ["step_0000004.safe", "step_0000008.safe"]);
  const printed = await run(folder, { SEED: "4", TRAIN_STEPS: "12" });
  assert.match(printed, /step_0000004\.safe is another run's checkpoint: left as it is/);
  const after = contents(folder);
  for (const [name, bytes] of Object.entries(first)) assert.equal(after[name], bytes, `${name} is untouched`);
  // the second run keeps its own newest 2 (KEEP_CKPT_AMOUNT), under names beside the first run's
  const second = Object.keys(after).filter((name) => !(name in first));
  assert.deepEqual(
    second.map((name) => name.replace(/-[0-9a-f]+\./, "-ID.")),
    ["step_0000008-ID.safe", "step_0000012.safe"],
  );
});

test("RESUME refuses another run's checkpoint, naming each field that differs; RESUME_ANY=1 resumes it", async () => {
  const folder = join(dir, "refuse");
  await run(folder, { SEED: "3", TRAIN_STEPS: "4" });
  const checkpoint = join(folder, "step_0000004.safe");
  await assert.rejects(run(join(dir, "other"), { SEED: "5", BS: "16", TRAIN_STEPS: "6", RESUME: checkpoint }), {
    name: "TrainerError",
    message: new RegExp(
      `RESUME=${checkpoint} is another run's checkpoint: SEED: 3 in the checkpoint, 5 now; BS: 8 in the checkpoint, 16 now \\(RESUME_ANY=1`,
    ),
  });
  const printed = await run(join(dir, "any"), { SEED: "5", TRAIN_STEPS: "6", RESUME: checkpoint, RESUME_ANY: "1" });
  assert.match(printed, /RESUME_ANY=1: resuming another run's checkpoint: SEED: 3 in the checkpoint, 5 now/);
  assert.match(printed, /^step 5 /m);
  // the same run continues without a word
  const same = await run(join(dir, "same"), { SEED: "3", TRAIN_STEPS: "6", RESUME: checkpoint });
  assert.doesNotMatch(same, /another run/);
});

test("the identity's differences name the model config's keys, the data and a missing identity", () => {
  const knobs = parseKnobs([], { DEVICE: "JS", BS: "8" })!;
  const before = runIdentity(knobs, BERT_PRESETS.tiny, []);
  const after = { ...before, model: JSON.stringify({ ...JSON.parse(before.model), hiddenSize: 1 }), data: "x" };
  assert.deepEqual(identityDifferences(identityMetadata(before), before), []);
  const differences = identityDifferences(identityMetadata(before), after);
  assert.equal(differences.length, 2);
  assert.match(differences[0]!, /^model: hiddenSize \d+ in the checkpoint, 1 now$/);
  assert.match(differences[1]!, /^data: 0 files, sha256 [0-9a-f]{16} in the checkpoint, x now$/);
  assert.match(identityDifferences({ step: "4" }, before)[0]!, /records no run identity/);
});
