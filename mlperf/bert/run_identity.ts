// Which run a checkpoint belongs to (issue 35, item 3: two runs, one folder). Every checkpoint records its run's
// identity in its metadata: the seed, the model config, the global batch, the sample widths, the optimizer's rules
// and a fingerprint of the train shards. RESUME refuses another run's checkpoint, listing what differs, unless
// RESUME_ANY=1; pruning deletes only this run's checkpoints; a name another run's file holds is not reused.
//
// The run id is a hash of the identity, not a random draw: a run stopped and resumed stays one run, and the same
// run on any number of ranks writes the same bytes (the rank count is no part of it). Two runs of one identity
// follow one trajectory, so either's checkpoint resumes the other exactly.
import { createHash } from "node:crypto";
import { existsSync, readdirSync, rmSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { io } from "../../src/index.ts";
import type { BertConfig } from "../../models/bert.ts";
import type { Knobs } from "./knobs.ts";

/** What makes two runs one: the knobs that decide the trajectory of the weights, by their names. */
export interface RunIdentity {
  SEED: string;
  BS: string;
  MAX_SEQ_LENGTH: string;
  MAX_PREDICTIONS_PER_SEQ: string;
  LAMB_RULE: string;
  LR_SCHEDULE: string;
  /** The model config as JSON, keys sorted. */
  model: string;
  /** The train shards: their count and a hash of their names, sizes and checksums (`fake` without shards). */
  data: string;
  /**
   * `PACKING=3 PACKED_BS=33` for a packed run; absent for an unpacked one, so that unpacked runs keep the ids (and
   * resume the checkpoints) they had before packing existed.
   */
  packing?: string;
}

const FIELDS: readonly (keyof RunIdentity)[] = [
  "SEED",
  "BS",
  "MAX_SEQ_LENGTH",
  "MAX_PREDICTIONS_PER_SEQ",
  "LAMB_RULE",
  "LR_SCHEDULE",
  "model",
  "data",
  "packing",
];
/** What an identity without `packing` records for it. */
const UNPACKED = "off";
const PREFIX = "run.";
const ID_KEY = `${PREFIX}id`;

const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex");
const sortedJson = (value: Record<string, unknown>): string =>
  JSON.stringify(Object.fromEntries(Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))));

/**
 * The train shards' fingerprint: their names, sizes and, for safetensors shards, the checksums and settings their
 * headers record (a header read each, 0.5 ms), so that a file changed in place is another data set.
 */
export function dataFingerprint(files: readonly string[]): string {
  const lines = [...files].sort().map((path) => {
    const { size } = statSync(path);
    let header = "";
    try {
      const { entries, metadata } = io.readSafetensorsHeader(path);
      const crcs = Object.entries(entries).map(([name, entry]) => [name, entry.crc32c ?? null]);
      header = sortedJson({ ...metadata, crcs: sortedJson(Object.fromEntries(crcs)) });
    } catch {
      // a TFRecord (or no safetensors file): its name and size alone
    }
    return `${basename(path)}\t${size}\t${header}`;
  });
  return `${files.length} files, sha256 ${sha256(lines.join("\n")).slice(0, 16)}`;
}

/** This run's identity; `trainFiles` null for the phases that train on fake batches. */
export function runIdentity(knobs: Knobs, config: BertConfig, trainFiles: readonly string[] | null): RunIdentity {
  return {
    SEED: String(knobs.SEED),
    BS: String(knobs.BS),
    MAX_SEQ_LENGTH: String(knobs.MAX_SEQ_LENGTH),
    MAX_PREDICTIONS_PER_SEQ: String(knobs.MAX_PREDICTIONS_PER_SEQ),
    LAMB_RULE: knobs.LAMB_RULE,
    LR_SCHEDULE: knobs.LR_SCHEDULE,
    model: sortedJson({ ...config }),
    data: trainFiles === null ? "fake" : dataFingerprint(trainFiles),
    ...(knobs.PACKING > 0 ? { packing: `PACKING=${knobs.PACKING} PACKED_BS=${knobs.PACKED_BS}` } : {}),
  };
}

