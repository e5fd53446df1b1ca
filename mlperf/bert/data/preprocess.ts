// Masked-LM + next-sentence samples exactly as MLCommons' create_pretraining_data.py makes
// them (tinygrad's wikipedia.py draws the same): every random decision comes from a
// Python-identical `random.Random(RANDOM_SEED)`, one per input file, in the reference's order.
//
//   npx tsx mlperf/bert/data/preprocess.ts pre-train all|N|pre-eval   (see --help)
import { closeSync, existsSync, mkdirSync, openSync, readSync, statSync } from "node:fs";
import { availableParallelism, freemem } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import {
  basedirFromEnv,
  evalInputPath,
  evalShardPath,
  PART_COUNT,
  trainInputPath,
  trainShardPath,
  vocabPath,
} from "./basedir.ts";
import { io } from "../../../src/index.ts";
import { formatDuration } from "./byteProgress.ts";
import { PyRandom } from "./pyrandom.ts";
import type { SampleColumns } from "./samples.ts";
import { ShardError, type ShardSettings, fieldWidth, writeShardRows } from "./shard.ts";
import { BertTokenizer, loadVocab, pythonStrip, VocabError } from "./tokenizer.ts";
import { reportFailure } from "../exit_status.ts";

/** The reference's knobs (env vars MAX_SEQ_LENGTH, MAX_PREDICTIONS_PER_SEQ, ...). */
export interface PreprocessSettings {
  maxSeqLength: number;
  maxPredictionsPerSeq: number;
  randomSeed: number;
  dupeFactor: number;
  maskedLmProb: number;
  shortSeqProb: number;
}

/** MLPerf's values (tinygrad's defaults). */
export const DEFAULT_SETTINGS: Readonly<PreprocessSettings> = {
  maxSeqLength: 512,
  maxPredictionsPerSeq: 76,
  randomSeed: 12345,
  dupeFactor: 10,
  maskedLmProb: 0.15,
  shortSeqProb: 0.1,
};

/** Input or settings the reference could not turn into samples; names the file or knob. */
export class PreprocessError extends Error {
  override name = "PreprocessError";
}

/** The eval set's size (MLCommons' pick_eval_samples.py). */
export const EVAL_SAMPLE_COUNT = 10_000;

// ---------------------------------------------------------------------------------------
// Reading: documents of segments of token ids.

/** An int32 (uint16, uint8) array that grows by doubling, so building never copies per element. */
class Growable<T extends Int32Array | Uint16Array | Uint8Array = Int32Array> {
  data: T;
  length = 0;

  constructor(private readonly make: (length: number) => T = (length) => new Int32Array(length) as T) {
    this.data = make(1024);
  }

  push(value: number): void {
    if (this.length === this.data.length) this.reserve(1);
    this.data[this.length++] = value;
  }

  append(values: ArrayLike<number>): void {
    this.reserve(values.length);
    this.data.set(values, this.length);
    this.length += values.length;
  }

  reserve(extra: number): void {
    if (this.length + extra <= this.data.length) return;
    const grown = this.make(Math.max(this.data.length * 2, this.length + extra));
    grown.set(this.data.subarray(0, this.length));
    this.data = grown;
  }

  /** The filled part, as a view: no copy of what may be hundreds of megabytes. */
  filled(): T {
    return this.data.subarray(0, this.length) as T;
  }
}

/** Token ids, positions and predictions as 16-bit values: half the memory, and what a shard stores anyway. */
const uint16s = (length: number) => new Uint16Array(length);
const uint8s = (length: number) => new Uint8Array(length);

/** One input's documents: segment s of document d is `tokenIds[segmentStarts[s]..segmentStarts[s+1])`. */
export interface Documents {
  tokenIds: Uint16Array;
  /** [segments + 1] offsets into tokenIds. */
  segmentStarts: Int32Array;
  /** [documents + 1] offsets into segments. */
  documentStarts: Int32Array;
}

/** Refuses a vocab whose ids a shard (and a 16-bit token array) cannot hold. */
function checkVocabFits(tokenizer: BertTokenizer): void {
  const size = tokenizer.vocab.tokens.length;
  if (size > 0x10000)
    throw new PreprocessError(`vocab ${tokenizer.vocab.source} has ${size} tokens: shards hold token ids below 65536`);
}

/**
 * Builds documents a line at a time, as MLCommons reads results4 text: each line is stripped the Python way; an
 * empty one ends the document, any other one's tokens (when there are some) are one segment; documents without
 * segments are dropped. (Deleting every `\r` and cutting lines at `\n` is the caller's: `readDocuments`,
 * `readTextLines`.)
 */
export class DocumentReader {
  private readonly tokenIds = new Growable(uint16s);
  private readonly segmentStarts = new Growable();
  private readonly documentStarts = new Growable();
  private readonly lineIds: number[] = [];

  constructor(private readonly tokenizer: BertTokenizer) {
    checkVocabFits(tokenizer);
    this.segmentStarts.push(0);
    this.documentStarts.push(0);
  }

  /** Documents so far (the one being read not counted until it ends). */
  get documentCount(): number {
    return this.documentStarts.length - 1;
  }

  /** Reads one line (without its `\n`); true when it ended a document. */
  addLine(text: string): boolean {
    const line = pythonStrip(text);
    if (line.length === 0) return this.endDocument();
    const lineIds = this.lineIds;
    lineIds.length = 0;
    this.tokenizer.tokenizeToIds(line, lineIds);
    if (lineIds.length > 0) {
      this.tokenIds.append(lineIds);
      this.segmentStarts.push(this.tokenIds.length);
    }
    return false;
  }

  /** Ends the document being read, as an empty line does; true when it had segments (and so is kept). */
  endDocument(): boolean {
    const { segmentStarts, documentStarts } = this;
    if (segmentStarts.length - 1 === documentStarts.data[documentStarts.length - 1]!) return false;
    documentStarts.push(segmentStarts.length - 1);
    return true;
  }

  /** Ends the input: the documents read. */
  finish(): Documents {
    this.endDocument();
    return {
      tokenIds: this.tokenIds.filled(),
      segmentStarts: this.segmentStarts.filled(),
      documentStarts: this.documentStarts.filled(),
    };
  }
}

/** Calls `onLine` for each line of `text` (every `\r` deleted, as tf.gfile reads; lines end at `\n`). */
function forEachLine(text: string, onLine: (line: string) => void): void {
  const content = text.includes("\r") ? text.replaceAll("\r", "") : text;
  for (let lineStart = 0; lineStart < content.length; ) {
    const newline = content.indexOf("\n", lineStart);
    const lineEnd = newline < 0 ? content.length : newline;
    onLine(content.slice(lineStart, lineEnd));
    lineStart = lineEnd + 1;
  }
}

