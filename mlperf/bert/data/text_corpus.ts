// One's own text as BERT samples: a folder of .txt files (the reference's input format: one sentence a line, a
// blank line between documents) becomes train shards, an eval shard and a manifest.json, with the reference's
// tokenizer and sample maker (preprocess.ts), part by part as MLCommons makes Wikipedia's 500 parts.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { io } from "../../../src/index.ts";
import { ByteProgress } from "./byteProgress.ts";
import {
  type DataManifest,
  MANIFEST_FORMAT,
  MANIFEST_VERSION,
  type ManifestShard,
  manifestPath,
  writeManifest,
} from "./manifest.ts";
import {
  DEFAULT_SETTINGS,
  DocumentReader,
  EVAL_SAMPLE_COUNT,
  evalPickRows,
  orderedSamplesFromDocuments,
  type PreprocessSettings,
  PreprocessError,
  readTextLines,
  validateSettings,
  writeSamplesShard,
} from "./preprocess.ts";
import { BertTokenizer, loadVocab } from "./tokenizer.ts";

/** A text file of the corpus: its path and size. */
export interface TextFile {
  path: string;
  bytes: number;
}

/**
 * The `.txt` files under `folder` (subfolders too; names starting with `.` skipped), sorted by their path inside
 * it, so the same folder always makes the same samples. Fails with a PreprocessError naming the folder when it is
 * missing, holds no .txt file, or only empty ones.
 */
export function listTextFiles(folder: string): TextFile[] {
  if (!existsSync(folder)) throw new PreprocessError(`text folder ${folder} does not exist`);
  if (!statSync(folder).isDirectory())
    throw new PreprocessError(`${folder} is not a folder (give a folder of .txt files)`);
  const files = readdirSync(folder, { recursive: true, encoding: "utf8" })
    .filter((name) => name.endsWith(".txt") && !name.split(/[\\/]/).some((part) => part.startsWith(".")))
    .map((name) => join(folder, name))
    .filter((path) => statSync(path).isFile())
    .sort((a, b) => (relative(folder, a) < relative(folder, b) ? -1 : 1))
    .map((path) => ({ path, bytes: statSync(path).size }));
  if (files.length === 0) throw new PreprocessError(`no .txt files in ${folder}`);
  if (files.every((file) => file.bytes === 0))
    throw new PreprocessError(`the ${files.length} .txt file(s) in ${folder} are all empty`);
  return files;
}

/** Where preprocessTextFolder stands: text bytes read of all, shards written. */
export interface TextFolderProgress {
  bytesRead: number;
  bytes: number;
  shardsWritten: number;
}

/** preprocessTextFolder's options; see there. */
export interface TextFolderOptions {
  input: string;
  vocab: string;
  output: string;
  settings?: PreprocessSettings;
  evalSamples?: number;
  parts?: number;
  onProgress?: (progress: TextFolderProgress) => void;
}

/** A train shard's file inside the output folder. */
export const trainShardFile = (part: number): string => `train/part-${String(part).padStart(5, "0")}.safetensors`;
export const EVAL_SHARD_FILE = "eval/eval.safetensors";

/** Shard bytes a default part aims at: a shard is read whole by the loader's workers, so tens of MB, not a GB. */
const TARGET_SHARD_BYTES = 64e6;
/** Text a sample is made from, per DUPE_FACTOR round, over MAX_SEQ_LENGTH: 1.24 measured on a Wikipedia-like part. */
const TEXT_BYTES_PER_SAMPLE_PER_TOKEN = 1.25;
/**
 * Text of the eval pool per eval sample, per DUPE_FACTOR round, over MAX_SEQ_LENGTH: several times the measured
 * need, so that the pool nearly always yields the samples asked for.
 */
const EVAL_TEXT_BYTES_PER_SAMPLE_PER_TOKEN = 8;
/** The eval pool never takes more than this share of the corpus. */
const EVAL_MAX_SHARE = 0.1;

/** Text bytes of a default part: a shard near TARGET_SHARD_BYTES (about 1.7 MB of text at MLPerf settings). */
function defaultPartBytes(settings: PreprocessSettings): number {
  const shardBytesPerSample = settings.maxSeqLength * 4 + settings.maxPredictionsPerSeq * 5 + 1; // shard.ts's layout
  const samplesPerTextByte = settings.dupeFactor / (TEXT_BYTES_PER_SAMPLE_PER_TOKEN * settings.maxSeqLength);
  return Math.max(1 << 16, Math.round(TARGET_SHARD_BYTES / (shardBytesPerSample * samplesPerTextByte)));
}

