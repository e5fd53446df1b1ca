// The char-level GPT example (examples/char_lm.ts) as a user runs it: it learns, it is causal, it samples.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { Tensor, TsgradError, dtypes, nn } from "../../src/index.ts";
import { CharLm, CharVocab, loadCharLm, sample, saveCharLm, train } from "../../examples/char_lm.ts";
import { scratchDir } from "../scratch.ts";

test("the vocabulary round-trips a text and names a character it does not hold", () => {
  const vocab = new CharVocab("hello, world");
  assert.equal(vocab.size, 9);
  assert.equal(vocab.decode(vocab.encode("world, hello")), "world, hello");
  assert.throws(
    () => vocab.encode("hi!"),
    (e: Error) => e instanceof TsgradError && e.message.includes('"i"'),
  );
});

test("a position's logits do not depend on later characters (the attention is causal)", () => {
  Tensor.manualSeed(3);
  const model = new CharLm({ vocab: 5, context: 8, dim: 16, heads: 2, layers: 2 });
  const logits = (ids: number[]) =>
    Array.from(
      model
        .forward(new Tensor(Int32Array.from(ids), { dtype: dtypes.int32 }).reshape([1, 8]))
        .toArray() as Float32Array,
    );
  const a = logits([0, 1, 2, 3, 4, 0, 1, 2]),
    b = logits([0, 1, 2, 3, 4, 0, 1, 4]);
  assert.deepEqual(a.slice(0, 7 * 5), b.slice(0, 7 * 5), "positions 0-6 changed with position 7");
  assert.notDeepEqual(a.slice(7 * 5), b.slice(7 * 5), "the last position ignores its own character");
});

test("trained on a periodic text, the loss falls and samples continue the period", () => {
  Tensor.manualSeed(1);
  const text = "abcdefgh".repeat(40);
  const vocab = new CharVocab(text);
  const model = new CharLm({ vocab: vocab.size, context: 16, dim: 32, heads: 2, layers: 1 });
  const losses = train(model, vocab.encode(text), { steps: 60, batch: 8, lr: 1e-2, seed: 1 });
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  assert.ok(losses[0]! > 1.5, `first loss ${losses[0]}: about ln 8 for an untrained model`);
  assert.ok(mean(losses.slice(-5)) < 0.1, `last losses ${losses.slice(-5).map((l) => l.toFixed(3))}`);
  assert.equal(sample(model, vocab, "cde", 12, { temperature: 0.2, seed: 4 }), "cdefghabcdefgha");
});

test("a saved model loads back with its configuration and vocabulary: the same logits; a file without them is refused by name", () => {
  Tensor.manualSeed(2);
  const text = "the cat sat on the mat. ".repeat(10);
  const vocab = new CharVocab(text);
  const model = new CharLm({ vocab: vocab.size, context: 8, dim: 16, heads: 2, layers: 1 });
  train(model, vocab.encode(text), { steps: 3, batch: 4, lr: 1e-2, seed: 1 });
  const dir = scratchDir("char-lm");
  const path = join(dir, "lm.safe");
  saveCharLm(path, model, vocab);
  const loaded = loadCharLm(path);
  assert.deepEqual(loaded.vocab.chars, vocab.chars);
  assert.deepEqual(loaded.model.config, model.config);
  const ids = new Tensor(vocab.encode("the mat."), { dtype: dtypes.int32 }).reshape([1, 8]);
  assert.deepEqual(
    Array.from(loaded.model.forward(ids).toArray() as Float32Array),
    Array.from(model.forward(ids).toArray() as Float32Array),
  );
  const bare = join(dir, "bare.safe");
  nn.safeSave(nn.getStateDict(model), bare);
  assert.throws(
    () => loadCharLm(bare),
    (e: Error) =>
      e instanceof TsgradError && e.message.includes(bare) && e.message.includes("not a model saved by char_lm"),
  );
});