/** Reads results4 text as MLCommons does (see DocumentReader). */
export function readDocuments(text: string, tokenizer: BertTokenizer): Documents {
  const reader = new DocumentReader(tokenizer);
  forEachLine(text, (line) => reader.addLine(line));
  return reader.finish();
}

/** Bytes of a file read at a time: its text is never held whole (a Wikipedia part's is 54 MB as a string). */
const READ_CHUNK_BYTES = 1 << 20;

/**
 * Calls `onLine` for each line of the UTF-8 file at `path` as `readDocuments` cuts them, reading a chunk at a time;
 * `onChunk` sees the bytes read so far. Returns the file's size. Fails with a PreprocessError naming the file
 * (and, for bytes that are not UTF-8, the offset of the first bad one: Python would raise there).
 */
export function readTextLines(
  path: string,
  onLine: (line: string) => void,
  onChunk?: (bytesRead: number) => void,
): number {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new PreprocessError(
      `cannot read input file ${path}${code === "ENOENT" ? ": it does not exist" : `: ${(error as Error).message}`}`,
    );
  }
  // A leading U+FEFF is kept, as Python keeps it.
  const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
  let buffer = Buffer.allocUnsafe(READ_CHUNK_BYTES);
  let held = 0; // bytes of a line begun in the last chunk, at the buffer's start
  let offset = 0; // the file offset of buffer[0]
  try {
    for (;;) {
      if (held === buffer.length) buffer = Buffer.concat([buffer, Buffer.allocUnsafe(buffer.length)]);
      const read = readSync(fd, buffer, held, buffer.length - held, null);
      const end = held + read;
      if (end === 0) break;
      // Decoded up to the last \n: a newline byte is never inside a UTF-8 sequence, so each piece decodes alone.
      const cut = read === 0 ? end : buffer.lastIndexOf(0x0a, end - 1) + 1;
      if (cut > 0) {
        const bytes = buffer.subarray(0, cut);
        let text: string;
        try {
          text = decoder.decode(bytes);
        } catch {
          throw new PreprocessError(
            `input file ${path} is not valid UTF-8 (first bad byte at offset ${offset + firstInvalidUtf8Offset(bytes)})`,
          );
        }
        forEachLine(text, onLine);
        buffer.copyWithin(0, cut, end);
        held = end - cut;
        offset += cut;
        onChunk?.(offset);
      } else held = end;
      if (read === 0) break;
    }
  } finally {
    closeSync(fd);
  }
  return offset;
}

// ---------------------------------------------------------------------------------------
// Instance creation.

/** Ids the reference finds by name in the vocab. */
interface SpecialIds {
  cls: number;
  sep: number;
  mask: number;
  vocabSize: number;
}

function specialIdsOf(tokenizer: BertTokenizer): SpecialIds {
  const [cls, sep, mask] = ["[CLS]", "[SEP]", "[MASK]"].map((token) => {
    const id = tokenizer.vocab.ids.get(token);
    if (id === undefined) throw new PreprocessError(`vocab ${tokenizer.vocab.source} has no ${token} token`);
    return id;
  }) as [number, number, number];
  return { cls, sep, mask, vocabSize: tokenizer.vocab.tokens.length };
}

/** How a prediction's position is replaced in the sample: by [MASK], kept, or by a random id (80/10/10). */
const MASKED = 0;
const KEPT = 1;
const RANDOM = 2;

/** The replacement kind of prediction `p`: two bits each, four to a byte. */
const replacementKind = (kinds: Uint8Array, p: number): number => (kinds[p >> 2]! >> ((p & 3) * 2)) & 3;

/**
 * Samples in the order made, by reference into the input's token ids rather than copies of them (DUPE_FACTOR copies
 * of a part's tokens would be most of a worker's memory): sample k is `[CLS] A [SEP] B [SEP]`, where A is
 * `sourceIds[pairs[4k]..pairs[4k+1])` and B `sourceIds[pairs[4k+2]..pairs[4k+3])`, with its predictions'
 * replacements written over it; [CLS], A and the first [SEP] are segment 0. Its predictions are
 * `predictionStarts[k]..predictionStarts[k+1]` of the prediction arrays; a prediction's label, the id it replaces,
 * is read back from `sourceIds`, and its replacement is a two-bit kind, with the random ids kept apart (sample k's
 * from `randomIdStarts[k]`): about a tenth of predictions draw one. `sampleTokens` and `sampleLabels` put a sample
 * together.
 */
export interface MadeSamples {
  count: number;
  sourceIds: Uint16Array;
  pairs: Int32Array;
  cls: number;
  sep: number;
  mask: number;
  predictionStarts: Int32Array;
  maskedLmPositions: Uint16Array;
  /** MASKED, KEPT or RANDOM for each prediction, two bits each (`replacementKind`). */
  replacementKinds: Uint8Array;
  /** The ids drawn for RANDOM replacements, in the order of the predictions. */
  randomIds: Uint16Array;
  randomIdStarts: Int32Array;
  nextSentenceLabels: Uint8Array;
  /** The reference's output order: its final `rng.shuffle(instances)` as indices. */
  shuffledOrder: Int32Array;
}

/**
 * Writes made sample `k`'s token ids into `out` from `at` (room for max_seq_length); returns its length and the
 * length of segment 0.
 */
export function sampleTokens(
  made: MadeSamples,
  k: number,
  out: Int32Array | Uint16Array | Uint8Array,
  at: number,
): { length: number; segmentALength: number } {
  const { pairs, sourceIds } = made;
  const [aStart, aEnd, bStart, bEnd] = [pairs[4 * k]!, pairs[4 * k + 1]!, pairs[4 * k + 2]!, pairs[4 * k + 3]!];
  let n = at;
  out[n++] = made.cls;
  out.set(sourceIds.subarray(aStart, aEnd), n);
  n += aEnd - aStart;
  out[n++] = made.sep;
  const segmentALength = n - at;
  out.set(sourceIds.subarray(bStart, bEnd), n);
  n += bEnd - bStart;
  out[n++] = made.sep;
  let random = made.randomIdStarts[k]!;
  for (let p = made.predictionStarts[k]!; p < made.predictionStarts[k + 1]!; p++) {
    const kind = replacementKind(made.replacementKinds, p);
    if (kind === MASKED) out[at + made.maskedLmPositions[p]!] = made.mask;
    else if (kind === RANDOM) out[at + made.maskedLmPositions[p]!] = made.randomIds[random++]!;
  }
  return { length: n - at, segmentALength };
}

