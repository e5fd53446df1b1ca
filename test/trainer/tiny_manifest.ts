// A tiny data folder with its manifest.json, as `tsgrad preprocess` writes one: the trainer tests' tiny shards
// (tiny_data.ts) and the manifest that names them.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { prepareDemoData } from "../../mlperf/bert/demo.ts";
import { evalShardPath, trainShardPath, vocabPath } from "../../mlperf/bert/data/basedir.ts";
import { openSampleFile } from "../../mlperf/bert/data/inspect.ts";
import { writeManifest } from "../../mlperf/bert/data/manifest.ts";
import { TINY, skewedCorpus } from "./tiny_data.ts";

/** Writes the tiny shards of `documents` documents into `dir` with their manifest; returns `dir`. */
export function tinyDataFolder(dir: string, documents = 60): string {
  const data = prepareDemoData(dir, TINY, skewedCorpus(documents));
  const entry = (path: string) => {
    const file = openSampleFile(path);
    file.close();
    return { file: relative(dir, path), samples: file.count };
  };
  writeManifest(dir, {
    format: "tsgrad-bert-data",
    version: 1,
    settings: {
      ...TINY.preprocess,
      vocabSize: data.vocabSize,
      vocabSha256: createHash("sha256")
        .update(readFileSync(vocabPath(dir)))
        .digest("hex"),
      doLowerCase: true,
    },
    train: Array.from({ length: TINY.trainParts }, (_, part) => entry(trainShardPath(dir, part))),
    eval: entry(evalShardPath(dir)),
    source: { kind: "text-folder", files: 1, bytes: readFileSync(join(dir, "demo_train.txt")).length },
  });
  return dir;
}
