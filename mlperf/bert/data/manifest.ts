// A data folder's manifest: `manifest.json` beside the shards, saying which files hold the train and eval
// samples, how many each holds, and the settings and vocab that made them, so a trainer can check a folder
// against its model before it reads a sample.
//
//   {
//     "format": "tsgrad-bert-data", "version": 1,
//     "settings": { "maxSeqLength": 128, "maxPredictionsPerSeq": 20, "randomSeed": 12345, "dupeFactor": 10,
//                   "maskedLmProb": 0.15, "shortSeqProb": 0.1, "vocabSize": 30522,
//                   "vocabSha256": "<64 hex digits>", "doLowerCase": true },
//     "train": [{ "file": "train/part-00000.safetensors", "samples": 41230 }, ...],
//     "eval": { "file": "eval/eval.safetensors", "samples": 10000 } | null,
//     "source": { "kind": "text-folder" | "wikipedia", "files": 12, "bytes": 48120331 }
//   }
//
// Shard paths are relative to the folder holding the manifest, and stay inside it.
import { existsSync, readFileSync } from "node:fs";
import { isAbsolute, join, normalize, sep } from "node:path";
import { io } from "../../../src/index.ts";
import type { PreprocessSettings } from "./preprocess.ts";

export const MANIFEST_FILE = "manifest.json";
export const MANIFEST_FORMAT = "tsgrad-bert-data";
export const MANIFEST_VERSION = 1;

/** What made the samples: the reference's knobs and the vocab (its size, its file's SHA-256, whether it lowercases). */
export interface ManifestSettings extends PreprocessSettings {
  vocabSize: number;
  vocabSha256: string;
  doLowerCase: boolean;
}

/** One shard: its path relative to the manifest's folder and its sample count. */
export interface ManifestShard {
  file: string;
  samples: number;
}

/** Where the text came from: a folder of plain text files, or the reference's Wikipedia parts. */
export interface ManifestSource {
  kind: "text-folder" | "wikipedia";
  files: number;
  bytes: number;
}

/** A data folder's `manifest.json`. */
export interface DataManifest {
  format: typeof MANIFEST_FORMAT;
  version: typeof MANIFEST_VERSION;
  settings: ManifestSettings;
  train: ManifestShard[];
  /** null when the folder has no eval set. */
  eval: ManifestShard | null;
  source: ManifestSource;
}

/** A manifest that is missing, unreadable or not of this format; names the file and the field. */
export class ManifestError extends Error {
  override name = "ManifestError";

  constructor(
    readonly path: string,
    readonly field: string | null,
    detail: string,
  ) {
    super(field === null ? `${path}: ${detail}` : `${path}: ${field}: ${detail}`);
  }
}

/** The manifest's path in data folder `dir`. */
export function manifestPath(dir: string): string {
  return join(dir, MANIFEST_FILE);
}

/** A shard's path on disk, from the data folder and its manifest entry. */
export function shardPath(dir: string, shard: ManifestShard): string {
  return join(dir, shard.file);
}

/** Writes `manifest` into `dir` all or nothing (temp file, fsync, rename), after checking it as a reader would. */
export function writeManifest(dir: string, manifest: DataManifest): void {
  const path = manifestPath(dir);
  checkManifest(JSON.parse(JSON.stringify(manifest)) as unknown, path);
  io.writeFileAtomic(path, new TextEncoder().encode(`${JSON.stringify(manifest, null, 2)}\n`));
}

/**
 * Reads and checks `dir/manifest.json`: its format and version, each setting's type and range, each shard entry
 * (a relative path inside `dir` to a file that exists, a sample count >= 1), and the source. Fails with a
 * ManifestError naming the file and the first bad field (`settings.maxSeqLength`, `train[3].file`, ...).
 */
export function readManifest(dir: string): DataManifest {
  const path = manifestPath(dir);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new ManifestError(
      path,
      null,
      code === "ENOENT"
        ? "no manifest: make the folder with the preprocess command, which writes it"
        : `cannot read it: ${(error as Error).message}`,
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new ManifestError(path, null, `not valid JSON (${(error as Error).message})`);
  }
  const manifest = checkManifest(parsed, path);
  for (const [field, shard] of shardEntries(manifest))
    if (!existsSync(shardPath(dir, shard)))
      throw new ManifestError(path, `${field}.file`, `${shardPath(dir, shard)} does not exist`);
  return manifest;
}

