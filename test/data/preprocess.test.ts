// Sample-for-sample parity with the references (MLCommons' create_pretraining_data.py and
// tinygrad's wikipedia.py, byte-identical on these inputs) on the golden fixtures.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import {
  DEFAULT_SETTINGS,
  evalPickRows,
  makeShards,
  orderedSamplesFromFile,
  parseCommandLine,
  PreprocessError,
  readDocuments,
  roundHalfEven,
  samplesFromFile,
  samplesFromText,
  shardSettings,
  toSampleColumns,
  writeSamplesShard,
  type PreprocessSettings,
} from "../../mlperf/bert/data/preprocess.ts";
import { basedirFromEnv, defaultBasedir, trainInputPath, trainShardPath } from "../../mlperf/bert/data/basedir.ts";
import { SAMPLE_FIELDS, type SampleColumns } from "../../mlperf/bert/data/samples.ts";
import { readShard, writeShard } from "../../mlperf/bert/data/shard.ts";
import { BertTokenizer, loadVocab } from "../../mlperf/bert/data/tokenizer.ts";
import { scratchDir } from "../scratch.ts";

const FIXTURES = new URL("../fixtures/bert-preprocess/", import.meta.url).pathname;
const VOCAB = join(FIXTURES, "vocab.txt");
const INPUT = join(FIXTURES, "input.txt");
const tokenizer = new BertTokenizer(loadVocab(VOCAB));
const settings = (maxSeqLength: number, maxPredictionsPerSeq: number, dupeFactor: number): PreprocessSettings => ({
  ...DEFAULT_SETTINGS,
  maxSeqLength,
  maxPredictionsPerSeq,
  dupeFactor,
});

/** Sample i of `columns` as the fixtures write it (one flat row per field). */
function sampleRow(columns: SampleColumns, i: number): Record<string, number[]> {
  const row: Record<string, number[]> = {};
  for (const field of SAMPLE_FIELDS) {
    const width = columns[field].length / columns.count;
    row[field] = Array.from(columns[field].subarray(i * width, (i + 1) * width));
  }
  return row;
}

function assertSamplesMatch(columns: SampleColumns, fixture: string): void {
  const expected = readFileSync(join(FIXTURES, fixture), "utf8")
    .split("\n")
    .filter((line) => line.length > 0);
  assert.equal(columns.count, expected.length, "sample count");
  expected.forEach((line, i) => assert.deepEqual(sampleRow(columns, i), JSON.parse(line), `sample ${i}`));
}

test("seq128/pred20/dupe2 samples match the references sample for sample", () => {
  assertSamplesMatch(samplesFromFile(INPUT, tokenizer, settings(128, 20, 2)), "samples-seq128-pred20-dupe2.jsonl");
});

test("seq512/pred76/dupe1 (MLPerf lengths) samples match the references sample for sample", () => {
  assertSamplesMatch(samplesFromFile(INPUT, tokenizer, settings(512, 76, 1)), "samples-seq512-pred76-dupe1.jsonl");
});

test("on the divergence input, samples follow MLCommons (lone CR glued, private-use kept)", () => {
  const columns = samplesFromFile(join(FIXTURES, "divergence/input.txt"), tokenizer, settings(128, 20, 2));
  assertSamplesMatch(columns, "divergence/samples-seq128-pred20-dupe2.mlcommons.jsonl");
});

test("reading deletes every CR, so \\r\\r\\n is no document break and a lone \\r joins words", () => {
  const documents = readDocuments("the cat\r\r\nsat\rdown\n\ndog\n", tokenizer);
  assert.deepEqual(Array.from(documents.documentStarts), [0, 2, 3]);
  const segment = (s: number) =>
    Array.from(documents.tokenIds.subarray(documents.segmentStarts[s]!, documents.segmentStarts[s + 1]!));
  assert.deepEqual(segment(1), tokenizer.tokenizeToIds("satdown"));
});

test("lines that Python's strip() empties end a document; U+FEFF and U+200B lines do not", () => {
  const documents = readDocuments("one\n\x1c\ntwo\n \ufeff \nthree\n\u200b\nfour\n", tokenizer);
  assert.deepEqual(Array.from(documents.documentStarts), [0, 1, 4]);
});

test("roundHalfEven rounds as Python's round(): 30 * 0.15 -> 4, 70 * 0.15 -> 10", () => {
  assert.equal(roundHalfEven(30 * 0.15), 4);
  assert.equal(roundHalfEven(70 * 0.15), 10);
  assert.equal(roundHalfEven(2.5), 2);
  assert.equal(roundHalfEven(3.5), 4);
  assert.equal(roundHalfEven(3.49), 3);
});

test("the eval pick takes sample int(i * (n / 10000)), repeating samples when n < 10000", () => {
  assert.deepEqual(Array.from(evalPickRows(10163).subarray(0, 4)), [0, 1, 2, 3]);
  assert.equal(evalPickRows(10163)[9999], Math.trunc(9999 * (10163 / 10000)));
  assert.deepEqual(Array.from(evalPickRows(3, 6)), [0, 0, 1, 1, 2, 2]);
});

