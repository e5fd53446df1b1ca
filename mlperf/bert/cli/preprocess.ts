// `tsgrad preprocess`: the reference's Wikipedia parts into MLPerf's shards (preprocess.ts, run with the same
// arguments), or, with `--text DIR`, a folder of one's own text into a data folder for `train --data`
// (text_corpus.ts), with the same sample settings.
import { fileURLToPath } from "node:url";
import { parseCommandLine } from "../data/preprocess.ts";
import { preprocessTextFolder } from "../data/text_corpus.ts";
import { UsageError } from "../exit_status.ts";
import { integerOption, parseCommand, splitOwnOptions } from "./args.ts";
import { runScript } from "./child.ts";

const WIKIPEDIA_SCRIPT = fileURLToPath(new URL("../data/preprocess.ts", import.meta.url));

export const TEXT_USAGE = `usage: npx tsgrad preprocess --text DIR --vocab FILE --out DIR [--eval-samples N] [--parts N]
                             [--max-seq-length N] [--max-predictions-per-seq N] [--dupe-factor N] ...
       npx tsgrad preprocess pre-train all|N | pre-eval [options]      (the reference's Wikipedia)

Your own text: every .txt file under DIR (one sentence a line, a blank line between documents)
becomes train shards, an eval shard and a manifest.json in the --out folder, made as the
reference makes Wikipedia's (its tokenizer and sample maker); \`npx tsgrad train --data OUT\`
then trains on them.

  --text DIR            the folder of .txt files (subfolders too)
  --vocab FILE          the WordPiece vocab.txt (uncased), e.g. BASEDIR/vocab.txt from \`tsgrad download\`
  --out DIR             the data folder to write
  --eval-samples N      samples in the eval shard, made from the corpus' last documents, which no
                        train shard holds (default 10000; 0 for none; fewer when the text gives fewer)
  --parts N             the most train shards (default: one per ~64 MB of shard)
  --max-seq-length N, --max-predictions-per-seq N, --random-seed N, --dupe-factor N,
  --masked-lm-prob P, --short-seq-prob P
                        the reference's sample settings, as for Wikipedia below (also read from
                        MAX_SEQ_LENGTH, ... in the environment); MLPerf's by default (512, 76, ...)

The reference's Wikipedia (BASEDIR/results4 from \`tsgrad download --wiki-train\`) into BASEDIR/train
and BASEDIR/eval: the options of mlperf/bert/data/preprocess.ts, which this runs:
`;

const TEXT_OPTIONS = {
  text: { type: "string" },
  vocab: { type: "string" },
  out: { type: "string" },
  "eval-samples": { type: "string" },
  parts: { type: "string" },
  help: { type: "boolean", short: "h", default: false },
} as const;

/**
 * V8's young generation held to 2 MB semi-spaces (16 MB by default): a part made on the main thread peaked at 173 MB
 * instead of 217 (docs/mlperf.md), no slower. Only a start-up flag does it: set later, V8 keeps its sizes.
 */
const PREPROCESS_NODE_FLAGS = ["--max-semi-space-size=2"];

/** `tsgrad preprocess`; returns the exit status. */
export async function preprocessCommand(argv: readonly string[]): Promise<number> {
  const { own, rest } = splitOwnOptions(argv, TEXT_OPTIONS);
  const { values } = parseCommand(own, TEXT_OPTIONS);
  if (values.help) {
    process.stdout.write(TEXT_USAGE);
    return runScript(WIKIPEDIA_SCRIPT, ["--help"]);
  }
  if (values.text === undefined) return runScript(WIKIPEDIA_SCRIPT, argv, {}, PREPROCESS_NODE_FLAGS);
  if (values.vocab === undefined || values.out === undefined)
    throw new UsageError("--text needs --vocab FILE (the WordPiece vocab) and --out DIR (the data folder)");
  // the sample settings as the Wikipedia command reads them (flags, then MAX_SEQ_LENGTH, ... in the environment)
  const { settings } = parseCommandLine(["pre-eval", ...rest])!;
  const manifest = preprocessTextFolder({
    input: values.text,
    vocab: values.vocab,
    output: values.out,
    settings,
    ...(values["eval-samples"] === undefined
      ? {}
      : { evalSamples: integerOption("eval-samples", values["eval-samples"]) }),
    ...(values.parts === undefined ? {} : { parts: integerOption("parts", values.parts, 1) }),
  });
  const trainSamples = manifest.train.reduce((sum, shard) => sum + shard.samples, 0);
  console.log(
    `data: ${values.out}: ${trainSamples} train samples in ${manifest.train.length} shards, ${manifest.eval?.samples ?? "no"} eval samples, from ${manifest.source.files} text files (${manifest.source.bytes} bytes)`,
  );
  console.log(`next: npx tsgrad train --data ${values.out}`);
  return 0;
}