/** Writes made sample `k`'s masked-LM labels (the ids its predictions replaced) into `out` from `at`. */
export function sampleLabels(made: MadeSamples, k: number, out: Int32Array | Uint16Array, at: number): void {
  const { pairs, sourceIds } = made;
  const aStart = pairs[4 * k]!;
  const aLength = pairs[4 * k + 1]! - aStart;
  const bStart = pairs[4 * k + 2]!;
  const start = made.predictionStarts[k]!;
  for (let p = start; p < made.predictionStarts[k + 1]!; p++) {
    const position = made.maskedLmPositions[p]!; // never [CLS] or a [SEP]: those are no candidates
    out[at + p - start] =
      position <= aLength ? sourceIds[aStart + position - 1]! : sourceIds[bStart + position - aLength - 2]!;
  }
}

/** Python's `round()` on a double: halves go to the even neighbour. */
export function roundHalfEven(value: number): number {
  const floor = Math.floor(value);
  const fraction = value - floor;
  if (fraction !== 0.5) return Math.round(value);
  return floor % 2 === 0 ? floor : floor + 1;
}

/** Progress callback: samples made so far. */
export type ProgressCallback = (samplesMade: number) => void;

/** Builds samples from documents with the reference's random calls, in its order. */
class SampleMaker {
  private readonly pairs = new Growable();
  private readonly predictionStarts = new Growable();
  private readonly maskedLmPositions = new Growable(uint16s);
  private readonly replacementKinds = new Growable(uint8s);
  private readonly randomIds = new Growable(uint16s);
  private readonly randomIdStarts = new Growable();
  private kindCount = 0;
  private readonly nextSentenceLabels = new Growable(uint8s);
  private readonly candidates: Int32Array;
  /** The sample's predictions, sorted by position as they are drawn: position, replacement kind, random id. */
  private readonly predictionPositions: Int32Array;
  private readonly predictionKinds: Int32Array;
  private readonly predictionRandomIds: Int32Array;
  /** The sample being made. */
  private readonly tokens: Int32Array;
  /** Token ranges of A and B in `documents.tokenIds`, end exclusive. */
  private aStart = 0;
  private aEnd = 0;
  private bStart = 0;
  private bEnd = 0;

  constructor(
    private readonly documents: Documents,
    private readonly documentOrder: Int32Array,
    private readonly special: SpecialIds,
    private readonly settings: PreprocessSettings,
    private readonly rng: PyRandom,
  ) {
    this.predictionStarts.push(0);
    this.candidates = new Int32Array(settings.maxSeqLength);
    this.predictionPositions = new Int32Array(settings.maxPredictionsPerSeq);
    this.predictionKinds = new Int32Array(settings.maxPredictionsPerSeq);
    this.predictionRandomIds = new Int32Array(settings.maxPredictionsPerSeq);
    this.tokens = new Int32Array(settings.maxSeqLength);
  }

  get count(): number {
    return this.pairs.length / 4;
  }

  private segmentRange(documentIndex: number): [first: number, end: number] {
    const document = this.documentOrder[documentIndex]!;
    return [this.documents.documentStarts[document]!, this.documents.documentStarts[document + 1]!];
  }

  /** create_instances_from_document for the document at `documentIndex` of the shuffled list. */
  addDocument(documentIndex: number): void {
    const { rng, settings } = this;
    const starts = this.documents.segmentStarts;
    const [firstSegment, endSegment] = this.segmentRange(documentIndex);
    const segmentCount = endSegment - firstSegment;
    const maxNumTokens = settings.maxSeqLength - 3;
    let targetLength = maxNumTokens;
    if (rng.random() < settings.shortSeqProb) targetLength = rng.randint(2, maxNumTokens);

    let chunkFirst = 0; // segment index (in the document) where the current chunk starts
    let chunkSegments = 0;
    let chunkTokens = 0;
    for (let i = 0; i < segmentCount; i++) {
      if (chunkSegments === 0) chunkFirst = i;
      chunkSegments++;
      chunkTokens += starts[firstSegment + i + 1]! - starts[firstSegment + i]!;
      if (i !== segmentCount - 1 && chunkTokens < targetLength) continue;

      const aSegments = chunkSegments >= 2 ? rng.randint(1, chunkSegments - 1) : 1;
      this.aStart = starts[firstSegment + chunkFirst]!;
      this.aEnd = starts[firstSegment + chunkFirst + aSegments]!;
      let isRandomNext = false;
      if (chunkSegments === 1 || rng.random() < 0.5) {
        isRandomNext = true;
        this.takeRandomNext(documentIndex, targetLength - (this.aEnd - this.aStart));
        i -= chunkSegments - aSegments; // the unused segments are read again
      } else {
        this.bStart = this.aEnd;
        this.bEnd = starts[firstSegment + chunkFirst + chunkSegments]!;
      }
      this.truncatePair(maxNumTokens);
      this.addSample(isRandomNext);
      chunkSegments = 0;
      chunkTokens = 0;
    }
  }

  /** B from a random other document: from a random segment on, until `targetBLength` tokens. */
  private takeRandomNext(documentIndex: number, targetBLength: number): void {
    const { rng } = this;
    const documentCount = this.documentOrder.length;
    let randomDocument = 0;
    for (let attempt = 0; attempt < 10; attempt++) {
      randomDocument = rng.randint(0, documentCount - 1);
      if (randomDocument !== documentIndex) break;
    }
    const [firstSegment, endSegment] = this.segmentRange(randomDocument);
    const starts = this.documents.segmentStarts;
    const randomStart = rng.randint(0, endSegment - firstSegment - 1);
    this.bStart = starts[firstSegment + randomStart]!;
    for (let s = firstSegment + randomStart; s < endSegment; s++) {
      this.bEnd = starts[s + 1]!;
      if (this.bEnd - this.bStart >= targetBLength) break;
    }
  }

  /** truncate_seq_pair: one draw per removed token, from the longer side (B on ties). */
  private truncatePair(maxNumTokens: number): void {
    const { rng } = this;
    while (this.aEnd - this.aStart + (this.bEnd - this.bStart) > maxNumTokens) {
      const fromFront = rng.random() < 0.5;
      if (this.aEnd - this.aStart > this.bEnd - this.bStart) {
        if (fromFront) this.aStart++;
        else this.aEnd--;
      } else if (fromFront) this.bStart++;
      else this.bEnd--;
    }
  }

