// The demo's corpus: made-up text the project generates itself (nothing downloaded, ours to
// ship), shaped like results4 (one sentence a line, a blank line between documents), with a
// matching WordPiece vocab in which every word is one token.
//
// The language is built so that a small BERT learns masked-LM past 0.72 in minutes: each
// document has a topic, each topic a cycle of words, and each sentence walks that cycle from a
// random start. The cycle is mostly the topic's theme word, with a few accent words between:
// the other words of a sample give away the topic, and the topic alone predicts about 80% of
// masked words (what a small model learns first); an accent word is predictable only from its
// neighbours (what it learns next). Sentences from a random document (NSP's "random next")
// come from another topic.
import { PyRandom } from "./data/pyrandom.ts";

export interface DemoCorpusOptions {
  /** Seeds the whole corpus: the same options give the same bytes. */
  seed: number;
  /** Topics, each with its own words. */
  topics: number;
  /** Positions in each topic's cycle. */
  cycleLength: number;
  /** Accent words in each cycle (distinct, evenly spaced); the theme word fills the other positions. */
  accentsPerCycle: number;
  trainDocuments: number;
  evalDocuments: number;
}

export const DEMO_CORPUS_DEFAULTS: Readonly<DemoCorpusOptions> = {
  seed: 2024,
  topics: 24,
  cycleLength: 10,
  accentsPerCycle: 2,
  trainDocuments: 3000,
  evalDocuments: 300,
};

export interface DemoCorpus {
  /** results4-style text of the training documents. */
  trainText: string;
  /** results4-style text of the eval documents (drawn after the training ones, so different). */
  evalText: string;
  /** vocab.txt content: the specials, then every word, one a line. */
  vocabText: string;
  /** `cycles[topic][k]`: the word at position k of a topic's cycle. */
  cycles: string[][];
}

/** The tokens create_pretraining_data.py and the tokenizer look up by name. */
export const DEMO_SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] as const;

const CONSONANTS = "bdfgklmnprstvz";
const VOWELS = "aeiou";
const SENTENCES_PER_DOCUMENT: [number, number] = [4, 10];
const WORDS_PER_SENTENCE: [number, number] = [4, 8];

/** `count` distinct two-syllable words ("kelo", "vani", ...), in a seeded order. */
function makeWords(count: number, rng: PyRandom): string[] {
  const syllables = [...CONSONANTS].flatMap((c) => [...VOWELS].map((v) => c + v));
  if (count > syllables.length ** 2)
    throw new RangeError(`demo corpus: ${count} words asked, at most ${syllables.length ** 2} exist`);
  const words = new Set<string>();
  while (words.size < count)
    words.add(syllables[rng.randbelow(syllables.length)]! + syllables[rng.randbelow(syllables.length)]!);
  return [...words];
}

/** The theme word everywhere but at `accents.length` evenly spaced positions. */
function makeCycle(theme: string, accents: string[], length: number): string[] {
  const cycle = Array<string>(length).fill(theme);
  accents.forEach((accent, i) => (cycle[Math.floor(((i + 1) * length) / (accents.length + 1))] = accent));
  return cycle;
}

function makeDocument(rng: PyRandom, cycles: string[][]): string {
  const cycle = cycles[rng.randbelow(cycles.length)]!;
  const sentences: string[] = [];
  const sentenceCount = rng.randint(...SENTENCES_PER_DOCUMENT);
  for (let s = 0; s < sentenceCount; s++) {
    const start = rng.randbelow(cycle.length);
    const length = rng.randint(...WORDS_PER_SENTENCE);
    sentences.push(Array.from({ length }, (_, i) => cycle[(start + i) % cycle.length]).join(" "));
  }
  return `${sentences.join("\n")}\n`;
}

/** The corpus and vocab for `options`; deterministic. */
export function generateDemoCorpus(options: DemoCorpusOptions = DEMO_CORPUS_DEFAULTS): DemoCorpus {
  for (const [name, value] of Object.entries(options)) {
    if (!Number.isInteger(value) || value < (name === "accentsPerCycle" ? 0 : 1))
      throw new RangeError(`demo corpus: ${name} must be a positive integer, got ${value}`);
  }
  if (options.accentsPerCycle >= options.cycleLength)
    throw new RangeError(
      `demo corpus: ${options.accentsPerCycle} accents do not fit a cycle of ${options.cycleLength}`,
    );
  const rng = new PyRandom(options.seed);
  const wordsPerTopic = 1 + options.accentsPerCycle;
  const flat = makeWords(options.topics * wordsPerTopic, rng);
  const cycles = Array.from({ length: options.topics }, (_, t) => {
    const [theme, ...accents] = flat.slice(t * wordsPerTopic, (t + 1) * wordsPerTopic);
    return makeCycle(theme!, accents, options.cycleLength);
  });
  const documents = (count: number) => Array.from({ length: count }, () => makeDocument(rng, cycles)).join("\n");
  const trainText = documents(options.trainDocuments);
  const evalText = documents(options.evalDocuments);
  const vocabText = `${[...DEMO_SPECIAL_TOKENS, ...flat].join("\n")}\n`;
  return { trainText, evalText, vocabText, cycles };
}
