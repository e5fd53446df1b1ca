// Reading TensorFlow checkpoints in the "tensor_bundle" format (TF1 `tf.train.Saver` and
// TF2 alike), such as the MLPerf BERT init checkpoint `model.ckpt-28252`.
//
// `PREFIX.index` is a LevelDB table: the empty key holds a BundleHeaderProto (number of
// data shards, endianness, version) and every other key, a tensor name, holds a
// BundleEntryProto (dtype, shape, shard, byte offset and size in that shard, masked
// CRC-32C of the bytes). The tensors themselves lie back to back, row-major, in
// `PREFIX.data-0000S-of-0000N`; only the byte ranges asked for are read, so a 4 GB
// checkpoint costs what its selected tensors cost.
//
// Its CLI is src/io/inspect.ts's: `npx tsx src/io/inspect.ts PREFIX [--json] [--no-verify]`.

import { open, readFile, type FileHandle } from "node:fs/promises";
import { maskedCrc32c } from "./crc32c.ts";
import { hex32, parseTable, readVarint, TableFormatError, type Table } from "./leveldb_table.ts";

/** A checkpoint that cannot be read as asked: the message names the file, tensor and byte offset. */
export class TfCheckpointError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TfCheckpointError";
  }
}

/** Tensor bytes whose CRC-32C differs from the one stored in the index. */
export class TfChecksumError extends TfCheckpointError {
  constructor(message: string) {
    super(message);
    this.name = "TfChecksumError";
  }
}

type FixedWidthArrayClass = {
  new (buffer: ArrayBuffer, byteOffset: number, length: number): ArrayBufferView;
  BYTES_PER_ELEMENT: number;
};

/** TensorFlow's DataType enum (types.proto) for the dtypes a checkpoint can hold, with their storage. */
const DTYPES: Record<number, { name: string; array?: FixedWidthArrayClass; elementsPerItem?: number }> = {
  1: { name: "DT_FLOAT", array: Float32Array },
  2: { name: "DT_DOUBLE", array: Float64Array },
  3: { name: "DT_INT32", array: Int32Array },
  4: { name: "DT_UINT8", array: Uint8Array },
  5: { name: "DT_INT16", array: Int16Array },
  6: { name: "DT_INT8", array: Int8Array },
  7: { name: "DT_STRING" },
  8: { name: "DT_COMPLEX64", array: Float32Array, elementsPerItem: 2 },
  9: { name: "DT_INT64", array: BigInt64Array },
  10: { name: "DT_BOOL", array: Uint8Array },
  14: { name: "DT_BFLOAT16", array: Uint16Array },
  17: { name: "DT_UINT16", array: Uint16Array },
  18: { name: "DT_COMPLEX128", array: Float64Array, elementsPerItem: 2 },
  19: { name: "DT_HALF", array: Uint16Array },
  22: { name: "DT_UINT32", array: Uint32Array },
  23: { name: "DT_UINT64", array: BigUint64Array },
};

export function tfDTypeName(dtypeEnum: number): string {
  return DTYPES[dtypeEnum]?.name ?? `DT_UNKNOWN_${dtypeEnum}`;
}

export interface TfBundleHeader {
  numShards: number;
  endianness: "LITTLE" | "BIG";
  version: { producer: number; minConsumer: number; badConsumers: number[] };
}

export interface TfCheckpointEntry {
  name: string;
  /** TensorFlow's enum name, e.g. "DT_FLOAT". */
  dtype: string;
  dtypeEnum: number;
  shape: number[];
  shardId: number;
  /** Byte offset and size of the tensor in its data shard. */
  offset: number;
  size: number;
  /** TensorFlow's masked CRC-32C of the stored tensor (for DT_STRING, of its length-prefixed form). */
  crc32cMasked: number;
  /** Number of slices of a partitioned variable (0 for an ordinary tensor). */
  slices: number;
}

export interface TfCheckpointIndex {
  indexFile: string;
  header: TfBundleHeader;
  table: Table;
  /** Tensors in key (bytewise name) order. */
  entries: TfCheckpointEntry[];
}

/**
 * Element storage: a typed array for numbers (16-bit floats as raw bits, complex as interleaved pairs), one Uint8Array
 * per string.
 */
export type TfTensorData =
  | Float32Array
  | Float64Array
  | Int32Array
  | Int16Array
  | Int8Array
  | Uint8Array
  | Uint16Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array
  | Uint8Array[];

