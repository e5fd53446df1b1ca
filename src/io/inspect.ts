// Inspecting weights: one command for every weight file tsgrad reads.
//
//   npx tsx src/io/inspect.ts FILE [--json] [--no-verify]
//
// FILE is a safetensors file or a TensorFlow checkpoint (its `.index` file or its prefix);
// the format is told by content, not by name: safetensors starts with an 8-byte
// little-endian header length followed by `{`, a checkpoint index is a LevelDB table that
// ends with the table magic number. It lists each tensor's name, dtype and shape (`--json`
// adds the byte offset and size, and for a checkpoint its shard, stored CRC and table
// layout). Where a checkpoint's data shards are present every tensor's CRC-32C is checked,
// one tensor in memory at a time, and reported per tensor; a mismatch makes the exit
// status 1 and names the file, tensor and byte offset. Tensors whose shard is absent are
// listed all the same (an index alone is enough to see what a checkpoint holds).
// A safetensors file is validated against its size, and where tsgrad wrote checksums its
// header and (unless --no-verify) every tensor's data against them, reported per tensor.

import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { endsWithTableMagic } from "./leveldb_table.ts";
import { readSafetensorsHeader, type SafetensorsError, verifySafetensorsFile } from "./safetensors.ts";
import {
  checkTfCheckpoint,
  readTfCheckpointIndex,
  tfCheckpointListingJson,
  tfCheckpointPrefix,
  tfDataShardFile,
  type TfCheckpointIndex,
  type TfTensorCheck,
} from "./tf_checkpoint.ts";

/** A file that is no weight file tsgrad can read, or no file at all. */
export class InspectError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InspectError";
  }
}

export interface InspectedTensor {
  name: string;
  /** As the format spells it: "F32" for safetensors, "DT_FLOAT" for a checkpoint. */
  dtype: string;
  shape: number[];
  /** The file that holds the tensor's bytes, and where in it. */
  file: string;
  offset: number;
  size: number;
  /** The CRC-32C verdict, for files that were checked. */
  check?: TfTensorCheck["status"];
  problem?: string;
}

export type Inspection =
  | { format: "safetensors"; file: string; metadata: Record<string, string>; tensors: InspectedTensor[] }
  | { format: "tf-checkpoint"; file: string; index: TfCheckpointIndex; tensors: InspectedTensor[] };

export interface InspectOptions {
  /** Check the CRCs of a checkpoint's data where it is present, of a safetensors file's where it has them (default true). */
  verify?: boolean;
  onProgress?: (bytesRead: number, bytesTotal: number) => void;
}

type WeightFormat = { format: "safetensors"; file: string } | { format: "tf-checkpoint"; indexFile: string };

/** The tensors of a safetensors file or TensorFlow checkpoint, told apart by content. */
export async function inspectFile(path: string, options: InspectOptions = {}): Promise<Inspection> {
  const detected = detectWeightFormat(path);
  if (detected.format === "safetensors") {
    const problems = new Map<string, SafetensorsError | undefined>();
    const { entries, metadata } =
      options.verify === false
        ? readSafetensorsHeader(detected.file)
        : verifySafetensorsFile(detected.file, {
            onTensor: (name, problem, bytesRead, bytesTotal) => {
              problems.set(name, problem);
              options.onProgress?.(bytesRead, bytesTotal);
            },
          });
    const tensors = Object.entries(entries).map(([name, entry]): InspectedTensor => {
      const problem = problems.get(name);
      return {
        name,
        dtype: entry.dtype,
        shape: entry.shape,
        file: detected.file,
        offset: entry.byteOffset,
        size: entry.byteLength,
        ...(problems.has(name) && { check: problem ? "mismatch" : "ok" }),
        ...(problem && { problem: problem.message }),
      };
    });
    return { format: "safetensors", file: detected.file, metadata, tensors };
  }
  const prefix = tfCheckpointPrefix(detected.indexFile);
  const index = await readTfCheckpointIndex(prefix);
  const checks = options.verify === false ? undefined : await checkTfCheckpoint(prefix, options.onProgress);
  const tensors = index.entries.map((entry, i): InspectedTensor => {
    const check = checks?.[i];
    return {
      name: entry.name,
      dtype: entry.dtype,
      shape: entry.shape,
      file: tfDataShardFile(prefix, entry.shardId, index.header.numShards),
      offset: entry.offset,
      size: entry.size,
      ...(check && { check: check.status, ...(check.problem !== undefined && { problem: check.problem }) }),
    };
  });
  return { format: "tf-checkpoint", file: index.indexFile, index, tensors };
}

/** Safetensors: header length, then `{`. Checkpoint: PATH or PATH.index ends with the LevelDB table magic. */
function detectWeightFormat(path: string): WeightFormat {
  const ends = readEnds(path) ?? readEnds(`${path}.index`);
  if (!ends) throw new InspectError(`${path}: no such file (nor ${path}.index)`);
  const { file, head, tail, size } = ends;
  if (size >= 9 && head[8] === 0x7b) {
    const headerLength = new DataView(head.buffer, head.byteOffset, 8).getBigUint64(0, true);
    if (headerLength <= BigInt(size - 8)) return { format: "safetensors", file };
  }
  if (endsWithTableMagic(tail)) {
    if (!file.endsWith(".index")) {
      throw new InspectError(
        `${file}: a LevelDB table, but a checkpoint index is named PREFIX.index (its data shards are found by that prefix)`,
      );
    }
    return { format: "tf-checkpoint", indexFile: file };
  }
  throw new InspectError(
    `${file}: neither a safetensors file (8-byte header length, then "{") nor a TensorFlow checkpoint index (LevelDB table magic in the last 8 bytes)`,
  );
}

