// A folder of one's own text to shards and a manifest: the same samples as the single-file path (which the
// parity tests hold to the references), an eval set that is never repeated, and errors that name the file.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readManifest } from "../../mlperf/bert/data/manifest.ts";
import {
  DEFAULT_SETTINGS,
  orderedSamplesFromFile,
  type PreprocessSettings,
  writeSamplesShard,
} from "../../mlperf/bert/data/preprocess.ts";
import { readShard } from "../../mlperf/bert/data/shard.ts";
import { listTextFiles, preprocessTextFolder, type TextFolderOptions } from "../../mlperf/bert/data/text_corpus.ts";
import { BertTokenizer, loadVocab } from "../../mlperf/bert/data/tokenizer.ts";
import { scratchDir } from "../scratch.ts";

const FIXTURES = new URL("../fixtures/bert-preprocess/", import.meta.url).pathname;
const VOCAB = join(FIXTURES, "vocab.txt");
const INPUT = join(FIXTURES, "input.txt");
const SETTINGS: PreprocessSettings = {
  ...DEFAULT_SETTINGS,
  maxSeqLength: 128,
  maxPredictionsPerSeq: 20,
  dupeFactor: 2,
};
const quiet = () => {};

/** The fixture's text cut at blank lines into `count` files (a.txt, b.txt, ...): the same documents, in order. */
function corpusFolder(count: number): string {
  const folder = scratchDir("corpus-");
  const documents = readFileSync(INPUT, "utf8").split("\n\n");
  const perFile = Math.ceil(documents.length / count);
  for (let f = 0; f < count; f++) {
    const text = documents.slice(f * perFile, (f + 1) * perFile).join("\n\n");
    writeFileSync(join(folder, `${String.fromCharCode(97 + f)}.txt`), text.endsWith("\n") ? text : `${text}\n`);
  }
  return folder;
}

function preprocess(input: string, options: Partial<TextFolderOptions> = {}) {
  const output = scratchDir("data-");
  const manifest = preprocessTextFolder({
    input,
    vocab: VOCAB,
    output,
    settings: SETTINGS,
    onProgress: quiet,
    ...options,
  });
  return { output, manifest };
}

test("text files are listed in sorted order, subfolders included, hidden and other files left out", () => {
  const folder = scratchDir("corpus-");
  mkdirSync(join(folder, "sub"));
  for (const name of ["b.txt", "a.txt", "sub/c.txt", ".hidden.txt", "notes.md"])
    writeFileSync(join(folder, name), "x\n");
  assert.deepEqual(
    listTextFiles(folder).map((file) => file.path),
    ["a.txt", "b.txt", "sub/c.txt"].map((name) => join(folder, name)),
  );
});

test("one part without eval from several files makes the single-file path's samples, byte for byte", () => {
  const { output, manifest } = preprocess(corpusFolder(4), { parts: 1, evalSamples: 0 });
  const expected = join(scratchDir("expected-"), "expected.safetensors");
  const tokenizer = new BertTokenizer(loadVocab(VOCAB));
  writeSamplesShard(
    expected,
    orderedSamplesFromFile(INPUT, tokenizer, SETTINGS),
    SETTINGS,
    tokenizer.vocab.tokens.length,
  );
  assert.equal(manifest.train.length, 1);
  assert.equal(manifest.eval, null);
  assert.ok(readFileSync(join(output, manifest.train[0]!.file)).equals(readFileSync(expected)));
});

test("a tiny corpus makes train shards, an eval shard and a manifest that reads back equal", () => {
  const input = corpusFolder(4);
  const { output, manifest } = preprocess(input, { parts: 2, evalSamples: 10 });
  assert.deepEqual(readManifest(output), manifest);
  assert.equal(manifest.train.length, 2);
  assert.deepEqual(manifest.eval, { file: "eval/eval.safetensors", samples: 10 });
  for (const shard of [...manifest.train, manifest.eval!])
    assert.equal(readShard(join(output, shard.file)).count, shard.samples, shard.file);
  assert.deepEqual(manifest.source, {
    kind: "text-folder",
    files: 4,
    bytes: listTextFiles(input).reduce((sum, file) => sum + file.bytes, 0),
  });
  assert.equal(manifest.settings.vocabSize, 30522);
  assert.match(manifest.settings.vocabSha256, /^[0-9a-f]{64}$/);
  assert.deepEqual(readdirSync(join(output, "train")), ["part-00000.safetensors", "part-00001.safetensors"]);
  assert.deepEqual(readdirSync(output).sort(), ["eval", "manifest.json", "train"], "no temp file left");
});