  /** `[CLS] A [SEP] B [SEP]`, then create_masked_lm_predictions. */
  private addSample(isRandomNext: boolean): void {
    const { rng, special, settings, candidates } = this;
    const source = this.documents.tokenIds;
    const aLength = this.aEnd - this.aStart;
    const bLength = this.bEnd - this.bStart;
    const length = aLength + bLength + 3;
    const tokens = this.tokens;
    tokens[0] = special.cls;
    tokens.set(source.subarray(this.aStart, this.aEnd), 1);
    tokens[aLength + 1] = special.sep;
    tokens.set(source.subarray(this.bStart, this.bEnd), aLength + 2);
    tokens[length - 1] = special.sep;

    let candidateCount = 0;
    for (let position = 0; position < length; position++) {
      const id = tokens[position]!;
      if (id !== special.cls && id !== special.sep) candidates[candidateCount++] = position;
    }
    rng.shuffle(candidates.subarray(0, candidateCount));
    const predictionCount = Math.min(
      settings.maxPredictionsPerSeq,
      Math.max(1, roundHalfEven(length * settings.maskedLmProb)),
      candidateCount,
    );
    for (let k = 0; k < predictionCount; k++) {
      let kind = KEPT;
      let randomId = 0;
      if (rng.random() < 0.8) kind = MASKED;
      else if (rng.random() >= 0.5) {
        kind = RANDOM;
        randomId = rng.randint(0, special.vocabSize - 1);
      }
      this.insertPrediction(k, candidates[k]!, kind, randomId);
    }
    this.randomIdStarts.push(this.randomIds.length);
    for (let k = 0; k < predictionCount; k++) {
      this.pushReplacementKind(this.predictionKinds[k]!);
      if (this.predictionKinds[k] === RANDOM) this.randomIds.push(this.predictionRandomIds[k]!);
    }
    this.maskedLmPositions.append(this.predictionPositions.subarray(0, predictionCount));
    this.predictionStarts.push(this.maskedLmPositions.length);
    for (const end of [this.aStart, this.aEnd, this.bStart, this.bEnd]) this.pairs.push(end);
    this.nextSentenceLabels.push(isRandomNext ? 1 : 0);
  }

  /** Keeps the first `filled` predictions sorted by position (the reference sorts at the end). */
  private insertPrediction(filled: number, position: number, kind: number, randomId: number): void {
    let k = filled;
    while (k > 0 && this.predictionPositions[k - 1]! > position) {
      this.predictionPositions[k] = this.predictionPositions[k - 1]!;
      this.predictionKinds[k] = this.predictionKinds[k - 1]!;
      this.predictionRandomIds[k] = this.predictionRandomIds[k - 1]!;
      k--;
    }
    this.predictionPositions[k] = position;
    this.predictionKinds[k] = kind;
    this.predictionRandomIds[k] = randomId;
  }

  /** Appends the next prediction's kind: two bits, four to a byte. */
  private pushReplacementKind(kind: number): void {
    const p = this.kindCount++;
    if ((p & 3) === 0) this.replacementKinds.push(0);
    const kinds = this.replacementKinds.data;
    kinds[p >> 2] = kinds[p >> 2]! | (kind << ((p & 3) * 2));
  }

  finish(): MadeSamples {
    const count = this.count;
    const shuffledOrder = Int32Array.from({ length: count }, (_, k) => k);
    this.rng.shuffle(shuffledOrder);
    return {
      count,
      sourceIds: this.documents.tokenIds,
      pairs: this.pairs.filled(),
      cls: this.special.cls,
      sep: this.special.sep,
      mask: this.special.mask,
      predictionStarts: this.predictionStarts.filled(),
      maskedLmPositions: this.maskedLmPositions.filled(),
      replacementKinds: this.replacementKinds.filled(),
      randomIds: this.randomIds.filled(),
      randomIdStarts: this.randomIdStarts.filled(),
      nextSentenceLabels: this.nextSentenceLabels.filled(),
      shuffledOrder,
    };
  }
}

export function validateSettings(settings: PreprocessSettings): void {
  const integer = (name: string, value: number, min: number) => {
    if (!Number.isSafeInteger(value) || value < min)
      throw new PreprocessError(`${name} must be an integer >= ${min}, got ${value}`);
  };
  // [CLS] a [SEP] b [SEP] needs 5 positions; randint(2, MAX_SEQ_LENGTH - 3) needs at least 5 too.
  integer("MAX_SEQ_LENGTH", settings.maxSeqLength, 5);
  integer("MAX_PREDICTIONS_PER_SEQ", settings.maxPredictionsPerSeq, 1);
  integer("RANDOM_SEED", settings.randomSeed, Number.MIN_SAFE_INTEGER);
  integer("DUPE_FACTOR", settings.dupeFactor, 1);
  const probability = (name: string, value: number) => {
    if (!(value >= 0 && value <= 1)) throw new PreprocessError(`${name} must be in [0, 1], got ${value}`);
  };
  probability("MASKED_LM_PROB", settings.maskedLmProb);
  probability("SHORT_SEQ_PROB", settings.shortSeqProb);
}

/**
 * create_training_instances on one input's documents: the document shuffle, DUPE_FACTOR
 * rounds over all documents, and the final shuffle (as `shuffledOrder`).
 */
export function makeSamples(
  documents: Documents,
  tokenizer: BertTokenizer,
  settings: PreprocessSettings,
  onProgress?: ProgressCallback,
): MadeSamples {
  validateSettings(settings);
  // sample token ids and positions are stored as 16-bit values, as shards store them
  checkVocabFits(tokenizer);
  const special = specialIdsOf(tokenizer);
  if (settings.maxSeqLength > 0x10000)
    throw new PreprocessError(`MAX_SEQ_LENGTH must be at most 65536, got ${settings.maxSeqLength}`);
  const rng = new PyRandom(settings.randomSeed);
  const documentOrder = Int32Array.from({ length: documents.documentStarts.length - 1 }, (_, d) => d);
  rng.shuffle(documentOrder);
  const maker = new SampleMaker(documents, documentOrder, special, settings, rng);
  let reported = 0;
  for (let round = 0; round < settings.dupeFactor; round++) {
    for (let documentIndex = 0; documentIndex < documentOrder.length; documentIndex++) {
      maker.addDocument(documentIndex);
      if (onProgress && maker.count - reported >= 1000) {
        reported = maker.count;
        onProgress(reported);
      }
    }
  }
  onProgress?.(maker.count);
  return maker.finish();
}