/** The first 9 and last 8 bytes of a file, or undefined if there is no such file. */
function readEnds(file: string): { file: string; head: Uint8Array; tail: Uint8Array; size: number } | undefined {
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new InspectError(
      `${file}: cannot open (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`,
    );
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw new InspectError(`${file}: not a regular file`);
    const head = new Uint8Array(9);
    const tail = new Uint8Array(Math.min(8, stat.size));
    readSync(fd, head, 0, head.length, 0);
    readSync(fd, tail, 0, tail.length, stat.size - tail.length);
    return { file, head, tail, size: stat.size };
  } finally {
    closeSync(fd);
  }
}

/** The listing as JSON: format, file and per tensor its dtype, shape, byte offset and size (and CRC verdict). */
export function inspectionJson(inspection: Inspection): object {
  if (inspection.format === "safetensors") {
    const { file, metadata, tensors } = inspection;
    return {
      format: "safetensors",
      file,
      metadata,
      entries: tensors.map(({ name, dtype, shape, offset, size, check, problem }) => ({
        name,
        dtype,
        shape,
        offset,
        size,
        ...(check && { crc_check: check }),
        ...(problem !== undefined && { problem }),
      })),
    };
  }
  const listing = tfCheckpointListingJson(inspection.index) as { entries: object[] };
  const entries = listing.entries.map((entry, i) => {
    const { check, problem } = inspection.tensors[i]!;
    return { ...entry, ...(check && { crc_check: check }), ...(problem !== undefined && { problem }) };
  });
  return { format: "tf-checkpoint", file: inspection.file, ...listing, entries };
}

const USAGE = `usage: npx tsx src/io/inspect.ts FILE [--json] [--no-verify]

Lists the tensors (name, dtype, shape) of a safetensors file or a TensorFlow checkpoint
(its .index file or its prefix), told apart by content. Where a checkpoint's data shards
are present, or a safetensors file carries checksums (tsgrad writes them), every tensor's
crc32c is checked and reported (exit status 1 on a mismatch); tensors whose data shard is
absent are listed all the same.
  --json       the listing as JSON, adding each tensor's byte offset and size (for a
               checkpoint also its shard, stored crc32c and the index's table layout)
  --no-verify  list the tensors without reading their data
  --help       this text`;

const VERDICTS: Record<TfTensorCheck["status"], string> = {
  ok: "crc ok",
  mismatch: "crc MISMATCH",
  unreadable: "unreadable",
  absent: "data absent",
};

async function inspectCli(args: string[]): Promise<number> {
  const paths = args.filter((arg) => !arg.startsWith("--"));
  const unknown = args.filter((arg) => arg.startsWith("--") && !["--json", "--no-verify", "--help"].includes(arg));
  const verify = !args.includes("--no-verify");
  if (args.includes("--help") || paths.length !== 1 || unknown.length > 0) {
    console.log(USAGE);
    return args.includes("--help") && unknown.length === 0 ? 0 : 2;
  }
  const started = Date.now();
  // Progress only for checks that last: first after half a second, then twice a second and at the end.
  let shownAt = 0;
  const inspection = await inspectFile(paths[0]!, {
    verify,
    onProgress: (bytesRead, bytesTotal) => {
      const due = Date.now() - (shownAt || started) >= 500 || (shownAt > 0 && bytesRead === bytesTotal);
      if (!due) return;
      shownAt = Date.now();
      process.stderr.write(`\rchecked ${(bytesRead / 2 ** 20).toFixed(1)} / ${(bytesTotal / 2 ** 20).toFixed(1)} MiB`);
    },
  });
  if (args.includes("--json")) console.log(JSON.stringify(inspectionJson(inspection), null, 1));
  else
    for (const { name, dtype, shape, check } of inspection.tensors)
      console.log([name, dtype, `[${shape.join(", ")}]`, ...(check ? [VERDICTS[check]] : [])].join("\t"));
  const checked = inspection.tensors.filter((tensor) => tensor.check !== undefined);
  if (checked.length === 0) return 0;
  const count = (status: TfTensorCheck["status"]) => checked.filter((tensor) => tensor.check === status).length;
  process.stderr.write(
    `${shownAt > 0 ? "\n" : ""}${inspection.file}: ${count("ok")} ok, ${count("mismatch")} mismatched, ${count("unreadable")} unreadable, ${count("absent")} without data ` +
      `(${((Date.now() - started) / 1000).toFixed(1)} s)\n`,
  );
  const failed = checked.filter((tensor) => tensor.check === "mismatch" || tensor.check === "unreadable");
  for (const { problem } of failed) console.error(problem);
  return failed.length > 0 ? 1 : 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  inspectCli(process.argv.slice(2)).then(
    (status) => (process.exitCode = status),
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : error);
      process.exitCode = 1;
    },
  );
}
