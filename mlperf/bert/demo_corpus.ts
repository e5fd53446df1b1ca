// The demo's corpus: made-up text the project generates itself (nothing downloaded, ours to
// ship), shaped like results4 (one sentence a line, a blank line between documents), with a
// matching WordPiece vocab in which every word is one token.
//
// The language is built so that a small BERT learns masked-LM well past 0.72 in minutes:
// each document has a topic, each topic a cycle of words, and each sentence walks that cycle
// from a random start. A masked word is the successor of its left neighbour and the
// predecessor of its right one, and the other words give away the topic; sentences from a
// random document (NSP's "random next") come from another topic.
import { PyRandom } from "./data/pyrandom.ts";

export interface DemoCorpusOptions {
  /** Seeds the whole corpus: the same options give the same bytes. */
  seed: number;
  /** Topics, each with its own words. */
  topics: number;
  /** Words in each topic's cycle. */
  cycleLength: number;
  trainDocuments: number;
  evalDocuments: number;
}

export const DEMO_CORPUS_DEFAULTS: Readonly<DemoCorpusOptions> = {
  seed: 2024,
  topics: 24,
  cycleLength: 6,
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
  /** `words[topic][k]`: the k-th word of a topic's cycle. */
  words: string[][];
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
  if (count > syllables.length ** 2) throw new RangeError(`demo corpus: ${count} words asked, at most ${syllables.length ** 2} exist`);
  const words = new Set<string>();
  while (words.size < count) words.add(syllables[rng.randbelow(syllables.length)]! + syllables[rng.randbelow(syllables.length)]!);
  return [...words];
}

function makeDocument(rng: PyRandom, words: string[][]): string {
  const cycle = words[rng.randbelow(words.length)]!;
  const sentences: string[] = [];
  const sentenceCount = rng.randint(...SENTENCES_PER_DOCUMENT);
  for (let s = 0; s < sentenceCount; s++) {
    const start = rng.randbelow(cycle.length);
    const length = rng.randint(...WORDS_PER_SENTENCE);
    sentences.push(Array.from({ length }, (_, i) => cycle[(start + i) % cycle.length]).join(" "));
  }
  return sentences.join("\n") + "\n";
}

/** The corpus and vocab for `options`; deterministic. */
export function generateDemoCorpus(options: DemoCorpusOptions = DEMO_CORPUS_DEFAULTS): DemoCorpus {
  for (const [name, value] of Object.entries(options)) {
    if (!Number.isInteger(value) || value < 1) throw new RangeError(`demo corpus: ${name} must be a positive integer, got ${value}`);
  }
  const rng = new PyRandom(options.seed);
  const flat = makeWords(options.topics * options.cycleLength, rng);
  const words = Array.from({ length: options.topics }, (_, t) => flat.slice(t * options.cycleLength, (t + 1) * options.cycleLength));
  const documents = (count: number) => Array.from({ length: count }, () => makeDocument(rng, words)).join("\n");
  const trainText = documents(options.trainDocuments);
  const evalText = documents(options.evalDocuments);
  const vocabText = [...DEMO_SPECIAL_TOKENS, ...flat].join("\n") + "\n";
  return { trainText, evalText, vocabText, words };
}
