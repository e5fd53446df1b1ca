// What checking a sample shard costs: verifying its checksums when it is opened (the whole file, CRC-32C), opening
// it by its header alone, checking a folder of it before training (listSampleFiles), and reading every sample with
// the per-sample range checks, beside the range checks alone. Prints one JSON object.
// Usage: npx tsx bench/shard_verify.ts SHARD [--repeat N]
// A real part-sized shard (about 1 GB, 425,000 samples at 512/76) comes from preprocessing one part:
//   npx tsx bench/preprocess.ts --workers 1 --write-input /tmp/part.txt   # the part's text
//   mkdir -p B/results4 && cp test/fixtures/bert-preprocess/vocab.txt B/ && cp /tmp/part.txt B/results4/part-00000-of-00500
//   BASEDIR=B npx tsx mlperf/bert/data/preprocess.ts pre-train 0            # B/train/part-00000-of-00500.safetensors

import { statSync } from "node:fs";
import { dirname } from "node:path";
import { benchArgs } from "./args.ts";
import { listSampleFiles } from "../mlperf/bert/data/loader.ts";
import { emptySamples, findValueOutOfRange, ShardFile } from "../mlperf/bert/data/shard.ts";

const { values, positionals } = benchArgs(
  import.meta.url,
  { repeat: { type: "string", default: "3" } },
  { allowPositionals: true },
);
const path = positionals[0];
if (path === undefined) {
  process.stderr.write("Usage: npx tsx bench/shard_verify.ts SHARD [--repeat N]\n");
  process.exit(2);
}
const repeat = Number(values.repeat);

/** The fastest of `repeat` runs of `run`, in ms (the file stays in the page cache between runs). */
function fastestMs(run: () => void): number {
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < repeat; i++) {
    const start = performance.now();
    run();
    best = Math.min(best, performance.now() - start);
  }
  return Number(best.toFixed(1));
}

const megabytes = statSync(path).size / 1e6;
const open = (verify: boolean) => () => new ShardFile(path, { verify }).close();
const verifyMs = fastestMs(open(true));
const headerMs = fastestMs(open(false));
const listMs = fastestMs(() => listSampleFiles(dirname(path)));

// Every sample, one at a time, as the loader reads them (each read range-checks its sample), and the checks alone.
const shard = new ShardFile(path, { verify: false });
const sample = emptySamples(1, shard);
const readAllMs = fastestMs(() => {
  for (let index = 0; index < shard.count; index++) shard.readInto(index, sample, 0);
});
const checksMs = fastestMs(() => {
  for (let index = 0; index < shard.count; index++) findValueOutOfRange(sample, 0, shard.vocabSize);
});
shard.close();

console.log(
  JSON.stringify({
    shard: path,
    mb: Number(megabytes.toFixed(1)),
    samples: shard.count,
    open_verifying_checksums: { ms: verifyMs, mb_per_s: Math.round(megabytes / (verifyMs / 1000)) },
    open_header_only_ms: headerMs,
    list_folder_ms: listMs,
    read_every_sample: {
      ms: readAllMs,
      samples_per_s: Math.round(shard.count / (readAllMs / 1000)),
      of_which_range_checks_ms: checksMs,
      range_check_us_per_sample: Number(((checksMs * 1000) / shard.count).toFixed(2)),
    },
  }),
);
