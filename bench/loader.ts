// Samples per second of the dataloader over generated shards (written to a temp folder):
// train in-thread, train prefetched on a worker, train from TFRecords, eval, and how long
// resuming at a late step takes. Prints one JSON object.
//   npx tsx bench/loader.ts [--shards N] [--samples-per-shard N] [--batch-size N] [--seconds S]

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { evalBatches, fakeBatch, prefetchBatches, trainBatches } from "../mlperf/bert/data/loader.ts";
import { writeShard } from "../mlperf/bert/data/shard.ts";
import { writeTFRecordSamples } from "../mlperf/bert/data/tfrecord.ts";
import type { SampleColumns } from "../mlperf/bert/data/samples.ts";
import { argsWithUsage } from "./args.ts";

const HELP = `Usage: npx tsx bench/loader.ts [options]
  --shards N              shards to generate (default 4)
  --samples-per-shard N   samples in each (default 1000)
  --batch-size N          BS (default 66; eval uses the same)
  --seconds S             time per measurement (default 2)
Shards are 512 tokens / 76 predictions, written to a temp folder and removed afterwards.`;

/** The options as positive numbers; anything else is answered by the usage and exit status 2. */
function options(): { shards: number; perShard: number; batchSize: number; seconds: number } {
  const { values } = argsWithUsage(HELP, {
    shards: { type: "string", default: "4" },
    "samples-per-shard": { type: "string", default: "1000" },
    "batch-size": { type: "string", default: "66" },
    seconds: { type: "string", default: "2" },
  });
  const positive = (name: keyof typeof values) => {
    const value = Number(values[name]);
    if (!(value > 0)) {
      console.error(`--${name} needs a positive number, not ${values[name]}\n\n${HELP}`);
      process.exit(2);
    }
    return value;
  };
  return {
    shards: positive("shards"),
    perShard: positive("samples-per-shard"),
    batchSize: positive("batch-size"),
    seconds: positive("seconds"),
  };
}

/** Consumes batches for about `seconds` and returns samples per second. */
async function samplesPerSecond(
  batches: Iterator<SampleColumns> | AsyncIterator<SampleColumns>,
  seconds: number,
): Promise<number> {
  await batches.next(); // the first batch includes opening files and starting workers
  const start = performance.now();
  let samples = 0;
  while (performance.now() - start < seconds * 1000) samples += ((await batches.next()).value as SampleColumns).count;
  return Math.round(samples / ((performance.now() - start) / 1000));
}

async function main(): Promise<void> {
  const { shards, perShard, batchSize, seconds } = options();
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-bench-loader-"));
  try {
    process.stderr.write(`writing ${shards} shards of ${perShard} samples to ${dir}\n`);
    const files: string[] = [];
    const tfrecords: string[] = [];
    for (let shard = 0; shard < shards; shard++) {
      const samples = fakeBatch(perShard, 512, 76, shard);
      files.push(join(dir, `part-${shard}`));
      writeShard(files[shard]!, samples);
      tfrecords.push(join(dir, `part-${shard}.tfrecord`));
      writeTFRecordSamples(tfrecords[shard]!, samples);
    }
    const train = { files, batchSize, seed: 1 };
    process.stderr.write("train, in-thread\n");
    const trainInThread = await samplesPerSecond(trainBatches(train), seconds);
    process.stderr.write("train, prefetched on a worker\n");
    const prefetched = prefetchBatches({ kind: "train", ...train });
    const trainPrefetched = await samplesPerSecond(prefetched, seconds);
    await prefetched.close();
    process.stderr.write("train from TFRecords, in-thread\n");
    const trainTFRecord = await samplesPerSecond(trainBatches({ ...train, files: tfrecords }), seconds);
    process.stderr.write("eval, in-thread\n");
    const evalInThread = await samplesPerSecond(evalBatches({ files, batchSize }), seconds);
    const resumeStep = 50_000;
    process.stderr.write(`resume at step ${resumeStep}\n`);
    const resumeStart = performance.now();
    trainBatches({ ...train, startStep: resumeStep }).next();
    const resumeMs = Math.round(performance.now() - resumeStart);
    console.log(
      JSON.stringify({
        shape: {
          max_seq_length: 512,
          max_predictions_per_seq: 76,
          batch_size: batchSize,
          shards,
          samples_per_shard: perShard,
        },
        train_samples_per_s: {
          in_thread: trainInThread,
          worker_prefetch: trainPrefetched,
          tfrecord_in_thread: trainTFRecord,
        },
        eval_samples_per_s: evalInThread,
        resume: { step: resumeStep, samples_skipped: resumeStep * batchSize, ms: resumeMs },
      }),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