/** The padded columns of the made samples at `rows` (indices in made order), in that order. */
export function toSampleColumns(
  made: MadeSamples,
  rows: ArrayLike<number>,
  settings: PreprocessSettings,
): SampleColumns {
  const { maxSeqLength, maxPredictionsPerSeq } = settings;
  const count = rows.length;
  const columns: SampleColumns = {
    count,
    maxSeqLength,
    maxPredictionsPerSeq,
    input_ids: new Int32Array(count * maxSeqLength),
    input_mask: new Int32Array(count * maxSeqLength),
    segment_ids: new Int32Array(count * maxSeqLength),
    masked_lm_positions: new Int32Array(count * maxPredictionsPerSeq),
    masked_lm_ids: new Int32Array(count * maxPredictionsPerSeq),
    masked_lm_weights: new Float32Array(count * maxPredictionsPerSeq),
    next_sentence_labels: new Int32Array(count),
  };
  for (let r = 0; r < count; r++) {
    const k = rows[r]!;
    const row = r * maxSeqLength;
    const { length, segmentALength } = sampleTokens(made, k, columns.input_ids, row);
    columns.input_mask.fill(1, row, row + length);
    columns.segment_ids.fill(1, row + segmentALength, row + length);
    const predictionStart = made.predictionStarts[k]!;
    const predictions = made.predictionStarts[k + 1]! - predictionStart;
    const predictionRow = r * maxPredictionsPerSeq;
    columns.masked_lm_positions.set(
      made.maskedLmPositions.subarray(predictionStart, predictionStart + predictions),
      predictionRow,
    );
    sampleLabels(made, k, columns.masked_lm_ids, predictionRow);
    columns.masked_lm_weights.fill(1, predictionRow, predictionRow + predictions);
    columns.next_sentence_labels[r] = made.nextSentenceLabels[k]!;
  }
  return columns;
}

/** pick_eval_samples.py's rows: `int(i * (n / count))` for i = 0..count-1 (repeats when n < count). */
export function evalPickRows(sampleCount: number, count = EVAL_SAMPLE_COUNT): Int32Array {
  if (sampleCount === 0) throw new PreprocessError(`cannot pick ${count} eval samples from none`);
  const step = sampleCount / count;
  return Int32Array.from({ length: count }, (_, i) => Math.trunc(i * step));
}

/** `evalPick`: only the eval set's 10,000 rows (pick_eval_samples.py); `onProgress`: samples made so far. */
export interface SampleOptions {
  evalPick?: boolean;
  onProgress?: ProgressCallback;
}

/** Made samples and the rows of them to write, in the reference's output order (all, or the eval pick). */
export interface OrderedSamples {
  made: MadeSamples;
  rows: Int32Array;
}

/** The samples of results4-style text and their output order; `source` names it in errors. */
export function orderedSamplesFromText(
  text: string,
  tokenizer: BertTokenizer,
  settings: PreprocessSettings = DEFAULT_SETTINGS,
  options: SampleOptions & { source?: string } = {},
): OrderedSamples {
  return orderedSamplesFromDocuments(readDocuments(text, tokenizer), tokenizer, settings, options);
}

/** The samples of read documents and their output order; `source` names them in errors. */
export function orderedSamplesFromDocuments(
  documents: Documents,
  tokenizer: BertTokenizer,
  settings: PreprocessSettings = DEFAULT_SETTINGS,
  options: SampleOptions & { source?: string } = {},
): OrderedSamples {
  const source = options.source ?? "input text";
  if (documents.documentStarts.length === 1)
    throw new PreprocessError(`${source} has no documents (no line gives a token)`);
  const made = makeSamples(documents, tokenizer, settings, options.onProgress);
  const rows = options.evalPick
    ? Int32Array.from(evalPickRows(made.count), (k) => made.shuffledOrder[k]!)
    : made.shuffledOrder;
  return { made, rows };
}

/** Samples from results4-style text, in the reference's output order; `source` names it in errors. */
export function samplesFromText(
  text: string,
  tokenizer: BertTokenizer,
  settings: PreprocessSettings = DEFAULT_SETTINGS,
  options: SampleOptions & { source?: string } = {},
): SampleColumns {
  const { made, rows } = orderedSamplesFromText(text, tokenizer, settings, options);
  return toSampleColumns(made, rows, settings);
}

/** What a shard records of how it was made: the vocab's size (bounding its token ids) and the reference's knobs. */
export function shardSettings(settings: PreprocessSettings, vocabSize: number): ShardSettings {
  return {
    vocab_size: String(vocabSize),
    random_seed: String(settings.randomSeed),
    dupe_factor: String(settings.dupeFactor),
    masked_lm_prob: String(settings.maskedLmProb),
    short_seq_prob: String(settings.shortSeqProb),
  };
}

/**
 * Writes the made samples at `rows` as a shard at `path`, each field filled a block of rows at a time straight
 * from `made`: the same file as writeShard(toSampleColumns(...), shardSettings(...)) without the padded int32 copy
 * of every sample (7 KB a sample at 512/76: 3 GB for a Wikipedia part's 425,000).
 */
export function writeSamplesShard(
  path: string,
  { made, rows }: OrderedSamples,
  settings: PreprocessSettings,
  vocabSize: number,
): void {
  const dims = {
    count: rows.length,
    maxSeqLength: settings.maxSeqLength,
    maxPredictionsPerSeq: settings.maxPredictionsPerSeq,
  };
  // every stored value is a token id, a position, or a 0/1: makeSamples refuses vocabs and lengths past 16 bits
  writeShardRows(
    path,
    dims,
    (field, start, end, out) => {
      const width = fieldWidth(field, dims);
      for (let r = start; r < end; r++) {
        const k = rows[r]!;
        const at = (r - start) * width;
        const { pairs } = made;
        const aLength = pairs[4 * k + 1]! - pairs[4 * k]!;
        const length = aLength + (pairs[4 * k + 3]! - pairs[4 * k + 2]!) + 3;
        const predictionStart = made.predictionStarts[k]!;
        const predictions = made.predictionStarts[k + 1]! - predictionStart;
        switch (field) {
          case "input_ids":
            sampleTokens(made, k, out, at);
            break;
          case "input_mask":
            out.fill(1, at, at + length);
            break;
          case "segment_ids":
            out.fill(1, at + aLength + 2, at + length);
            break;
          case "masked_lm_positions":
            out.set(made.maskedLmPositions.subarray(predictionStart, predictionStart + predictions), at);
            break;
          case "masked_lm_ids":
            sampleLabels(made, k, out as Uint16Array, at);
            break;
          case "masked_lm_weights":
            out.fill(1, at, at + predictions);
            break;
          case "next_sentence_labels":
            out[at] = made.nextSentenceLabels[k]!;
            break;
        }
      }
    },
    shardSettings(settings, vocabSize),
  );
}