/** Bytes at the corpus' end whose documents are the eval pool (none for no eval samples). */
function evalPoolBytes(totalBytes: number, evalSamples: number, settings: PreprocessSettings): number {
  if (evalSamples === 0) return 0;
  const wanted = (evalSamples * settings.maxSeqLength * EVAL_TEXT_BYTES_PER_SAMPLE_PER_TOKEN) / settings.dupeFactor;
  return Math.min(Math.floor(totalBytes * EVAL_MAX_SHARE), Math.ceil(wanted));
}

function checkCount(name: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min)
    throw new PreprocessError(`${name} must be an integer >= ${min}, got ${value}`);
}

/**
 * Turns a folder of plain text into a data folder for `train --data`: train shards, an eval shard and
 * `manifest.json` (manifest.ts), with MLCommons' tokenizer and sample maker.
 *
 * - `input`: the folder; every `.txt` file under it, in sorted order (listTextFiles), strict UTF-8. As the
 *   reference reads its input: one sentence a line, a blank line between documents; a file's end ends its last
 *   document too.
 * - `vocab`: the WordPiece vocab.txt (uncased; at most 65,536 tokens, with [CLS], [SEP], [MASK] and [UNK]).
 * - `output`: the data folder: `train/part-NNNNN.safetensors`, `eval/eval.safetensors`, `manifest.json`. Each file
 *   is written to a temp file and renamed when complete; the manifest last, after any manifest already there was
 *   removed, so a folder with a manifest is always a complete one. Shards of an earlier run that this one does not
 *   make again are removed.
 * - `settings`: the reference's knobs (MAX_SEQ_LENGTH, ..., DUPE_FACTOR); default DEFAULT_SETTINGS, MLPerf's.
 * - `evalSamples`: samples in the eval shard (default 10,000; 0 for none). They are made from the documents in the
 *   corpus' last bytes (enough text for them as estimated, at most a tenth of the corpus), which no train shard
 *   holds, and picked from those as pick_eval_samples.py picks (evenly spread over them in the reference's
 *   output order). A corpus yielding fewer gives them all, never repeated: the manifest's `eval.samples` is the
 *   real count (compare it with what was asked). None at all, `eval` is null.
 * - `parts`: the most train shards (default: one per ~64 MB of expected shard, about 1.7 MB of text at MLPerf
 *   settings). Parts hold whole documents, in order, so there may be fewer; each is made as the reference makes
 *   one Wikipedia part (its own shuffles, with RANDOM_SEED).
 * - `onProgress`: told of each chunk read and shard written; by default a progress line on stderr.
 *
 * Errors are PreprocessErrors naming the folder or file (a missing folder, no .txt files, bytes that are not UTF-8
 * and their offset, a corpus without a single token), or VocabErrors naming the vocab.
 */
export function preprocessTextFolder({
  input,
  vocab,
  output,
  settings = DEFAULT_SETTINGS,
  evalSamples = EVAL_SAMPLE_COUNT,
  parts,
  onProgress,
}: TextFolderOptions): DataManifest {
  validateSettings(settings);
  checkCount("evalSamples", evalSamples, 0);
  if (parts !== undefined) checkCount("parts", parts, 1);
  const files = listTextFiles(input);
  const tokenizer = new BertTokenizer(loadVocab(vocab));
  const vocabSha256 = createHash("sha256").update(readFileSync(vocab)).digest("hex");
  const totalBytes = files.reduce((sum, file) => sum + file.bytes, 0);
  const evalStart = totalBytes - evalPoolBytes(totalBytes, evalSamples, settings);

  rmSync(manifestPath(output), { force: true });
  for (const folder of ["train", "eval"]) {
    mkdirSync(join(output, folder), { recursive: true });
    io.removeStaleTemps(join(output, folder));
  }
  // by default a line on stderr, redrawn on a terminal
  const bar = onProgress ? null : new ByteProgress("preprocess", totalBytes, process.stderr);
  const split: CorpusSplit = new CorpusSplit(
    {
      input,
      output,
      tokenizer,
      settings,
      evalSamples,
      evalStart,
      partBytes: parts === undefined ? defaultPartBytes(settings) : Math.ceil(evalStart / parts),
      maxParts: parts ?? Number.POSITIVE_INFINITY,
    },
    () => {
      const shardsWritten = split.train.length + (split.eval ? 1 : 0);
      if (onProgress) onProgress({ bytesRead: split.bytesRead, bytes: totalBytes, shardsWritten });
      else bar?.update(split.bytesRead);
    },
  );
  for (const file of files) split.readFile(file);
  split.finish();
  removeOtherShards(output, [...split.train.map((shard) => shard.file), ...(split.eval ? [split.eval.file] : [])]);

  const manifest: DataManifest = {
    format: MANIFEST_FORMAT,
    version: MANIFEST_VERSION,
    settings: { ...settings, vocabSize: tokenizer.vocab.tokens.length, vocabSha256, doLowerCase: true },
    train: split.train,
    eval: split.eval,
    source: { kind: "text-folder", files: files.length, bytes: totalBytes },
  };
  writeManifest(output, manifest);
  bar?.finish();
  return manifest;
}