export interface TfTensor {
  dtype: string;
  shape: number[];
  data: TfTensorData;
}

export interface ReadTfCheckpointOptions {
  /** Which tensors to read; the others' bytes are never touched. */
  filter?: (name: string) => boolean;
  /** Called after each tensor with the bytes read so far and in all. */
  onProgress?: (bytesRead: number, bytesTotal: number, name: string) => void;
}

/** The checkpoint prefix, given either itself or its `.index` file. */
export function tfCheckpointPrefix(prefixOrIndex: string): string {
  return prefixOrIndex.endsWith(".index") ? prefixOrIndex.slice(0, -".index".length) : prefixOrIndex;
}

export function tfDataShardFile(prefix: string, shardId: number, numShards: number): string {
  const pad = (n: number) => String(n).padStart(5, "0");
  return `${tfCheckpointPrefix(prefix)}.data-${pad(shardId)}-of-${pad(numShards)}`;
}

/** Parse `PREFIX.index` (checking every block CRC): the bundle header, the table layout and the entries. */
export async function readTfCheckpointIndex(prefix: string): Promise<TfCheckpointIndex> {
  const indexFile = `${tfCheckpointPrefix(prefix)}.index`;
  const table = parseTable(new Uint8Array(await readFile(indexFile)), indexFile);
  let header: TfBundleHeader | undefined;
  const entries: TfCheckpointEntry[] = [];
  const decoder = new TextDecoder("utf-8", { fatal: false });
  for (const { key, value } of table.entries) {
    if (key.length === 0) header = decodeHeader(value, `${indexFile}: bundle header`);
    else {
      const name = decoder.decode(key);
      entries.push({ name, ...decodeEntry(value, `${indexFile}: entry "${name}"`) });
    }
  }
  if (!header) throw new TfCheckpointError(`${indexFile}: no bundle header (the table has no empty key)`);
  for (const entry of entries) {
    if (entry.shardId >= header.numShards) {
      throw new TfCheckpointError(
        `${indexFile}: entry "${entry.name}" is in shard ${entry.shardId} of a ${header.numShards}-shard bundle`,
      );
    }
  }
  return { indexFile, header, table, entries };
}

/** The tensors of a checkpoint (name, dtype, shape, shard, offset, size), without reading their data. */
export async function listTfCheckpoint(prefix: string): Promise<TfCheckpointEntry[]> {
  return (await readTfCheckpointIndex(prefix)).entries;
}

/** Read the selected tensors of a checkpoint, checking each one's CRC-32C. */
export async function readTfCheckpoint(
  prefix: string,
  options: ReadTfCheckpointOptions = {},
): Promise<Map<string, TfTensor>> {
  const { header, entries } = await readTfCheckpointIndex(prefix);
  const wanted = entries.filter((entry) => options.filter?.(entry.name) ?? true);
  if (header.endianness !== "LITTLE" && wanted.length > 0) {
    throw new TfCheckpointError(`${prefix}: big-endian bundles are not supported`);
  }
  const bytesTotal = wanted.reduce((sum, entry) => sum + entry.size, 0);
  let bytesRead = 0;
  const shards = new DataShards(prefix, header.numShards);
  const tensors = new Map<string, TfTensor>();
  try {
    for (const entry of wanted) {
      const shard = await shards.of(entry);
      const bytes = await readTensorBytes(shard, entry);
      tensors.set(entry.name, { dtype: entry.dtype, shape: entry.shape, data: decodeTensor(bytes, entry, shard.file) });
      bytesRead += entry.size;
      options.onProgress?.(bytesRead, bytesTotal, entry.name);
    }
  } finally {
    await shards.close();
  }
  return tensors;
}

/** How one tensor's stored bytes compare with its index entry. */
export interface TfTensorCheck {
  name: string;
  /** The data shard that holds (or would hold) the tensor. */
  file: string;
  offset: number;
  size: number;
  /**
   * "absent": the data shard does not exist; "unreadable": it exists but the bytes cannot be had (truncated,
   * partitioned).
   */
  status: "ok" | "mismatch" | "unreadable" | "absent";
  /** Why the status is not "ok", naming the file, tensor and byte offset. */
  problem?: string;
}

/**
 * Check every tensor's CRC-32C against its index entry, one tensor in memory at a time.
 * Unlike readTfCheckpoint, a bad or missing tensor is reported, not thrown, so every tensor gets a verdict.
 */