/** Offset of the first byte that starts no valid UTF-8 sequence (shortest form, no surrogates). */
function firstInvalidUtf8Offset(bytes: Uint8Array): number {
  for (let i = 0; i < bytes.length; ) {
    const lead = bytes[i]!;
    if (lead < 0x80) {
      i++;
      continue;
    }
    const continuations =
      lead >= 0xc2 && lead <= 0xdf ? 1 : lead >= 0xe0 && lead <= 0xef ? 2 : lead >= 0xf0 && lead <= 0xf4 ? 3 : 0;
    if (continuations === 0) return i;
    let codePoint = lead & (0x3f >> continuations);
    for (let k = 1; k <= continuations; k++) {
      const next = bytes[i + k];
      if (next === undefined || (next & 0xc0) !== 0x80) return i;
      codePoint = (codePoint << 6) | (next & 0x3f);
    }
    const shortest = [0, 0x80, 0x800, 0x10000][continuations]!;
    if (codePoint < shortest || codePoint > 0x10ffff || (codePoint >= 0xd800 && codePoint <= 0xdfff)) return i;
    i += continuations + 1;
  }
  return bytes.length;
}

/** Samples from a results4-style file (see `samplesFromText`). */
export function samplesFromFile(
  path: string,
  tokenizer: BertTokenizer,
  settings: PreprocessSettings = DEFAULT_SETTINGS,
  options: SampleOptions = {},
): SampleColumns {
  const { made, rows } = orderedSamplesFromFile(path, tokenizer, settings, options);
  return toSampleColumns(made, rows, settings);
}

/** The samples of a results4 file and their output order. */
export function orderedSamplesFromFile(
  path: string,
  tokenizer: BertTokenizer,
  settings: PreprocessSettings = DEFAULT_SETTINGS,
  options: SampleOptions = {},
): OrderedSamples {
  const reader = new DocumentReader(tokenizer);
  if (readTextLines(path, (line) => reader.addLine(line)) === 0)
    throw new PreprocessError(`input file ${path} is empty`);
  return orderedSamplesFromDocuments(reader.finish(), tokenizer, settings, {
    ...options,
    source: `input file ${path}`,
  });
}

// ---------------------------------------------------------------------------------------
// The command line: pre-train all|N, pre-eval; NUM_WORKERS worker threads over whole parts.

const USAGE = `Usage: npx tsx mlperf/bert/data/preprocess.ts pre-train all|N | pre-eval [options]

Turns BASEDIR/results4/part-NNNNN-of-00500 (pre-train) or BASEDIR/results4/eval.txt (pre-eval)
into masked-LM/NSP sample shards, exactly as MLCommons' create_pretraining_data.py (and
tinygrad's wikipedia.py) would make them, with BASEDIR/vocab.txt:
  pre-train all   every part: BASEDIR/train/part-NNNNN-of-00500.safetensors
  pre-train N     part N only (0..499)
  pre-eval        BASEDIR/eval/eval.safetensors: 10,000 samples picked as pick_eval_samples.py does
Shards already present are skipped (each is written to a temp file and renamed when complete); one
made with other settings (its metadata records them) stops the command, naming them; one whose
header cannot be read is made again.

Options (each also read from the environment variable shown; flags win):
  --basedir DIR                  BASEDIR                  (default: $XDG_DATA_HOME/tsgrad/wiki or ~/.local/share/tsgrad/wiki)
  --num-workers N                NUM_WORKERS              parts processed at once (default: CPUs, at most one per 1.5 GiB of free memory)
  --max-seq-length N             MAX_SEQ_LENGTH           (default 512)
  --max-predictions-per-seq N    MAX_PREDICTIONS_PER_SEQ  (default 76)
  --random-seed N                RANDOM_SEED              (default 12345)
  --dupe-factor N                DUPE_FACTOR              (default 10)
  --masked-lm-prob P             MASKED_LM_PROB           (default 0.15)
  --short-seq-prob P             SHORT_SEQ_PROB           (default 0.1)
  -h, --help                     this text
`;

/**
 * A worker's peak memory on a full Wikipedia part at MLPerf settings, with room to spare over the peak that
 * bench/preprocess.ts measures for one part (docs/performance.md).
 */
const WORKER_MEMORY_BYTES = 1.5 * 2 ** 30;

export type Command = { kind: "pre-train"; parts: number[] } | { kind: "pre-eval" };

/** What to make, where and how: the parsed command line. */
export interface CliOptions {
  command: Command;
  basedir: string;
  numWorkers: number;
  settings: PreprocessSettings;
}

const SETTING_KNOBS: [key: keyof PreprocessSettings, env: string, flag: string][] = [
  ["maxSeqLength", "MAX_SEQ_LENGTH", "max-seq-length"],
  ["maxPredictionsPerSeq", "MAX_PREDICTIONS_PER_SEQ", "max-predictions-per-seq"],
  ["randomSeed", "RANDOM_SEED", "random-seed"],
  ["dupeFactor", "DUPE_FACTOR", "dupe-factor"],
  ["maskedLmProb", "MASKED_LM_PROB", "masked-lm-prob"],
  ["shortSeqProb", "SHORT_SEQ_PROB", "short-seq-prob"],
];

function parseNumber(name: string, text: string): number {
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value))
    throw new PreprocessError(`${name}: expected a number, got ${JSON.stringify(text)}`);
  return value;
}

/** Reads the command, flags and environment; null for --help. */
export function parseCommandLine(argv: string[], env: NodeJS.ProcessEnv = process.env): CliOptions | null {
  const flagValues = new Map<string, string>();
  const positional: string[] = [];
  const valueFlags = new Set(["basedir", "num-workers", ...SETTING_KNOBS.map(([, , flag]) => flag)]);
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "-h" || arg === "--help") return null;
    if (!arg.startsWith("--")) {
      positional.push(arg);
      continue;
    }
    const equals = arg.indexOf("=");
    const flag = arg.slice(2, equals < 0 ? undefined : equals);
    if (!valueFlags.has(flag)) throw new PreprocessError(`unknown option ${arg} (see --help)`);
    const value = equals < 0 ? argv[++i] : arg.slice(equals + 1);
    if (value === undefined) throw new PreprocessError(`option --${flag} needs a value`);
    flagValues.set(flag, value);
  }

  let command: Command;
  if (positional[0] === "pre-eval" && positional.length === 1) command = { kind: "pre-eval" };
  else if (positional[0] === "pre-train" && positional.length === 2 && positional[1] === "all") {
    command = { kind: "pre-train", parts: Array.from({ length: PART_COUNT }, (_, part) => part) };
  } else if (
    positional[0] === "pre-train" &&
    positional.length === 2 &&
    /^\d+$/.test(positional[1]!) &&
    Number(positional[1]) < PART_COUNT
  ) {
    command = { kind: "pre-train", parts: [Number(positional[1])] };
  } else
    throw new PreprocessError(
      `expected "pre-train all", "pre-train N" (0..${PART_COUNT - 1}) or "pre-eval", got ${JSON.stringify(positional.join(" "))} (see --help)`,
    );

  const settings = { ...DEFAULT_SETTINGS };
  for (const [key, envName, flag] of SETTING_KNOBS) {
    const text = flagValues.get(flag) ?? env[envName];
    if (text !== undefined && text !== "")
      settings[key] = parseNumber(flagValues.has(flag) ? `--${flag}` : envName, text);
  }
  validateSettings(settings);

  const workersText = flagValues.get("num-workers") ?? env.NUM_WORKERS;
  const numWorkers =
    workersText !== undefined && workersText !== ""
      ? parseNumber("NUM_WORKERS", workersText)
      : Math.max(1, Math.min(availableParallelism(), Math.floor(freemem() / WORKER_MEMORY_BYTES)));
  if (!Number.isSafeInteger(numWorkers) || numWorkers < 1)
    throw new PreprocessError(`NUM_WORKERS must be an integer >= 1, got ${workersText}`);

  const basedirFlag = flagValues.get("basedir");
  return { command, basedir: basedirFlag ? basedirFlag : basedirFromEnv(env), numWorkers, settings };
}

