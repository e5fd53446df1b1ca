// A data folder's manifest.json: written all or nothing, read back equal, and refused with the file and the field
// named when any part of it is wrong.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  type DataManifest,
  ManifestError,
  manifestPath,
  readManifest,
  writeManifest,
} from "../../mlperf/bert/data/manifest.ts";
import { scratchDir } from "../scratch.ts";

const MANIFEST: DataManifest = {
  format: "tsgrad-bert-data",
  version: 1,
  settings: {
    maxSeqLength: 128,
    maxPredictionsPerSeq: 20,
    randomSeed: 12345,
    dupeFactor: 10,
    maskedLmProb: 0.15,
    shortSeqProb: 0.1,
    vocabSize: 30522,
    vocabSha256: "a".repeat(64),
    doLowerCase: true,
  },
  train: [
    { file: "train/part-00000.safetensors", samples: 40 },
    { file: "train/part-00001.safetensors", samples: 38 },
  ],
  eval: { file: "eval/eval.safetensors", samples: 12 },
  source: { kind: "text-folder", files: 3, bytes: 5120 },
};

/** A folder with the manifest's shard files present (empty: the manifest does not read them). */
function dataFolder(manifest: DataManifest = MANIFEST): string {
  const dir = scratchDir("manifest-");
  mkdirSync(join(dir, "train"));
  mkdirSync(join(dir, "eval"));
  for (const shard of [...manifest.train, ...(manifest.eval ? [manifest.eval] : [])])
    writeFileSync(join(dir, shard.file), "");
  return dir;
}

/** The manifest as loose JSON, for making it wrong. */
interface LooseManifest {
  format: unknown;
  version: unknown;
  settings: Record<string, unknown>;
  train: Record<string, unknown>[];
  eval?: unknown;
  source: Record<string, unknown>;
}

/** A folder whose manifest.json is MANIFEST changed by `edit`. */
function withEdited(edit: (json: LooseManifest) => void): string {
  const dir = dataFolder();
  const json = structuredClone(MANIFEST) as unknown as LooseManifest;
  edit(json);
  writeFileSync(manifestPath(dir), JSON.stringify(json));
  return dir;
}

test("a written manifest reads back equal, and leaves no temp file", () => {
  const dir = dataFolder();
  writeManifest(dir, MANIFEST);
  assert.deepEqual(readManifest(dir), MANIFEST);
  assert.deepEqual(readdirSync(dir).sort(), ["eval", "manifest.json", "train"]);
  assert.equal(JSON.parse(readFileSync(manifestPath(dir), "utf8")).format, "tsgrad-bert-data");
});

test("a manifest without an eval set holds eval: null", () => {
  const manifest = { ...MANIFEST, eval: null };
  const dir = dataFolder(manifest);
  writeManifest(dir, manifest);
  assert.equal(readManifest(dir).eval, null);
});

test("a folder without a manifest is a ManifestError naming the file", () => {
  const dir = scratchDir("manifest-");
  assert.throws(
    () => readManifest(dir),
    (error: Error) => error instanceof ManifestError && error.message.startsWith(`${manifestPath(dir)}: no manifest`),
  );
});

test("a manifest that is not JSON is a ManifestError naming the file", () => {
  const dir = dataFolder();
  writeFileSync(manifestPath(dir), "{ not json");
  assert.throws(() => readManifest(dir), { name: "ManifestError", message: /manifest\.json: not valid JSON/ });
});

test("each bad field is named: format, version, settings, shards, source", () => {
  const cases: [edit: (json: LooseManifest) => void, message: RegExp][] = [
    [(json) => (json.format = "tsgrad-bert-samples"), /: format: expected "tsgrad-bert-data"/],
    [(json) => (json.version = 2), /: version: expected 1/],
    [(json) => (json.settings.maxSeqLength = "128"), /: settings\.maxSeqLength: expected an integer >= 5, got "128"/],
    [(json) => (json.settings.maskedLmProb = 1.5), /: settings\.maskedLmProb: expected a number in \[0, 1\]/],
    [(json) => (json.settings.vocabSha256 = "abc"), /: settings\.vocabSha256: expected 64 lowercase hex digits/],
    [(json) => delete json.settings.doLowerCase, /: settings\.doLowerCase: expected true or false/],
    [(json) => (json.train = []), /: train: expected a list of one or more shards/],
    [(json) => (json.train[1]!.samples = 0), /: train\[1\]\.samples: expected an integer >= 1/],
    [(json) => (json.train[0]!.file = "../elsewhere.safetensors"), /: train\[0\]\.file: expected a path inside/],
    [(json) => (json.train[0]!.file = "/data/part.safetensors"), /: train\[0\]\.file: expected a path inside/],
    [(json) => delete json.eval, /: eval: expected a shard or null/],
    [(json) => (json.source.kind = "web"), /: source\.kind: expected "text-folder" or "wikipedia"/],
  ];
  for (const [edit, message] of cases) {
    const dir = withEdited(edit);
    assert.throws(() => readManifest(dir), { name: "ManifestError", message }, String(message));
  }
});

test("a shard the manifest lists but the folder lacks is named with its field", () => {
  const dir = dataFolder();
  writeManifest(dir, { ...MANIFEST, eval: { file: "eval/missing.safetensors", samples: 3 } });
  assert.throws(() => readManifest(dir), {
    name: "ManifestError",
    message: `${manifestPath(dir)}: eval.file: ${join(dir, "eval/missing.safetensors")} does not exist`,
  });
});

test("writing refuses a manifest a reader would refuse, writing nothing", () => {
  const dir = dataFolder();
  assert.throws(() => writeManifest(dir, { ...MANIFEST, train: [] }), /train: expected a list/);
  assert.deepEqual(readdirSync(dir).sort(), ["eval", "train"]);
});
