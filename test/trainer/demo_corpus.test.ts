// The demo's generated corpus and the BASEDIR the demo builds from it with the real pipeline.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEMO_CORPUS_DEFAULTS, DEMO_SPECIAL_TOKENS, generateDemoCorpus } from "../../mlperf/bert/demo_corpus.ts";
import { DEMO_SETTINGS, prepareDemoData } from "../../mlperf/bert/demo.ts";
import { evalShardPath, trainShardPath, vocabPath } from "../../mlperf/bert/data/basedir.ts";
import { readShard } from "../../mlperf/bert/data/shard.ts";
import { BertTokenizer, parseVocab } from "../../mlperf/bert/data/tokenizer.ts";

const SMALL = { ...DEMO_CORPUS_DEFAULTS, topics: 6, trainDocuments: 40, evalDocuments: 10 };

test("the corpus is a function of its options: same options, same bytes; another seed, other text", () => {
  assert.deepEqual(generateDemoCorpus(SMALL), generateDemoCorpus(SMALL));
  assert.notEqual(generateDemoCorpus({ ...SMALL, seed: 1 }).trainText, generateDemoCorpus(SMALL).trainText);
});

test("every word of the corpus is one token of its vocab, after the special tokens", () => {
  const corpus = generateDemoCorpus(SMALL);
  const vocab = parseVocab(corpus.vocabText, "demo vocab");
  assert.deepEqual(vocab.tokens.slice(0, DEMO_SPECIAL_TOKENS.length), [...DEMO_SPECIAL_TOKENS]);
  const tokenizer = new BertTokenizer(vocab);
  const words = corpus.trainText.split(/\s+/).filter((w) => w !== "");
  const ids: number[] = [];
  tokenizer.tokenizeToIds(words.join(" "), ids);
  assert.equal(ids.length, words.length);
  assert.deepEqual(
    ids.map((id) => vocab.tokens[id]),
    words,
  );
});

test("each topic's cycle is its theme word but for evenly spaced accent words, no word shared between topics", () => {
  const { cycles } = generateDemoCorpus(SMALL);
  assert.equal(cycles.length, SMALL.topics);
  const owners = new Map<string, number>();
  cycles.forEach((cycle, topic) => {
    assert.equal(cycle.length, SMALL.cycleLength);
    const counts = new Map<string, number>();
    for (const word of cycle) counts.set(word, (counts.get(word) ?? 0) + 1);
    assert.deepEqual(
      [...counts.values()].sort((a, b) => b - a),
      [SMALL.cycleLength - SMALL.accentsPerCycle, ...Array(SMALL.accentsPerCycle).fill(1)],
    );
    for (const word of counts.keys()) {
      assert.ok(!owners.has(word) || owners.get(word) === topic, `${word} in two topics`);
      owners.set(word, topic);
    }
  });
});

test("documents are sentences on lines with a blank line between, and the eval documents are new ones", () => {
  const corpus = generateDemoCorpus(SMALL);
  const documents = corpus.trainText.trimEnd().split("\n\n");
  assert.equal(documents.length, SMALL.trainDocuments);
  for (const doc of documents) assert.ok(doc.split("\n").every((line) => line.split(" ").length >= 4));
  assert.equal(corpus.evalText.trimEnd().split("\n\n").length, SMALL.evalDocuments);
  assert.ok(!corpus.trainText.startsWith(corpus.evalText.slice(0, 200)));
});

test("prepareDemoData writes BASEDIR's layout: vocab, bert_config.json, train shards and the eval shard", () => {
  const basedir = mkdtempSync(join(tmpdir(), "tsgrad-demo-data-"));
  try {
    const settings = { ...DEMO_SETTINGS, corpus: SMALL, trainParts: 2 };
    const data = prepareDemoData(basedir, settings);
    assert.ok(existsSync(vocabPath(basedir)));
    const config = JSON.parse(readFileSync(join(basedir, "bert_config.json"), "utf8")) as Record<string, number>;
    assert.equal(config.vocab_size, data.vocabSize);
    assert.equal(config.max_position_embeddings, settings.preprocess.maxSeqLength);
    let trainCount = 0;
    for (let part = 0; part < 2; part++) {
      const shard = readShard(trainShardPath(basedir, part));
      assert.equal(shard.maxSeqLength, settings.preprocess.maxSeqLength);
      assert.equal(shard.maxPredictionsPerSeq, settings.preprocess.maxPredictionsPerSeq);
      assert.ok(Math.max(...shard.input_ids) < data.vocabSize);
      trainCount += shard.count;
    }
    assert.equal(trainCount, data.trainSamples);
    assert.equal(readShard(evalShardPath(basedir)).count, data.evalSamples);
  } finally {
    rmSync(basedir, { recursive: true, force: true });
  }
});