// Made by both references (tools/run_reference.py mlcommons|tinygrad input.txt vocab.txt OUT
// --max-seq-length 32 --max-predictions-per-seq 5 --dupe-factor 45 --eval): 10,163 samples
// before the pick; the SHA-256 of their identical 10,000-line output (4,850,605 bytes).
const EVAL_REFERENCE_SHA256 = "8d8c2c198712ba9370ce2f4d3ed228419cd9885a889e37c8deba9b318d021774";

test("the eval set of 10,000 picked samples is byte-identical to the references' pre-eval output", () => {
  const columns = samplesFromFile(INPUT, tokenizer, settings(32, 5, 45), { evalPick: true });
  assert.equal(columns.count, 10_000);
  const hash = createHash("sha256");
  for (let i = 0; i < columns.count; i++) {
    const row = sampleRow(columns, i);
    // Python's json writes the float weights as 1.0 and 0.0.
    const weights = `[${row.masked_lm_weights!.map((weight) => weight.toFixed(1)).join(",")}]`;
    hash.update(`${JSON.stringify({ ...row, masked_lm_weights: "W" }).replace('"W"', weights)}\n`);
  }
  assert.equal(hash.digest("hex"), EVAL_REFERENCE_SHA256);
});

const tempDir = () => scratchDir("preprocess-");

test("an empty input file is a PreprocessError naming the file", () => {
  const path = join(tempDir(), "part-00000-of-00500");
  writeFileSync(path, "");
  assert.throws(
    () => samplesFromFile(path, tokenizer),
    (error: Error) => error instanceof PreprocessError && error.message.includes(path) && /empty/.test(error.message),
  );
});

test("input without a single token is a PreprocessError naming the source", () => {
  assert.throws(
    () => samplesFromText("\n\u200b\n\n", tokenizer, DEFAULT_SETTINGS, { source: "blank.txt" }),
    /blank\.txt has no documents/,
  );
});

test("a missing input file and invalid UTF-8 are PreprocessErrors naming the file (and byte offset)", () => {
  const dir = tempDir();
  assert.throws(() => samplesFromFile(join(dir, "nope.txt"), tokenizer), /nope\.txt: it does not exist/);
  const path = join(dir, "bad.txt");
  writeFileSync(path, Buffer.from([0x61, 0x62, 0xc3, 0xa9, 0x20, 0xe2, 0x82, 0x41]));
  assert.throws(() => samplesFromFile(path, tokenizer), /bad\.txt is not valid UTF-8 \(first bad byte at offset 5\)/);
});

test("settings come from the environment, flags override them, and --help is recognized", () => {
  const options = parseCommandLine(["pre-train", "7", "--dupe-factor", "3", "--masked-lm-prob=0.2"], {
    BASEDIR: "/data/wiki",
    DUPE_FACTOR: "5",
    MAX_SEQ_LENGTH: "128",
    NUM_WORKERS: "3",
  });
  assert.deepEqual(options, {
    command: { kind: "pre-train", parts: [7] },
    basedir: "/data/wiki",
    numWorkers: 3,
    settings: { ...DEFAULT_SETTINGS, maxSeqLength: 128, dupeFactor: 3, maskedLmProb: 0.2 },
  });
  assert.equal(parseCommandLine(["pre-eval", "--help"], {}), null);
  assert.deepEqual(parseCommandLine(["pre-train", "all"], {})?.command, {
    kind: "pre-train",
    parts: Array.from({ length: 500 }, (_, part) => part),
  });
});

test("bad commands and settings are PreprocessErrors naming the knob", () => {
  assert.throws(() => parseCommandLine(["pre-train", "500"], {}), /pre-train N/);
  assert.throws(
    () => parseCommandLine(["pre-train", "1", "--dupe-factor", "x"], {}),
    /--dupe-factor: expected a number/,
  );
  assert.throws(
    () => parseCommandLine(["pre-eval"], { MAX_SEQ_LENGTH: "4" }),
    /MAX_SEQ_LENGTH must be an integer >= 5/,
  );
  assert.throws(() => parseCommandLine(["pre-eval", "--workers", "2"], {}), /unknown option --workers/);
});

test("pre-train on two workers writes each part's shard, identical to the references, and skips done parts", async () => {
  const basedir = tempDir();
  mkdirSync(join(basedir, "results4"));
  copyFileSync(VOCAB, join(basedir, "vocab.txt"));
  for (const part of [0, 1]) copyFileSync(INPUT, trainInputPath(basedir, part));
  const options = {
    command: { kind: "pre-train" as const, parts: [0, 1] },
    basedir,
    numWorkers: 2,
    settings: settings(128, 20, 2),
  };
  await makeShards(options);
  for (const part of [0, 1])
    assertSamplesMatch(readShard(trainShardPath(basedir, part)), "samples-seq128-pred20-dupe2.jsonl");
  assert.deepEqual(readdirSync(join(basedir, "train")), [
    "part-00000-of-00500.safetensors",
    "part-00001-of-00500.safetensors",
  ]);

  const writtenAt = statSync(trainShardPath(basedir, 0)).mtimeMs;
  await makeShards(options);
  assert.equal(statSync(trainShardPath(basedir, 0)).mtimeMs, writtenAt);
});

