// LevelDB SSTable reading: the on-disk format of a TensorFlow checkpoint's `.index` file.
//
// Layout: data blocks, a metaindex block, an index block (one entry per data block: a
// separator key and the block's handle), then a 48-byte footer holding the metaindex and
// index handles and a magic number. Every block is followed by a 5-byte trailer: the
// compression type (0 none, 1 snappy) and the masked CRC-32C of the stored bytes plus
// that type byte. Inside a block, keys share a prefix with the previous key except at
// restart points, whose offsets (u32 each) and count (u32) end the block.

import { maskedCrc32c } from "./crc32c.ts";
import { snappyDecompress } from "./snappy.ts";

/** A table that is not a well-formed LevelDB SSTable; the message names the file and byte offset. */
export class TableFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TableFormatError";
  }
}

/** A block whose stored CRC-32C does not match its bytes. */
export class TableChecksumError extends TableFormatError {
  constructor(message: string) {
    super(message);
    this.name = "TableChecksumError";
  }
}

export interface BlockHandle {
  offset: number;
  size: number;
}

export interface TableEntry {
  key: Uint8Array;
  value: Uint8Array;
}

export type BlockCompression = "none" | "snappy";

export interface DataBlockInfo {
  offset: number;
  size: number;
  compression: BlockCompression;
  /** Number of key/value entries in the block. */
  entries: number;
  restarts: number;
  /** The index block's key for this block: a separator >= its last key, not necessarily a real key. */
  indexSeparator: Uint8Array;
}

export interface Table {
  fileSize: number;
  metaindexHandle: BlockHandle;
  indexHandle: BlockHandle;
  metaindexEntries: TableEntry[];
  indexRestarts: number;
  dataBlocks: DataBlockInfo[];
  /** Every key/value pair of every data block, in table (sorted key) order. */
  entries: TableEntry[];
}

const FOOTER_SIZE = 48;
const BLOCK_TRAILER_SIZE = 5;
const TABLE_MAGIC = [0x57, 0xfb, 0x80, 0x8b, 0x24, 0x75, 0x47, 0xdb]; // 0xdb4775248b80fb57, little-endian

/**
 * Read a little-endian base-128 varint at `pos` (as protobuf and LevelDB write them).
 * Values past 2^53 are refused since they cannot be held exactly in a number.
 */
export function readVarint(bytes: Uint8Array, pos: number, what: string): { value: number; next: number } {
  let value = 0;
  for (let i = 0; i < 10; i++) {
    if (pos + i >= bytes.length) throw new TableFormatError(`${what}: varint runs past the end at byte ${pos}`);
    const byte = bytes[pos + i]!;
    value += (byte & 0x7f) * 2 ** (7 * i);
    if (byte < 0x80) {
      if (value > Number.MAX_SAFE_INTEGER) throw new TableFormatError(`${what}: varint at byte ${pos} exceeds 2^53`);
      return { value, next: pos + i + 1 };
    }
  }
  throw new TableFormatError(`${what}: varint at byte ${pos} is longer than 10 bytes`);
}

/** Whether `tail` (a file's last bytes, at least 8) ends with the table magic number, as every SSTable does. */
export function endsWithTableMagic(tail: Uint8Array): boolean {
  return (
    tail.length >= TABLE_MAGIC.length &&
    TABLE_MAGIC.every((byte, i) => tail[tail.length - TABLE_MAGIC.length + i] === byte)
  );
}

/** Parse a whole SSTable held in memory; `file` names it in errors. Checks every block's CRC. */
export function parseTable(bytes: Uint8Array, file: string): Table {
  if (bytes.length < FOOTER_SIZE) {
    throw new TableFormatError(`${file}: ${bytes.length} bytes is too short for a table footer (${FOOTER_SIZE} bytes)`);
  }
  const footerAt = bytes.length - FOOTER_SIZE;
  if (!endsWithTableMagic(bytes))
    throw new TableFormatError(`${file}: bad table magic number in the footer at byte ${bytes.length - 8}`);
  const metaindex = readBlockHandle(bytes, footerAt, `${file}: footer metaindex handle`);
  const index = readBlockHandle(bytes, metaindex.next, `${file}: footer index handle`);
  const metaindexBlock = parseBlock(
    readBlock(bytes, metaindex.handle, file, "metaindex").contents,
    metaindex.handle.offset,
    file,
  );
  const indexBlock = parseBlock(readBlock(bytes, index.handle, file, "index").contents, index.handle.offset, file);

  const dataBlocks: DataBlockInfo[] = [];
  const entries: TableEntry[] = [];
  for (const { key, value } of indexBlock.entries) {
    const { handle } = readBlockHandle(value, 0, `${file}: index entry for a data block`);
    const { contents, compression } = readBlock(bytes, handle, file, "data");
    const block = parseBlock(contents, handle.offset, file);
    dataBlocks.push({
      ...handle,
      compression,
      entries: block.entries.length,
      restarts: block.restarts,
      indexSeparator: key,
    });
    entries.push(...block.entries);
  }
  return {
    fileSize: bytes.length,
    metaindexHandle: metaindex.handle,
    indexHandle: index.handle,
    metaindexEntries: metaindexBlock.entries,
    indexRestarts: indexBlock.restarts,
    dataBlocks,
    entries,
  };
}

