// Preprocessing throughput: samples/s and MB/s of input text for one part-sized input per
// worker count, at MLPerf settings (512/76, dupe 10). The input repeats the fixture's
// documents in a seeded random order up to the size of a Wikipedia part (about 27 MB:
// 13.6 GB of results4 text over 500 parts); --mb makes it smaller for a quick run.
//
//   npx tsx bench/preprocess.ts [--mb 27] [--workers 1,2] [--dupe-factor 10] [--write-input PATH]
//
// --write-input also saves the part's text, to time the Python reference on the same input. Each result gives the
// process's peak RSS so far (the input's making included): with --workers 1, the peak of making one part on the
// main thread.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { PyRandom } from "../mlperf/bert/data/pyrandom.ts";
import { trainInputPath } from "../mlperf/bert/data/basedir.ts";
import { DEFAULT_SETTINGS, makeShards } from "../mlperf/bert/data/preprocess.ts";

const FIXTURES = new URL("../test/fixtures/bert-preprocess/", import.meta.url).pathname;

const { values } = parseArgs({
  options: {
    mb: { type: "string", default: "27" },
    workers: { type: "string", default: "1,2" },
    "dupe-factor": { type: "string", default: String(DEFAULT_SETTINGS.dupeFactor) },
    "write-input": { type: "string" },
    help: { type: "boolean", short: "h" },
  },
});
if (values.help) {
  process.stdout.write(
    "Usage: npx tsx bench/preprocess.ts [--mb MB_PER_PART] [--workers 1,2] [--dupe-factor N] [--write-input PATH]\n",
  );
  process.exit(0);
}
const partBytes = Number(values.mb) * 1e6;
const workerCounts = values.workers.split(",").map(Number);
const settings = { ...DEFAULT_SETTINGS, dupeFactor: Number(values["dupe-factor"]) };

/** The fixture's documents (blank-line separated), repeated in a seeded random order up to `bytes`. */
function partText(bytes: number, seed: number): string {
  const documents = readFileSync(join(FIXTURES, "input.txt"), "utf8")
    .replaceAll("\r", "")
    .split(/\n\n+/)
    .filter((document) => document.trim().length > 0);
  const rng = new PyRandom(seed);
  const chunks: string[] = [];
  let size = 0;
  while (size < bytes) {
    const document = `${documents[rng.randbelow(documents.length)]!}\n\n`;
    chunks.push(document);
    size += Buffer.byteLength(document);
  }
  return chunks.join("");
}

const basedir = mkdtempSync(join(tmpdir(), "tsgrad-bench-preprocess-"));
try {
  mkdirSync(join(basedir, "results4"));
  writeFileSync(join(basedir, "vocab.txt"), readFileSync(join(FIXTURES, "vocab.txt")));
  const maxWorkers = Math.max(...workerCounts);
  let inputBytes = 0;
  for (let part = 0; part < maxWorkers; part++) {
    const text = partText(partBytes, part);
    inputBytes = Buffer.byteLength(text);
    writeFileSync(trainInputPath(basedir, part), text);
    if (part === 0 && values["write-input"]) writeFileSync(values["write-input"], text);
  }
  const results = [];
  for (const workers of workerCounts) {
    rmSync(join(basedir, "train"), { recursive: true, force: true });
    const parts = Array.from({ length: workers }, (_, part) => part);
    const started = performance.now();
    const { samples } = await makeShards({
      command: { kind: "pre-train", parts },
      basedir,
      numWorkers: workers,
      settings,
    });
    const seconds = (performance.now() - started) / 1000;
    results.push({
      workers,
      parts: workers,
      seconds: Number(seconds.toFixed(2)),
      samples,
      samples_per_s: Math.round(samples / seconds),
      mb_per_s: Number(((inputBytes * workers) / 1e6 / seconds).toFixed(3)),
      samples_per_s_per_worker: Math.round(samples / seconds / workers),
      peak_rss_mb_so_far: Math.round(process.resourceUsage().maxRSS / 1024),
    });
  }
  const report = {
    bench: "bert-preprocess",
    input_mb_per_part: Number((inputBytes / 1e6).toFixed(2)),
    settings,
    results,
  };
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
} finally {
  rmSync(basedir, { recursive: true, force: true });
}
