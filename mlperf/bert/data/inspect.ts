// Look inside a sample file, ours (safetensors shard) or the reference's (TFRecord), told
// apart by content: `npx tsx mlperf/bert/data/inspect.ts SHARD [--jsonl] [--limit N]`.
// Also the one place that opens either kind for the readers (`readSamples`, `openSampleFile`).

import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { io } from "../../../src/index.ts";
import { SAMPLE_FIELDS, type SampleColumns } from "./samples.ts";
import { emptySamples, fieldWidth, readShard, ShardError, ShardFile, type ShardOpenOptions } from "./shard.ts";
import { readTFRecordSamples, TFRecordSampleFile } from "./tfrecord.ts";

export type SampleFormat = "shard" | "tfrecord";

/** A sample file open for reading single samples by index (a shard or a TFRecord). */
export interface SampleFile {
  readonly path: string;
  readonly count: number;
  readonly maxSeqLength: number;
  readonly maxPredictionsPerSeq: number;
  /** Copies sample `index` into row `row` of `target`, whose widths match the file's. */
  readInto(index: number, target: SampleColumns, row: number): void;
  close(): void;
}

/** Tells our shards from TFRecords by their first bytes: a valid length CRC means TFRecord. */
export function detectSampleFormat(path: string): SampleFormat {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    if (size === 0) return "tfrecord"; // a TFRecord file of no records
    const head = new Uint8Array(12);
    const read = readSync(fd, head, 0, 12, 0);
    const view = new DataView(head.buffer);
    if (read === 12 && io.maskedCrc32c(head.subarray(0, 8)) === view.getUint32(8, true)) return "tfrecord";
    // a header cut short is still a shard's: its reader names what is wrong with it
    if (read >= 9 && head[8] === 0x7b /* "{" */) return "shard";
    throw new ShardError(path, "format", "neither a tsgrad sample shard (safetensors) nor a TFRecord file");
  } finally {
    closeSync(fd);
  }
}

/** Reads all samples of a shard or TFRecord file into columns. */
export function readSamples(path: string): SampleColumns {
  return detectSampleFormat(path) === "shard" ? readShard(path) : readTFRecordSamples(path);
}

/**
 * Opens a shard or TFRecord file for reading samples by index. A shard's data is verified against its checksums
 * unless `verify` is false; a TFRecord's records are each checked against their CRCs as they are read.
 */
export function openSampleFile(path: string, options: ShardOpenOptions = {}): SampleFile {
  return detectSampleFormat(path) === "shard" ? new ShardFile(path, options) : new TFRecordSampleFile(path);
}

/** Sample `index` as one JSON line: the reference keys in the reference order, padded rows. */
export function sampleJson(samples: SampleColumns, index: number): string {
  const sample: Record<string, number[]> = {};
  for (const field of SAMPLE_FIELDS) {
    const width = fieldWidth(field, samples);
    sample[field] = Array.from(samples[field].subarray(index * width, (index + 1) * width));
  }
  return JSON.stringify(sample);
}

/** Calls `visit` with each of the first `limit` samples in turn, as a one-sample batch; returns the file's count. */
function forEachSample(path: string, limit: number, visit: (sample: SampleColumns) => void): number {
  const file = openSampleFile(path);
  try {
    const sample = emptySamples(1, file);
    for (let index = 0; index < Math.min(limit, file.count); index++) {
      file.readInto(index, sample, 0);
      visit(sample);
    }
    return file.count;
  } finally {
    file.close();
  }
}

/** Counts and averages that say whether a file looks like BERT pretraining data; reads one sample at a time. */
export function summarize(path: string): Record<string, string | number> {
  const format = detectSampleFormat(path);
  let widths = { maxSeqLength: 0, maxPredictionsPerSeq: 0 };
  let tokens = 0;
  let predictions = 0;
  let randomNext = 0;
  let maxTokenId = 0;
  const count = forEachSample(path, Infinity, (sample) => {
    widths = sample;
    for (const real of sample.input_mask) tokens += real;
    for (const weight of sample.masked_lm_weights) predictions += weight;
    for (const id of sample.input_ids) maxTokenId = Math.max(maxTokenId, id);
    randomNext += sample.next_sentence_labels[0]!;
  });
  const perSample = (total: number) => (count === 0 ? 0 : Number((total / count).toFixed(2)));
  return {
    file: path,
    format: format === "shard" ? "tsgrad sample shard (safetensors)" : "TFRecord of tf.train.Example",
    samples: count,
    max_seq_length: widths.maxSeqLength,
    max_predictions_per_seq: widths.maxPredictionsPerSeq,
    "tokens per sample (mean)": perSample(tokens),
    "masked predictions per sample (mean)": perSample(predictions),
    "random next sentence (fraction)": perSample(randomNext),
    "largest token id": maxTokenId,
  };
}

const HELP = `Usage: npx tsx mlperf/bert/data/inspect.ts SHARD [--jsonl] [--limit N]

Prints a summary of a sample file: a tsgrad shard (safetensors) or a reference TFRecord
of tf.train.Example records (told apart by content).

  --jsonl     print each sample as one JSON object with the reference keys, in the
              reference order, padded as the reference pads
  --limit N   only the first N samples (with --jsonl)
  --help      this text
`;

function parseArgs(argv: string[]): { path: string; jsonl: boolean; limit: number } | string {
  let path: string | undefined;
  let jsonl = false;
  let limit = Infinity;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--jsonl") jsonl = true;
    else if (arg === "--limit") {
      const text = argv[++i];
      if (text === undefined || !/^\d+$/.test(text))
        return `--limit needs a non-negative integer, got ${JSON.stringify(text)}`;
      limit = Number(text);
    } else if (arg.startsWith("-")) return `unknown option ${arg}`;
    else if (path === undefined) path = arg;
    else return `one file at a time (got ${path} and ${arg})`;
  }
  return path === undefined ? "no file given" : { path, jsonl, limit };
}

/** Prints samples as JSON lines, reading one at a time so that big files need little memory. */
function printJsonl(path: string, limit: number): void {
  let lines: string[] = [];
  const flush = () => {
    if (lines.length > 0) process.stdout.write(`${lines.join("\n")}\n`);
    lines = [];
  };
  forEachSample(path, limit, (sample) => {
    lines.push(sampleJson(sample, 0));
    if (lines.length === 256) flush();
  });
  flush();
}

function main(argv: string[]): number {
  if (argv.includes("--help")) {
    process.stdout.write(HELP);
    return 0;
  }
  const args = parseArgs(argv);
  if (typeof args === "string") {
    process.stderr.write(`inspect: ${args}\n\n${HELP}`);
    return 2;
  }
  // A reader such as `head` closing the pipe is not an error.
  process.stdout.on("error", (error: NodeJS.ErrnoException) => process.exit(error.code === "EPIPE" ? 0 : 1));
  try {
    if (args.jsonl) {
      printJsonl(args.path, args.limit);
    } else {
      for (const [key, value] of Object.entries(summarize(args.path))) process.stdout.write(`${key}: ${value}\n`);
    }
  } catch (error) {
    process.stderr.write(`inspect: ${(error as Error).message}\n`);
    return 1;
  }
  return 0;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href)
  process.exitCode = main(process.argv.slice(2));