/** The id checkpoints of this identity carry: 12 hex digits of a hash of it. */
export const runId = (identity: RunIdentity): string =>
  sha256(sortedJson({ ...identity } as Record<string, unknown>)).slice(0, 12);

/** The metadata that marks a checkpoint as this run's: `run.id` and `run.<field>` for each field. */
export function identityMetadata(identity: RunIdentity): Record<string, string> {
  return {
    [ID_KEY]: runId(identity),
    ...Object.fromEntries(
      FIELDS.filter((field) => identity[field] !== undefined).map((field) => [`${PREFIX}${field}`, identity[field]]),
    ),
  };
}

/** The model config's keys whose values differ, as `key a -> b`. */
function configDifferences(recorded: string, current: string): string {
  let before: Record<string, unknown>;
  let after: Record<string, unknown>;
  try {
    before = JSON.parse(recorded) as Record<string, unknown>;
    after = JSON.parse(current) as Record<string, unknown>;
  } catch {
    return `${recorded} in the checkpoint, ${current} now`;
  }
  const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  return keys
    .filter((key) => JSON.stringify(before[key]) !== JSON.stringify(after[key]))
    .map((key) => `${key} ${JSON.stringify(before[key])} in the checkpoint, ${JSON.stringify(after[key])} now`)
    .join(", ");
}

/**
 * How a checkpoint's recorded identity differs from `identity`, one entry a field (`SEED: 7 in the checkpoint, 8
 * now`); empty when it is this run's. A checkpoint from before identities were recorded differs in every field.
 */
export function identityDifferences(metadata: Record<string, string>, identity: RunIdentity): string[] {
  if (metadata[ID_KEY] === undefined) return ["the checkpoint records no run identity (written before they were)"];
  return FIELDS.flatMap((field) => {
    const unset = field === "packing" ? UNPACKED : undefined;
    const recorded = metadata[`${PREFIX}${field}`] ?? unset;
    const current = identity[field] ?? unset ?? "(none)";
    if (recorded === current) return [];
    if (field === "model" && recorded !== undefined) return [`model: ${configDifferences(recorded, current)}`];
    return [`${field}: ${recorded ?? "(none)"} in the checkpoint, ${current} now`];
  });
}

/** The run id a checkpoint file records, undefined where it records none or cannot be read. */
export function checkpointRunId(path: string): string | undefined {
  try {
    return io.readSafetensorsHeader(path).metadata[ID_KEY];
  } catch {
    return undefined;
  }
}

/** A checkpoint written: where, and whether the plain name was another run's. */
export interface SavedCheckpoint {
  path: string;
  /** Set when `<base>.safe` held another run's file, which was left alone. */
  otherRunsFile?: string;
}

/**
 * Writes `<base>.safe` in `dir` with `write(path, overwrite)`, unless another run's file is there (or takes the
 * name while this one writes): then `<base>-<run id>.safe`. A file of this run at the name is replaced.
 */
export function saveAsOwn(
  dir: string,
  base: string,
  id: string,
  write: (path: string, overwrite: boolean) => void,
): SavedCheckpoint {
  const plain = join(dir, `${base}.safe`);
  const ours = existsSync(plain) && checkpointRunId(plain) === id;
  if (ours || !existsSync(plain)) {
    try {
      write(plain, ours);
      return { path: plain };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
  }
  const own = join(dir, `${base}-${id}.safe`);
  write(own, true);
  return { path: own, otherRunsFile: plain };
}

const STEP_CHECKPOINT = /^step_(\d+)(-[0-9a-f]+)?\.safe$/;

/**
 * Deletes this run's step checkpoints in `dir` but the newest `keep` (by step); files of other runs, and files
 * that record no run or cannot be read, are never touched. Returns the deleted paths.
 */
export function pruneRunCheckpoints(dir: string, id: string, keep: number): string[] {
  const own = readdirSync(dir)
    .map((name) => ({ name, match: STEP_CHECKPOINT.exec(name) }))
    .filter(({ name, match }) => match !== null && checkpointRunId(join(dir, name)) === id)
    .sort((a, b) => Number(a.match![1]) - Number(b.match![1]));
  const old = own.slice(0, Math.max(0, own.length - keep)).map(({ name }) => join(dir, name));
  for (const path of old) rmSync(path);
  return old;
}