test("a rerun with other settings refuses, naming each differing setting; a damaged shard is made again", async () => {
  const basedir = tempDir();
  mkdirSync(join(basedir, "results4"));
  copyFileSync(VOCAB, join(basedir, "vocab.txt"));
  copyFileSync(INPUT, trainInputPath(basedir, 0));
  const options = { command: { kind: "pre-train" as const, parts: [0] }, basedir, numWorkers: 1 };
  await makeShards({ ...options, settings: settings(128, 20, 1) });
  const made = readFileSync(trainShardPath(basedir, 0));
  await assert.rejects(makeShards({ ...options, settings: { ...settings(128, 20, 2), randomSeed: 7 } }), {
    name: "PreprocessError",
    message: `${trainShardPath(basedir, 0)} was made with RANDOM_SEED 12345 (now 7), DUPE_FACTOR 1 (now 2): remove it to make it again with these settings, or preprocess with the ones it was made with`,
  });
  assert.deepEqual(readFileSync(trainShardPath(basedir, 0)), made, "the shard is kept");

  writeFileSync(trainShardPath(basedir, 0), made.subarray(0, 100)); // a header cut short
  await makeShards({ ...options, settings: settings(128, 20, 1) });
  assert.deepEqual(readFileSync(trainShardPath(basedir, 0)), made, "made again, the same bytes");
});

test("a part that fails in a worker rejects with the file named and leaves no shard for it", async () => {
  const basedir = tempDir();
  mkdirSync(join(basedir, "results4"));
  copyFileSync(VOCAB, join(basedir, "vocab.txt"));
  copyFileSync(INPUT, trainInputPath(basedir, 0));
  writeFileSync(trainInputPath(basedir, 1), "");
  const options = {
    command: { kind: "pre-train" as const, parts: [0, 1] },
    basedir,
    numWorkers: 2,
    settings: settings(128, 20, 1),
  };
  await assert.rejects(
    makeShards(options),
    (error: Error) => error.message.includes(trainInputPath(basedir, 1)) && /empty/.test(error.message),
  );
  assert.ok(!readdirSync(join(basedir, "train")).includes("part-00001-of-00500.safetensors"));
});

test("a missing vocab stops the command before any work, naming the path", async () => {
  const basedir = tempDir();
  const options = { command: { kind: "pre-eval" as const }, basedir, numWorkers: 1, settings: DEFAULT_SETTINGS };
  await assert.rejects(
    makeShards(options),
    (error: Error) => error.message.includes(join(basedir, "vocab.txt")) && /does not exist/.test(error.message),
  );
});

test("pre-eval writes the picked 10,000 samples of eval.txt to eval/eval.safetensors", async () => {
  const basedir = tempDir();
  mkdirSync(join(basedir, "results4"));
  copyFileSync(VOCAB, join(basedir, "vocab.txt"));
  copyFileSync(INPUT, join(basedir, "results4", "eval.txt"));
  await makeShards({ command: { kind: "pre-eval" }, basedir, numWorkers: 1, settings: settings(128, 20, 2) });
  const written = readShard(join(basedir, "eval", "eval.safetensors"));
  assert.deepEqual(written, samplesFromFile(INPUT, tokenizer, settings(128, 20, 2), { evalPick: true }));
  assert.equal(written.count, 10_000);
});

test("BASEDIR wins, else $XDG_DATA_HOME/tsgrad/wiki, else ~/.local/share/tsgrad/wiki", () => {
  assert.equal(basedirFromEnv({ BASEDIR: "/data/wiki", XDG_DATA_HOME: "/xdg" }), "/data/wiki");
  assert.equal(basedirFromEnv({ XDG_DATA_HOME: "/xdg" }), "/xdg/tsgrad/wiki");
  assert.equal(defaultBasedir({}), join(homedir(), ".local", "share", "tsgrad", "wiki"));
});

test("a shard written straight from the made samples is the file their padded columns make, byte for byte", () => {
  const dir = tempDir();
  for (const evalPick of [false, true]) {
    const ordered = orderedSamplesFromFile(INPUT, tokenizer, settings(128, 20, 2), { evalPick });
    const vocabSize = tokenizer.vocab.tokens.length;
    writeSamplesShard(join(dir, "direct.safetensors"), ordered, settings(128, 20, 2), vocabSize);
    writeShard(
      join(dir, "columns.safetensors"),
      toSampleColumns(ordered.made, ordered.rows, settings(128, 20, 2)),
      shardSettings(settings(128, 20, 2), vocabSize),
    );
    assert.ok(
      readFileSync(join(dir, "direct.safetensors")).equals(readFileSync(join(dir, "columns.safetensors"))),
      `evalPick ${evalPick}`,
    );
  }
});
