// Parity with the references' tokenizers on the golden fixtures, plus the Python behaviours
// the fixtures cannot show (expected values printed by MLCommons' tokenization.py under
// CPython 3.11.7, `FullTokenizer(vocab, do_lower_case=True).tokenize(text)`).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BertTokenizer, loadVocab, parseVocab, pythonStrip, VocabError } from "../../mlperf/bert/data/tokenizer.ts";
import { scratchDir } from "../scratch.ts";

const FIXTURES = new URL("../fixtures/bert-preprocess/", import.meta.url).pathname;
const tokenizer = new BertTokenizer(loadVocab(join(FIXTURES, "vocab.txt")));

interface TokenizedLine {
  line: number;
  text: string;
  tokens: string[];
  ids: number[];
}
const readTokenLines = (path: string): TokenizedLine[] =>
  readFileSync(path, "utf8")
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as TokenizedLine);

test("every line of input.txt tokenizes token-for-token and id-for-id as the references do", () => {
  const lines = readTokenLines(join(FIXTURES, "tokens.jsonl"));
  assert.equal(lines.length, 338);
  for (const { line, text, tokens, ids } of lines) {
    assert.deepEqual(tokenizer.tokenize(text), tokens, `line ${line}`);
    assert.deepEqual(tokenizer.tokenizeToIds(text), ids, `line ${line}`);
  }
});

test("the divergence input tokenizes as MLCommons does (private-use and unassigned characters stay)", () => {
  for (const { line, text, tokens } of readTokenLines(join(FIXTURES, "divergence/tokens.mlcommons.jsonl"))) {
    assert.deepEqual(tokenizer.tokenize(text), tokens, `line ${line}`);
  }
  assert.deepEqual(tokenizer.tokenize("ab\ue000cd"), ["[UNK]"]);
});

test("characters unassigned in Unicode 14 act as CPython 3.11 sees them, whatever Node's ICU says", () => {
  assert.deepEqual(tokenizer.tokenize("a\u1b4eb"), ["[UNK]"], "punctuation since Unicode 15: not split");
  assert.deepEqual(tokenizer.tokenize("hello\u{13439}"), ["[UNK]"], "a format character since 15: not deleted");
  assert.deepEqual(tokenizer.tokenize("cafe\u0897"), ["[UNK]"], "a nonspacing mark since 15: not dropped");
  assert.deepEqual(tokenizer.tokenize("\u1c89"), ["[UNK]"], "an uppercase letter since 16: not lower-cased");
});

test("lower-casing sees the whole word, so the final-sigma rule looks past punctuation", () => {
  assert.deepEqual(tokenizer.tokenize("OΔΟΣ'Α ΟΔΟΣ."), ["o", "##δ", "##ο", "##σ", "'", "α", "ο", "##δ", "##ος", "."]);
});

test("final sigma uses Unicode 14's case properties (U+1171E was a case-ignorable Mn, now Mc)", () => {
  assert.deepEqual(tokenizer.tokenize("ΑΣ\u{1171e}Α"), ["α", "##σ", "##α"]);
  assert.deepEqual(tokenizer.tokenize("ΑΣ\u{1171e}"), ["α", "##ς"]);
});

test("punctuation made by NFD is split off (U+1FEF decomposes to a backtick)", () => {
  assert.deepEqual(tokenizer.tokenize("α\u1fefβ"), ["α", "`", "β"]);
});

test("a word of 201 code points is [UNK], 200 is split into pieces", () => {
  assert.deepEqual(tokenizer.tokenize("x".repeat(201)), ["[UNK]"]);
  assert.deepEqual(tokenizer.tokenize("x".repeat(200)), ["xx", ...Array<string>(99).fill("##xx")]);
});

test("pythonStrip strips Python's whitespace, which is not JavaScript's", () => {
  assert.equal(pythonStrip("\x1c\x85 a b\u3000\u2028"), "a b");
  assert.equal(pythonStrip(" \ufeff "), "\ufeff");
});

test("convertTokensToIds maps tokens to ids and rejects a token the vocab lacks", () => {
  assert.deepEqual(tokenizer.convertTokensToIds(["[CLS]", "the", "##ing", "[SEP]"]), [101, 1996, 2075, 102]);
  assert.throws(
    () => tokenizer.convertTokensToIds(["no-such-token"]),
    (error: Error) => error instanceof VocabError && /no-such-token/.test(error.message),
  );
});

test("a missing vocab file is a VocabError naming the path", () => {
  const path = join(tmpdir(), "tsgrad-no-such-dir", "vocab.txt");
  assert.throws(
    () => loadVocab(path),
    (error: Error) =>
      error instanceof VocabError && error.message.includes(path) && /does not exist/.test(error.message),
  );
});

test("an empty vocab file, a repeated token and a vocab without [UNK] are VocabErrors", () => {
  const path = join(scratchDir("vocab-"), "vocab.txt");
  writeFileSync(path, "");
  assert.throws(
    () => loadVocab(path),
    (error: Error) => error instanceof VocabError && error.message.includes(path) && /empty/.test(error.message),
  );
  assert.throws(() => parseVocab("[PAD]\na\nb\na\n", "dup.txt"), /dup\.txt.*line 4 repeats line 2/);
  assert.throws(() => new BertTokenizer(parseVocab("[PAD]\na\n", "tiny.txt")), /tiny\.txt has no \[UNK\]/);
});