function readBlockHandle(bytes: Uint8Array, pos: number, what: string): { handle: BlockHandle; next: number } {
  const offset = readVarint(bytes, pos, what);
  const size = readVarint(bytes, offset.next, what);
  return { handle: { offset: offset.value, size: size.value }, next: size.next };
}

/** The stored bytes of a block after checking its trailer CRC, decompressed if need be. */
function readBlock(
  bytes: Uint8Array,
  handle: BlockHandle,
  file: string,
  kind: string,
): { contents: Uint8Array; compression: BlockCompression } {
  const { offset, size } = handle;
  const where = `${file}: ${kind} block at byte ${offset} (${size} bytes)`;
  if (offset + size + BLOCK_TRAILER_SIZE > bytes.length) {
    throw new TableFormatError(`${where} with its trailer runs past the end of the ${bytes.length}-byte file`);
  }
  const typeAt = offset + size;
  const stored = new DataView(bytes.buffer, bytes.byteOffset + typeAt + 1, 4).getUint32(0, true);
  const computed = maskedCrc32c(bytes.subarray(offset, typeAt + 1));
  if (stored !== computed) {
    throw new TableChecksumError(`${where}: masked crc32c stored ${hex32(stored)} but computed ${hex32(computed)}`);
  }
  const storedBytes = bytes.subarray(offset, typeAt);
  const type = bytes[typeAt];
  if (type === 0) return { contents: storedBytes, compression: "none" };
  if (type === 1) return { contents: snappyDecompress(storedBytes, where), compression: "snappy" };
  throw new TableFormatError(`${where}: unknown compression type ${type} at byte ${typeAt}`);
}

/** Entries and restart count of a (decompressed) block; `blockOffset` places errors in the file. */
function parseBlock(
  contents: Uint8Array,
  blockOffset: number,
  file: string,
): { entries: TableEntry[]; restarts: number } {
  const where = `${file}: block at byte ${blockOffset}`;
  if (contents.length < 4) throw new TableFormatError(`${where}: ${contents.length} bytes cannot hold a restart count`);
  const view = new DataView(contents.buffer, contents.byteOffset, contents.length);
  const restarts = view.getUint32(contents.length - 4, true);
  const restartsAt = contents.length - 4 - 4 * restarts;
  if (restarts === 0 || restartsAt < 0) {
    throw new TableFormatError(`${where}: restart count ${restarts} does not fit in a ${contents.length}-byte block`);
  }
  const restartOffsets = new Set<number>();
  for (let i = 0; i < restarts; i++) restartOffsets.add(view.getUint32(restartsAt + 4 * i, true));

  const entries: TableEntry[] = [];
  let previousKey = new Uint8Array(0);
  let pos = 0;
  while (pos < restartsAt) {
    const entryAt = pos;
    const what = `${where}: entry at block byte ${entryAt}`;
    const shared = readVarint(contents, pos, what);
    const unshared = readVarint(contents, shared.next, what);
    const valueLength = readVarint(contents, unshared.next, what);
    pos = valueLength.next;
    if (shared.value > previousKey.length || (restartOffsets.has(entryAt) && shared.value !== 0)) {
      throw new TableFormatError(
        `${what}: shares ${shared.value} key bytes with a ${previousKey.length}-byte previous key`,
      );
    }
    if (pos + unshared.value + valueLength.value > restartsAt) {
      throw new TableFormatError(`${what}: key and value run into the restart array at block byte ${restartsAt}`);
    }
    const key = new Uint8Array(shared.value + unshared.value);
    key.set(previousKey.subarray(0, shared.value));
    key.set(contents.subarray(pos, pos + unshared.value), shared.value);
    pos += unshared.value;
    entries.push({ key, value: contents.subarray(pos, pos + valueLength.value) });
    pos += valueLength.value;
    previousKey = key;
  }
  return { entries, restarts };
}

export function hex32(value: number): string {
  return `0x${value.toString(16).padStart(8, "0")}`;
}