/** What CorpusSplit cuts by and writes with. */
interface SplitPlan {
  input: string;
  output: string;
  tokenizer: BertTokenizer;
  settings: PreprocessSettings;
  evalSamples: number;
  /** Documents ending at or past this byte of the corpus start the eval pool. */
  evalStart: number;
  /** A train part ends after the document that takes it to this many bytes. */
  partBytes: number;
  maxParts: number;
}

/** Reads the corpus' documents into train parts, writing each part's shard as it fills, then into the eval pool. */
class CorpusSplit {
  readonly train: ManifestShard[] = [];
  eval: ManifestShard | null = null;
  /** Bytes of the corpus read (counted by lines, short of the files' sizes by the CRs deleted within a file). */
  bytesRead = 0;
  private filesBytes = 0;
  private reader: DocumentReader;
  private inEvalPool = false;
  private partStart = 0;

  constructor(
    private readonly plan: SplitPlan,
    private readonly report: () => void,
  ) {
    this.reader = new DocumentReader(plan.tokenizer);
  }

  /** Reads one file; its end ends its last document. */
  readFile(file: TextFile): void {
    readTextLines(
      file.path,
      (line) => {
        const ended = this.reader.addLine(line);
        this.bytesRead += Buffer.byteLength(line) + 1;
        if (ended) this.atDocumentEnd();
      },
      this.report,
    );
    this.filesBytes += file.bytes;
    this.bytesRead = this.filesBytes;
    if (this.reader.endDocument()) this.atDocumentEnd();
  }

  /** Writes the last train part, or the eval shard. */
  finish(): void {
    if (!this.inEvalPool) this.finishTrainPart();
    else if (this.reader.documentCount > 0) this.writeEval();
    if (this.train.length === 0)
      throw new PreprocessError(`the .txt files in ${this.plan.input} have no documents (no line gives a token)`);
  }

  /** Between documents: the place to end a train part, or to start the eval pool. */
  private atDocumentEnd(): void {
    const { evalStart, evalSamples, partBytes, maxParts } = this.plan;
    if (this.inEvalPool) return;
    if (this.bytesRead >= evalStart && evalSamples > 0) {
      this.finishTrainPart();
      this.inEvalPool = true;
    } else if (this.bytesRead - this.partStart >= partBytes && this.train.length + 1 < maxParts) this.finishTrainPart();
  }

  private finishTrainPart(): void {
    const { input, output, tokenizer, settings } = this.plan;
    if (this.reader.documentCount === 0) return;
    const file = trainShardFile(this.train.length);
    const ordered = orderedSamplesFromDocuments(this.reader.finish(), tokenizer, settings, {
      source: `${file} of ${input}`,
    });
    writeSamplesShard(join(output, file), ordered, settings, tokenizer.vocab.tokens.length);
    this.train.push({ file, samples: ordered.rows.length });
    this.reader = new DocumentReader(tokenizer);
    this.partStart = this.bytesRead;
    this.report();
  }

  /** The eval pool's samples picked as pick_eval_samples.py picks, or all of them, once, when they are fewer. */
  private writeEval(): void {
    const { input, output, tokenizer, settings, evalSamples } = this.plan;
    const { made } = orderedSamplesFromDocuments(this.reader.finish(), tokenizer, settings, {
      source: `the eval pool of ${input}`,
    });
    const picked = evalPickRows(made.count, Math.min(evalSamples, made.count));
    const rows = Int32Array.from(picked, (k) => made.shuffledOrder[k]!);
    writeSamplesShard(join(output, EVAL_SHARD_FILE), { made, rows }, settings, tokenizer.vocab.tokens.length);
    this.eval = { file: EVAL_SHARD_FILE, samples: rows.length };
    this.report();
  }
}

/** Removes shards an earlier run left in `output/train` and `output/eval` that this run did not write. */
function removeOtherShards(output: string, written: string[]): void {
  for (const folder of ["train", "eval"])
    for (const name of readdirSync(join(output, folder)))
      if (name.endsWith(".safetensors") && !written.includes(`${folder}/${name}`)) rmSync(join(output, folder, name));
}