/** One input file to one shard: the unit of work of a worker. */
interface Job {
  part: number | "eval";
  inputPath: string;
  shardPath: string;
}

type WorkerMessage =
  | { kind: "progress"; part: Job["part"]; samples: number }
  | { kind: "done"; part: Job["part"]; samples: number; inputBytes: number };

/** Makes one job's shard; `onProgress` sees samples made so far. */
function runJob(
  job: Job,
  tokenizer: BertTokenizer,
  settings: PreprocessSettings,
  onProgress: ProgressCallback,
): number {
  const samples = orderedSamplesFromFile(job.inputPath, tokenizer, settings, {
    evalPick: job.part === "eval",
    onProgress,
  });
  writeSamplesShard(job.shardPath, samples, settings, tokenizer.vocab.tokens.length);
  return samples.rows.length;
}

/** Progress over parts and samples on stderr: a redrawn line on a terminal, else one per part. */
class PartProgress {
  private readonly startMs = Date.now();
  private partsDone = 0;
  private samplesDone = 0;
  private inputBytesDone = 0;
  private readonly inFlight = new Map<Job["part"], number>();
  private lastDrawMs = 0;

  constructor(
    private readonly totalParts: number,
    private readonly skipped: number,
  ) {}

  get made(): ShardsMade {
    return { shards: this.partsDone, samples: this.samplesDone, inputBytes: this.inputBytesDone };
  }

  update(message: WorkerMessage): void {
    if (message.kind === "progress") this.inFlight.set(message.part, message.samples);
    else {
      this.inFlight.delete(message.part);
      this.partsDone++;
      this.samplesDone += message.samples;
      this.inputBytesDone += message.inputBytes;
    }
    const now = Date.now();
    if (message.kind === "done" || (process.stderr.isTTY && now - this.lastDrawMs > 250))
      this.draw(now, message.kind === "done");
  }

  private draw(now: number, partFinished: boolean): void {
    this.lastDrawMs = now;
    const seconds = (now - this.startMs) / 1000;
    let samples = this.samplesDone;
    for (const inFlight of this.inFlight.values()) samples += inFlight;
    const rate = samples / Math.max(seconds, 1e-3);
    const remainingParts = this.totalParts - this.partsDone;
    const eta = this.partsDone > 0 ? formatDuration((seconds / this.partsDone) * remainingParts) : "?";
    const line =
      `parts ${this.partsDone}/${this.totalParts}` +
      (this.skipped > 0 ? ` (+${this.skipped} already done)` : "") +
      ` | ${samples.toLocaleString("en-US")} samples, ${Math.round(rate).toLocaleString("en-US")}/s` +
      ` | ${(this.inputBytesDone / 1e6 / Math.max(seconds, 1e-3)).toFixed(2)} MB/s of text | ${formatDuration(seconds)} elapsed, ETA ${eta}`;
    if (process.stderr.isTTY)
      process.stderr.write(`\r\x1b[K${line}${partFinished && remainingParts === 0 ? "\n" : ""}`);
    else if (partFinished) process.stderr.write(`${line}\n`);
  }
}

const WORKER_ROLE = "tsgrad-bert-preprocess";

/** The young generation of a preprocessing worker's heap (V8's semi-spaces and nursery), in MB. */
const WORKER_YOUNG_GENERATION_MB = 8;

/** A worker thread running this file; under tsx, the worker first registers tsx's loader. */
function startWorker(data: { role: string; vocabPath: string; settings: PreprocessSettings }): Worker {
  const self = import.meta.url;
  // a part's work allocates short-lived strings and arrays by the megabyte: with V8's default young generation a
  // worker held ~30 MB more at its peak; bench/preprocess.ts --workers 2 peaked at 508-513 MB with 2-8 MB, 570-578
  // without, at the same samples a second within the machine's noise (2026-12-04)
  const resourceLimits = { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB };
  if (!self.endsWith(".ts")) return new Worker(new URL(self), { workerData: data, resourceLimits });
  const bootstrap = `import(${JSON.stringify(import.meta.resolve("tsx/esm/api"))}).then((tsx) => { tsx.register(); return import(${JSON.stringify(self)}); })`;
  return new Worker(bootstrap, { eval: true, workerData: data, resourceLimits });
}

/** Runs the jobs on `numWorkers` threads, each taking the next job when it finishes one. */
function runJobsOnWorkers(
  jobs: Job[],
  numWorkers: number,
  vocabFile: string,
  settings: PreprocessSettings,
  progress: PartProgress,
): Promise<void> {
  const queue = [...jobs];
  return new Promise((resolve, reject) => {
    const workers: Worker[] = [];
    let running = 0;
    let failed = false;
    const fail = (error: Error) => {
      if (failed) return;
      failed = true;
      for (const worker of workers) void worker.terminate();
      reject(error);
    };
    const giveWork = (worker: Worker) => {
      const job = queue.shift();
      if (job === undefined) {
        worker.postMessage(null); // lets it exit with code 0
        if (--running === 0 && !failed) resolve();
        return;
      }
      worker.postMessage(job);
    };
    for (let w = 0; w < Math.min(numWorkers, jobs.length); w++) {
      const worker = startWorker({ role: WORKER_ROLE, vocabPath: vocabFile, settings });
      workers.push(worker);
      running++;
      worker.on("message", (message: WorkerMessage) => {
        progress.update(message);
        if (message.kind === "done") giveWork(worker);
      });
      worker.on("error", fail);
      worker.on("exit", (code) => {
        if (code !== 0) fail(new PreprocessError(`a preprocessing worker exited with code ${code}`));
      });
      giveWork(worker);
    }
  });
}