export async function checkTfCheckpoint(
  prefix: string,
  onProgress?: ReadTfCheckpointOptions["onProgress"],
): Promise<TfTensorCheck[]> {
  const { header, entries } = await readTfCheckpointIndex(prefix);
  const bytesTotal = entries.reduce((sum, entry) => sum + entry.size, 0);
  let bytesRead = 0;
  const shards = new DataShards(prefix, header.numShards);
  const checks: TfTensorCheck[] = [];
  try {
    for (const entry of entries) {
      const file = tfDataShardFile(prefix, entry.shardId, header.numShards);
      const check = { name: entry.name, file, offset: entry.offset, size: entry.size };
      try {
        if (header.endianness !== "LITTLE")
          throw new TfCheckpointError(`${file}: tensor "${entry.name}": big-endian bundles are not supported`);
        decodeTensor(await readTensorBytes(await shards.of(entry), entry), entry, file);
        checks.push({ ...check, status: "ok" });
      } catch (error) {
        // TableFormatError: a DT_STRING record whose length varints are garbled.
        if (!(error instanceof TfCheckpointError || error instanceof TableFormatError)) throw error;
        const status =
          error instanceof TfChecksumError
            ? "mismatch"
            : error instanceof TfMissingShardError
              ? "absent"
              : "unreadable";
        checks.push({ ...check, status, problem: status === "absent" ? `${file}: absent` : error.message });
      }
      bytesRead += entry.size;
      onProgress?.(bytesRead, bytesTotal, entry.name);
    }
  } finally {
    await shards.close();
  }
  return checks;
}

/** A data shard that does not exist (as with a checkpoint whose index alone was copied). */
class TfMissingShardError extends TfCheckpointError {}

interface DataShard {
  file: string;
  handle: FileHandle;
  fileSize: number;
}

/** The data shards of a bundle, each opened once, on the first tensor that needs it. */
class DataShards {
  private readonly opened = new Map<number, Promise<DataShard>>();

  constructor(
    private readonly prefix: string,
    private readonly numShards: number,
  ) {}

  of(entry: TfCheckpointEntry): Promise<DataShard> {
    let shard = this.opened.get(entry.shardId);
    if (!shard) {
      const file = tfDataShardFile(this.prefix, entry.shardId, this.numShards);
      shard = open(file, "r").then(
        async (handle) => ({ file, handle, fileSize: (await handle.stat()).size }),
        (error: NodeJS.ErrnoException) => {
          const message = `${file}: cannot open the data shard of tensor "${entry.name}" (${error.code ?? error.message})`;
          throw error.code === "ENOENT" ? new TfMissingShardError(message) : new TfCheckpointError(message);
        },
      );
      this.opened.set(entry.shardId, shard);
    }
    return shard;
  }

  async close(): Promise<void> {
    for (const shard of this.opened.values())
      await shard.then(
        (opened) => opened.handle.close(),
        () => undefined,
      );
  }
}

async function readTensorBytes(shard: DataShard, entry: TfCheckpointEntry): Promise<Uint8Array> {
  const where = `${shard.file}: tensor "${entry.name}" at byte ${entry.offset} (${entry.size} bytes)`;
  if (entry.slices > 0)
    throw new TfCheckpointError(`${where}: partitioned variables (${entry.slices} slices) are not supported`);
  if (entry.offset + entry.size > shard.fileSize) {
    throw new TfCheckpointError(`${where}: runs past the end of the ${shard.fileSize}-byte file (truncated?)`);
  }
  // A fresh buffer per tensor keeps its typed-array view aligned.
  const bytes = new Uint8Array(entry.size);
  for (let done = 0; done < entry.size; ) {
    const { bytesRead } = await shard.handle.read(bytes, done, entry.size - done, entry.offset + done);
    if (bytesRead === 0) throw new TfCheckpointError(`${where}: file ended after ${done} bytes`);
    done += bytesRead;
  }
  return bytes;
}