test("asking more eval samples than the corpus gives keeps each one it makes, once, and records the real count", () => {
  const { output, manifest } = preprocess(corpusFolder(4), { evalSamples: 1_000_000 });
  const evalShard = readShard(join(output, manifest.eval!.file));
  assert.ok(manifest.eval!.samples < 1_000_000);
  assert.equal(evalShard.count, manifest.eval!.samples);
  const rows = new Set<string>();
  for (let i = 0; i < evalShard.count; i++) {
    const width = SETTINGS.maxSeqLength;
    rows.add(evalShard.input_ids.subarray(i * width, (i + 1) * width).join(","));
  }
  assert.equal(rows.size, evalShard.count, "no sample repeated");
});

test("a rerun with fewer parts replaces the manifest and removes the shards it no longer makes", () => {
  const input = corpusFolder(4);
  const { output } = preprocess(input, { parts: 3, evalSamples: 0 });
  const manifest = preprocessTextFolder({
    input,
    vocab: VOCAB,
    output,
    settings: SETTINGS,
    parts: 1,
    evalSamples: 0,
    onProgress: quiet,
  });
  assert.deepEqual(readManifest(output), manifest);
  assert.deepEqual(readdirSync(join(output, "train")), ["part-00000.safetensors"]);
});

test("progress is told of the bytes read and the shards written", () => {
  const seen: number[] = [];
  const { manifest } = preprocess(corpusFolder(2), {
    parts: 1,
    evalSamples: 0,
    onProgress: ({ bytesRead, bytes, shardsWritten }) => {
      assert.ok(bytesRead <= bytes);
      seen.push(shardsWritten);
    },
  });
  assert.equal(seen.at(-1), manifest.train.length);
});

test("a missing folder, one without .txt files and one of empty files are errors naming the folder", () => {
  const empty = scratchDir("corpus-");
  assert.throws(() => preprocess(join(empty, "nope")), {
    name: "PreprocessError",
    message: /text folder .*nope does not exist/,
  });
  writeFileSync(join(empty, "notes.md"), "text\n");
  assert.throws(() => preprocess(empty), { name: "PreprocessError", message: `no .txt files in ${empty}` });
  writeFileSync(join(empty, "a.txt"), "");
  assert.throws(() => preprocess(empty), {
    name: "PreprocessError",
    message: `the 1 .txt file(s) in ${empty} are all empty`,
  });
});

test("a file that is not UTF-8 is an error naming it and the offset of the bad byte", () => {
  const folder = corpusFolder(2);
  writeFileSync(
    join(folder, "c.txt"),
    Buffer.concat([Buffer.from("good line\n\nbad "), Buffer.from([0xff]), Buffer.from("\n")]),
  );
  assert.throws(() => preprocess(folder), {
    name: "PreprocessError",
    message: `input file ${join(folder, "c.txt")} is not valid UTF-8 (first bad byte at offset 15)`,
  });
});

test("a corpus without a single token is an error naming the folder", () => {
  const folder = scratchDir("corpus-");
  writeFileSync(join(folder, "blank.txt"), "\n\u200b\n \n");
  assert.throws(() => preprocess(folder, { evalSamples: 0 }), {
    name: "PreprocessError",
    message: `the .txt files in ${folder} have no documents (no line gives a token)`,
  });
});

test("bad counts are refused, naming the option", () => {
  const folder = corpusFolder(1);
  assert.throws(() => preprocess(folder, { parts: 0 }), /parts must be an integer >= 1, got 0/);
  assert.throws(() => preprocess(folder, { evalSamples: 1.5 }), /evalSamples must be an integer >= 0, got 1.5/);
});