function workerMain(): void {
  const { vocabPath: vocabFile, settings } = workerData as { vocabPath: string; settings: PreprocessSettings };
  const tokenizer = new BertTokenizer(loadVocab(vocabFile));
  const port = parentPort!;
  port.on("message", (job: Job | null) => {
    if (job === null) {
      port.close();
      return;
    }
    const post = (message: WorkerMessage) => port.postMessage(message);
    const samples = runJob(job, tokenizer, settings, (made) =>
      post({ kind: "progress", part: job.part, samples: made }),
    );
    post({ kind: "done", part: job.part, samples, inputBytes: statSync(job.inputPath).size });
  });
}

/** What `makeShards` made (shards already present are not counted). */
export interface ShardsMade {
  shards: number;
  samples: number;
  inputBytes: number;
}

/** The settings a shard records, by the knob that sets each (vocab_size by the vocab file). */
const RECORDED_SETTINGS: [key: string, knob: string][] = [
  ["max_seq_length", "MAX_SEQ_LENGTH"],
  ["max_predictions_per_seq", "MAX_PREDICTIONS_PER_SEQ"],
  ["random_seed", "RANDOM_SEED"],
  ["dupe_factor", "DUPE_FACTOR"],
  ["masked_lm_prob", "MASKED_LM_PROB"],
  ["short_seq_prob", "SHORT_SEQ_PROB"],
  ["vocab_size", "the vocab size (vocab.txt)"],
];

/**
 * Whether the shard at `path` stands as made: false when there is none, or its header cannot be read (a damaged
 * file, made again). A shard made with other settings is refused, naming each: a rerun must not leave a folder of
 * shards of two kinds, nor silently throw away hours of preprocessing for a mistyped knob. (Settings a version 1
 * shard does not record are not compared.)
 */
function keepsShard(path: string, settings: PreprocessSettings, vocabSize: number): boolean {
  if (!existsSync(path)) return false;
  let recorded: Record<string, string>;
  try {
    recorded = io.readSafetensorsHeader(path).metadata;
  } catch (error) {
    process.stderr.write(`${path}: unreadable (${(error as Error).message}): making it again\n`);
    return false;
  }
  const wanted: Record<string, string> = {
    ...shardSettings(settings, vocabSize),
    max_seq_length: String(settings.maxSeqLength),
    max_predictions_per_seq: String(settings.maxPredictionsPerSeq),
  };
  const differences = RECORDED_SETTINGS.filter(([key]) => recorded[key] !== undefined && recorded[key] !== wanted[key]);
  if (differences.length === 0) return true;
  const listed = differences.map(([key, knob]) => `${knob} ${recorded[key]} (now ${wanted[key]})`).join(", ");
  throw new PreprocessError(
    `${path} was made with ${listed}: remove it to make it again with these settings, or preprocess with the ones it was made with`,
  );
}

/**
 * `pre-train` or `pre-eval` under `basedir` (see USAGE); parts whose shard exists, made with these settings, are
 * skipped; one made with others stops the command (keepsShard).
 */
export async function makeShards({
  command,
  basedir,
  numWorkers: requestedWorkers,
  settings,
}: CliOptions): Promise<ShardsMade> {
  const vocabFile = vocabPath(basedir);
  const tokenizer = new BertTokenizer(loadVocab(vocabFile)); // fails early on a missing vocab
  const jobs: Job[] =
    command.kind === "pre-eval"
      ? [{ part: "eval", inputPath: evalInputPath(basedir), shardPath: evalShardPath(basedir) }]
      : command.parts.map((part) => ({
          part,
          inputPath: trainInputPath(basedir, part),
          shardPath: trainShardPath(basedir, part),
        }));
  const pending = jobs.filter((job) => !keepsShard(job.shardPath, settings, tokenizer.vocab.tokens.length));
  const missing = pending.find((job) => !existsSync(job.inputPath));
  if (missing)
    throw new PreprocessError(
      `input file ${missing.inputPath} does not exist (download it first: WIKI_TRAIN=1 npx tsx mlperf/bert/data/download.ts)`,
    );
  process.stderr.write(
    `${command.kind}: ${pending.length} of ${jobs.length} shard(s) to make in ${basedir} (MAX_SEQ_LENGTH=${settings.maxSeqLength} ` +
      `MAX_PREDICTIONS_PER_SEQ=${settings.maxPredictionsPerSeq} DUPE_FACTOR=${settings.dupeFactor} RANDOM_SEED=${settings.randomSeed} ` +
      `MASKED_LM_PROB=${settings.maskedLmProb} SHORT_SEQ_PROB=${settings.shortSeqProb})\n`,
  );
  if (pending.length === 0) return { shards: 0, samples: 0, inputBytes: 0 };
  for (const folder of new Set(pending.map((job) => join(job.shardPath, "..")))) {
    mkdirSync(folder, { recursive: true });
    for (const name of io.removeStaleTemps(folder))
      process.stderr.write(`removed ${name}, left by a run that was killed\n`);
  }
  const progress = new PartProgress(pending.length, jobs.length - pending.length);
  const numWorkers = Math.min(requestedWorkers, pending.length);
  if (numWorkers === 1) {
    for (const job of pending) {
      const samples = runJob(job, tokenizer, settings, (made) =>
        progress.update({ kind: "progress", part: job.part, samples: made }),
      );
      progress.update({ kind: "done", part: job.part, samples, inputBytes: statSync(job.inputPath).size });
    }
  } else {
    await runJobsOnWorkers(pending, numWorkers, vocabFile, settings, progress);
  }
  return progress.made;
}

async function cliMain(argv: string[]): Promise<void> {
  const options = parseCommandLine(argv);
  if (options === null) process.stdout.write(USAGE);
  else await makeShards(options);
}

if (!isMainThread && (workerData as { role?: string } | null)?.role === WORKER_ROLE) {
  workerMain();
} else if (
  isMainThread &&
  process.argv[1] !== undefined &&
  fileURLToPath(import.meta.url) === resolve(process.argv[1])
) {
  cliMain(process.argv.slice(2)).catch((error: Error) => {
    process.stderr.write("\n"); // past a progress line
    process.exitCode = reportFailure("preprocess", error, [
      PreprocessError,
      VocabError,
      ShardError,
      io.SafetensorsError,
    ]);
  });
}