function decodeTensor(bytes: Uint8Array, entry: TfCheckpointEntry, file: string): TfTensorData {
  const where = `${file}: tensor "${entry.name}" at byte ${entry.offset}`;
  const elements = entry.shape.reduce((product, dim) => product * dim, 1);
  const dtype = DTYPES[entry.dtypeEnum];
  if (dtype && !dtype.array) return decodeStrings(bytes, elements, entry, where);
  const computed = maskedCrc32c(bytes);
  if (computed !== entry.crc32cMasked) {
    throw new TfChecksumError(
      `${where}: masked crc32c stored ${hex32(entry.crc32cMasked)} but computed ${hex32(computed)}`,
    );
  }
  if (!dtype?.array) throw new TfCheckpointError(`${where}: dtype ${entry.dtype} cannot be read`);
  const length = elements * (dtype.elementsPerItem ?? 1);
  if (length * dtype.array.BYTES_PER_ELEMENT !== bytes.length) {
    throw new TfCheckpointError(
      `${where}: ${bytes.length} bytes do not hold ${entry.dtype} [${entry.shape.join(", ")}]`,
    );
  }
  return new dtype.array(bytes.buffer as ArrayBuffer, bytes.byteOffset, length) as TfTensorData;
}

/**
 * DT_STRING storage: the lengths as varint64s, the masked CRC-32C of those lengths, then the
 * bytes. The entry's CRC covers each length as a little-endian uint32, then the stored length
 * checksum, then the bytes: not the bytes on disk.
 */
function decodeStrings(bytes: Uint8Array, elements: number, entry: TfCheckpointEntry, where: string): Uint8Array[] {
  const lengths: number[] = [];
  let pos = 0;
  for (let i = 0; i < elements; i++) {
    const length = readVarint(bytes, pos, `${where}: string length ${i}`);
    lengths.push(length.value);
    pos = length.next;
  }
  const dataAt = pos + 4;
  const total = lengths.reduce((sum, length) => sum + length, 0);
  if (dataAt + total !== bytes.length) {
    throw new TfCheckpointError(
      `${where}: ${elements} strings of ${total} bytes do not fill the ${bytes.length}-byte record`,
    );
  }
  const covered = new Uint8Array(4 * elements + 4 + total);
  const view = new DataView(covered.buffer);
  lengths.forEach((length, i) => view.setUint32(4 * i, length, true));
  covered.set(bytes.subarray(pos), 4 * elements);
  const computed = maskedCrc32c(covered);
  if (computed !== entry.crc32cMasked) {
    throw new TfChecksumError(
      `${where}: masked crc32c stored ${hex32(entry.crc32cMasked)} but computed ${hex32(computed)}`,
    );
  }
  const strings: Uint8Array[] = [];
  for (let i = 0, at = dataAt; i < elements; at += lengths[i]!, i++) strings.push(bytes.slice(at, at + lengths[i]!));
  return strings;
}

// Protocol buffers, just enough of the wire format for the two bundle messages.

type ProtoField =
  | { field: number; varint: number; bytes?: undefined }
  | { field: number; bytes: Uint8Array; varint?: undefined }
  | { field: number; fixed: number; varint?: undefined; bytes?: undefined };

function* protoFields(message: Uint8Array, what: string): Generator<ProtoField> {
  let pos = 0;
  while (pos < message.length) {
    const tag = readVarint(message, pos, what);
    const field = Math.floor(tag.value / 8);
    const wireType = tag.value & 7;
    pos = tag.next;
    if (wireType === 0) {
      const value = readVarint(message, pos, `${what}: field ${field}`);
      pos = value.next;
      yield { field, varint: value.value };
    } else if (wireType === 2) {
      const length = readVarint(message, pos, `${what}: field ${field}`);
      pos = length.next + length.value;
      if (pos > message.length)
        throw new TfCheckpointError(`${what}: field ${field} runs past the end of the ${message.length}-byte message`);
      yield { field, bytes: message.subarray(length.next, pos) };
    } else if (wireType === 5 || wireType === 1) {
      const width = wireType === 5 ? 4 : 8;
      if (pos + width > message.length)
        throw new TfCheckpointError(`${what}: field ${field} runs past the end of the ${message.length}-byte message`);
      // No bundle field is a fixed64, so only fixed32 values are handed on.
      if (width === 4)
        yield { field, fixed: new DataView(message.buffer, message.byteOffset + pos, 4).getUint32(0, true) };
      pos += width;
    } else {
      throw new TfCheckpointError(`${what}: unsupported protobuf wire type ${wireType} at byte ${pos}`);
    }
  }
}

