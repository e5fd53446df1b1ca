// Checks the trainer makes of the shards before it runs a step (issue 35, item 2): the eval shard's data against
// its checksums, and every shard's recorded vocab_size against the model's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { demoEnvironment, prepareDemoData } from "../../mlperf/bert/demo.ts";
import { evalShardPath } from "../../mlperf/bert/data/basedir.ts";
import { parseKnobs } from "../../mlperf/bert/knobs.ts";
import { trainBert } from "../../mlperf/bert/train.ts";
import { TINY, skewedCorpus } from "./tiny_data.ts";

const dir = mkdtempSync(join(tmpdir(), "tsgrad-shard-checks-"));
test.after(() => rmSync(dir, { recursive: true, force: true }));
const data = prepareDemoData(join(dir, "data"), TINY, skewedCorpus(30));

/** A copy of the data folder to damage. */
function copyOfData(name: string): string {
  const basedir = join(dir, name);
  cpSync(data.basedir, basedir, { recursive: true });
  return basedir;
}

/** Runs the run phase on `basedir`, collecting what it prints; rejects as the trainer does. */
async function runOn(basedir: string, env: Record<string, string> = {}): Promise<string[]> {
  const lines: string[] = [];
  const knobs = parseKnobs([], {
    ...demoEnvironment(join(dir, "run"), { ...data, basedir }, TINY, 3),
    DEVICE: "JS",
    BEAM: "0",
    RUNMLPERF: "1",
    LOGMLPERF: "0",
    CKPT: "0",
    TRAIN_STEPS: "1",
    ...env,
  })!;
  await trainBert(knobs, { print: (line) => lines.push(line) });
  return lines;
}

test("a flipped byte in the eval shard stops the run before its first step, naming the file and tensor", async () => {
  const basedir = copyOfData("flipped-eval");
  const path = evalShardPath(basedir);
  const bytes = readFileSync(path);
  bytes[bytes.length - 1]! ^= 1; // a next_sentence_label: still a valid value, so only the checksum can tell
  writeFileSync(path, bytes);
  const lines: string[] = [];
  await assert.rejects(
    runOn(basedir).then((printed) => lines.push(...printed)),
    (error: Error) => {
      assert.match(error.message, /eval\.safetensors: tensor "next_sentence_labels", byte offset \d+: the CRC-32C/);
      return true;
    },
  );
  assert.deepEqual(lines, [], "nothing printed: the run stopped before it began");
});

test("shards made with another vocab than the model's are refused, naming both sizes and the file", async () => {
  const basedir = copyOfData("other-vocab");
  const config = join(basedir, "other_config.json");
  copyFileSync(join(basedir, "bert_config.json"), config);
  const json = JSON.parse(readFileSync(config, "utf8")) as { vocab_size: number };
  writeFileSync(config, JSON.stringify({ ...json, vocab_size: data.vocabSize + 1 }));
  await assert.rejects(runOn(basedir, { BERT_CONFIG: config }), (error: Error) => {
    assert.match(
      error.message,
      new RegExp(
        `part-00000-of-00500\\.safetensors: made with a vocab of ${data.vocabSize} tokens .* the model's vocab_size is ${data.vocabSize + 1} \\(.*other_config\\.json\\)`,
      ),
    );
    return true;
  });
});

test("the same shards and config train", async () => {
  const lines = await runOn(data.basedir);
  assert.ok(
    lines.some((line) => line.startsWith("step 1 ")),
    lines.join("\n"),
  );
});
