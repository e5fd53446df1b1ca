// docs/own-data.md, run: the walkthrough's `npx tsgrad` commands, as the page writes them, on a tiny corpus (the
// trainer tests' skewed text, a 7-token vocab), with smaller settings appended (a later flag wins) and the JS
// device: text folder -> shards and manifest -> trained model -> its accuracy -> the report.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { readManifest } from "../../mlperf/bert/data/manifest.ts";
import { skewedCorpus } from "../trainer/tiny_data.ts";

const BIN = fileURLToPath(new URL("../../bin/tsgrad.mjs", import.meta.url));
const PAGE = fileURLToPath(new URL("../../docs/own-data.md", import.meta.url));

/** The `npx tsgrad` lines of the page's sh blocks between its walkthrough markers. */
function walkthroughCommands(page: string): string[] {
  const start = page.indexOf("<!-- walkthrough:");
  const end = page.indexOf("<!-- walkthrough end -->");
  assert.ok(start >= 0 && end > start, "the page marks its walkthrough");
  const blocks = [...page.slice(start, end).matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
  return blocks.flatMap((block) => block.split("\n").filter((line) => line.startsWith("npx tsgrad ")));
}

/** What each subcommand gets appended in the test: a tiny run's settings. */
const TINY_OPTIONS: Record<string, string> = {
  preprocess: "--max-seq-length 16 --max-predictions-per-seq 3 --dupe-factor 2 --eval-samples 32",
  train:
    "--bs 8 --eval-bs 16 --opt-base-learning-rate 0.05 --num-warmup-steps 2 --train-steps 12 --eval-step-freq 4 --target 0.7",
  eval: "--eval-bs 16",
  report: "",
};

test("the own-data walkthrough runs end to end: text to shards, a trained model, its accuracy, its report", {
  timeout: 180_000,
}, () => {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-own-data-"));
  try {
    const corpus = skewedCorpus(60);
    mkdirSync(join(dir, "my-text"));
    writeFileSync(join(dir, "my-text", "articles-1.txt"), corpus.trainText);
    writeFileSync(join(dir, "my-text", "articles-2.txt"), corpus.evalText);
    writeFileSync(join(dir, "vocab.txt"), corpus.vocabText);

    const commands = walkthroughCommands(readFileSync(PAGE, "utf8"));
    assert.deepEqual(
      commands.map((line) => line.split(" ")[2]),
      ["preprocess", "train", "eval", "report"],
    );
    const outputs: string[] = [];
    for (const line of commands) {
      const subcommand = line.split(" ")[2]!;
      const command = `${line.replace(/^npx tsgrad/, `"${process.execPath}" "${BIN}"`)} ${TINY_OPTIONS[subcommand]}`;
      const run = spawnSync("bash", ["-c", command], {
        cwd: dir,
        encoding: "utf8",
        env: { ...process.env, DEVICE: "JS", BEAM: "0" },
        timeout: 120_000,
      });
      assert.equal(run.status, 0, `${line}\n${run.stdout}\n${run.stderr}`);
      outputs.push(run.stdout);
    }

    const manifest = readManifest(join(dir, "my-data"));
    assert.equal(manifest.settings.maxSeqLength, 16);
    const evalSamples = manifest.eval?.samples ?? 0;
    assert.ok(
      evalSamples > 0 && evalSamples <= 32,
      `${evalSamples} eval samples: all the text gave, at most those asked`,
    );
    const [, trained, evaluated] = outputs;
    assert.match(trained!, /^model size: tiny, sized to \d+ train samples \(under 100,000\)/m);
    assert.match(trained!, /^result: {6}masked-LM accuracy ([\d.]+) at step \d+ .*: target 0.7 reached/m);
    assert.ok(existsSync(join(dir, "my-run", "ckpts", "bert_final.safe")));
    // eval of the saved model gives the accuracy of the run's last evaluation, on every eval sample once
    const lastEval = [...trained!.matchAll(/eval at step \d+: masked-LM accuracy ([\d.]+)/g)].at(-1)![1]!;
    const accuracy = new RegExp(
      `^masked-LM accuracy ([\\d.]+), loss [\\d.]+ on ${evalSamples} samples \\(trained \\d+ steps\\)$`,
      "m",
    ).exec(evaluated!);
    assert.ok(accuracy, evaluated);
    assert.equal(Number(accuracy[1]).toFixed(3), lastEval);
    assert.match(readFileSync(join(dir, "my-run", "report.html"), "utf8"), /<html/i);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