/** Repeated varint fields come either one per tag or packed into one length-delimited field. */
function pushVarints(into: number[], field: ProtoField, what: string): void {
  if (field.varint !== undefined) into.push(field.varint);
  else if (field.bytes) {
    for (let pos = 0; pos < field.bytes.length; ) {
      const value = readVarint(field.bytes, pos, what);
      into.push(value.value);
      pos = value.next;
    }
  }
}

function decodeHeader(message: Uint8Array, what: string): TfBundleHeader {
  const header: TfBundleHeader = {
    numShards: 0,
    endianness: "LITTLE",
    version: { producer: 0, minConsumer: 0, badConsumers: [] },
  };
  for (const field of protoFields(message, what)) {
    if (field.field === 1 && field.varint !== undefined) header.numShards = field.varint;
    else if (field.field === 2 && field.varint !== undefined) header.endianness = field.varint === 1 ? "BIG" : "LITTLE";
    else if (field.field === 3 && field.bytes) {
      for (const versionField of protoFields(field.bytes, `${what}: version`)) {
        if (versionField.field === 1 && versionField.varint !== undefined)
          header.version.producer = versionField.varint;
        else if (versionField.field === 2 && versionField.varint !== undefined)
          header.version.minConsumer = versionField.varint;
        else if (versionField.field === 3)
          pushVarints(header.version.badConsumers, versionField, `${what}: bad_consumers`);
      }
    }
  }
  return header;
}

function decodeEntry(message: Uint8Array, what: string): Omit<TfCheckpointEntry, "name"> {
  const entry = {
    dtype: "",
    dtypeEnum: 0,
    shape: [] as number[],
    shardId: 0,
    offset: 0,
    size: 0,
    crc32cMasked: 0,
    slices: 0,
  };
  for (const field of protoFields(message, what)) {
    if (field.field === 1 && field.varint !== undefined) entry.dtypeEnum = field.varint;
    else if (field.field === 2 && field.bytes) entry.shape = decodeShape(field.bytes, `${what}: shape`);
    else if (field.field === 3 && field.varint !== undefined) entry.shardId = field.varint;
    else if (field.field === 4 && field.varint !== undefined) entry.offset = field.varint;
    else if (field.field === 5 && field.varint !== undefined) entry.size = field.varint;
    else if (field.field === 6 && "fixed" in field) entry.crc32cMasked = field.fixed;
    else if (field.field === 7) entry.slices++;
  }
  entry.dtype = tfDTypeName(entry.dtypeEnum);
  return entry;
}

function decodeShape(message: Uint8Array, what: string): number[] {
  const shape: number[] = [];
  for (const field of protoFields(message, what)) {
    if (field.field === 3 && field.varint) throw new TfCheckpointError(`${what}: unknown rank`);
    if (field.field !== 2 || !field.bytes) continue;
    let size = 0;
    for (const dimField of protoFields(field.bytes, `${what}: dim ${shape.length}`)) {
      if (dimField.field === 1 && dimField.varint !== undefined) size = dimField.varint;
    }
    shape.push(size);
  }
  return shape;
}

/** The listing as JSON, with the field names of the reference listings (`*.listing.json`). */
export function tfCheckpointListingJson(index: TfCheckpointIndex): object {
  const { header, table } = index;
  const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  return {
    header: {
      num_shards: header.numShards,
      endianness: header.endianness,
      version: {
        producer: header.version.producer,
        min_consumer: header.version.minConsumer,
        bad_consumers: header.version.badConsumers,
      },
    },
    table: {
      file_size: table.fileSize,
      metaindex_handle: [table.metaindexHandle.offset, table.metaindexHandle.size],
      metaindex_entries: table.metaindexEntries.map((entry) => text(entry.key)),
      index_handle: [table.indexHandle.offset, table.indexHandle.size],
      index_restarts: table.indexRestarts,
      data_blocks: table.dataBlocks.map((block) => ({
        offset: block.offset,
        size: block.size,
        compression: block.compression,
        entries: block.entries,
        restarts: block.restarts,
        index_separator: text(block.indexSeparator),
      })),
    },
    entries: index.entries.map((entry) => ({
      name: entry.name,
      dtype: entry.dtype,
      dtype_enum: entry.dtypeEnum,
      shape: entry.shape,
      shard_id: entry.shardId,
      offset: entry.offset,
      size: entry.size,
      crc32c_masked: hex32(entry.crc32cMasked),
    })),
  };
}