function shardEntries(manifest: DataManifest): [field: string, shard: ManifestShard][] {
  const entries = manifest.train.map((shard, i): [string, ManifestShard] => [`train[${i}]`, shard]);
  if (manifest.eval !== null) entries.push(["eval", manifest.eval]);
  return entries;
}

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** The checks of one manifest, each failure naming `path` and the field. */
function checkManifest(value: unknown, path: string): DataManifest {
  const fail = (field: string | null, detail: string): never => {
    throw new ManifestError(path, field, detail);
  };
  const object = (field: string, item: unknown): Json => (isObject(item) ? item : fail(field, "expected an object"));
  const integer = (field: string, item: unknown, min: number): number =>
    typeof item === "number" && Number.isSafeInteger(item) && item >= min
      ? item
      : fail(field, `expected an integer >= ${min}, got ${JSON.stringify(item)}`);
  const probability = (field: string, item: unknown): number =>
    typeof item === "number" && item >= 0 && item <= 1
      ? item
      : fail(field, `expected a number in [0, 1], got ${JSON.stringify(item)}`);
  const shard = (field: string, item: unknown): ManifestShard => {
    const entry = object(field, item);
    const file = entry.file;
    if (typeof file !== "string" || file === "") fail(`${field}.file`, "expected a path");
    const relative = file as string;
    if (isAbsolute(relative) || normalize(relative).split(sep).includes(".."))
      fail(`${field}.file`, `expected a path inside the manifest's folder, got ${JSON.stringify(relative)}`);
    return { file: relative, samples: integer(`${field}.samples`, entry.samples, 1) };
  };

  const root = isObject(value) ? value : fail(null, "expected a JSON object");
  if (root.format !== MANIFEST_FORMAT)
    fail("format", `expected ${JSON.stringify(MANIFEST_FORMAT)}, got ${JSON.stringify(root.format)}`);
  if (root.version !== MANIFEST_VERSION)
    fail("version", `expected ${MANIFEST_VERSION} (this tsgrad reads no other), got ${JSON.stringify(root.version)}`);

  const settings = object("settings", root.settings);
  const vocabSha256 = settings.vocabSha256;
  if (typeof vocabSha256 !== "string" || !/^[0-9a-f]{64}$/.test(vocabSha256))
    fail("settings.vocabSha256", `expected 64 lowercase hex digits, got ${JSON.stringify(vocabSha256)}`);
  if (typeof settings.doLowerCase !== "boolean")
    fail("settings.doLowerCase", `expected true or false, got ${JSON.stringify(settings.doLowerCase)}`);
  const checkedSettings: ManifestSettings = {
    maxSeqLength: integer("settings.maxSeqLength", settings.maxSeqLength, 5),
    maxPredictionsPerSeq: integer("settings.maxPredictionsPerSeq", settings.maxPredictionsPerSeq, 1),
    randomSeed: integer("settings.randomSeed", settings.randomSeed, Number.MIN_SAFE_INTEGER),
    dupeFactor: integer("settings.dupeFactor", settings.dupeFactor, 1),
    maskedLmProb: probability("settings.maskedLmProb", settings.maskedLmProb),
    shortSeqProb: probability("settings.shortSeqProb", settings.shortSeqProb),
    vocabSize: integer("settings.vocabSize", settings.vocabSize, 1),
    vocabSha256: vocabSha256 as string,
    doLowerCase: settings.doLowerCase as boolean,
  };

  if (!Array.isArray(root.train) || root.train.length === 0) fail("train", "expected a list of one or more shards");
  const train = (root.train as unknown[]).map((item, i) => shard(`train[${i}]`, item));
  if (root.eval === undefined) fail("eval", "expected a shard or null");
  const evalShard = root.eval === null ? null : shard("eval", root.eval);

  const source = object("source", root.source);
  if (source.kind !== "text-folder" && source.kind !== "wikipedia")
    fail("source.kind", `expected "text-folder" or "wikipedia", got ${JSON.stringify(source.kind)}`);
  return {
    format: MANIFEST_FORMAT,
    version: MANIFEST_VERSION,
    settings: checkedSettings,
    train,
    eval: evalShard,
    source: {
      kind: source.kind as ManifestSource["kind"],
      files: integer("source.files", source.files, 1),
      bytes: integer("source.bytes", source.bytes, 0),
    },
  };
}
