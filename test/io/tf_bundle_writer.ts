// A small TensorFlow tensor_bundle writer for tests: it makes synthetic checkpoints (a fake
// BERT with Adam slots, tables split over several data blocks, snappy-compressed blocks)
// that the fixtures from real TensorFlow runs do not cover.

import { writeFileSync } from "node:fs";
import { maskedCrc32c } from "../../src/io/crc32c.ts";
import { snappyCompress } from "./snappy_compress.ts";

export interface BundleTensor {
  name: string;
  /** TensorFlow DataType enum value (1 DT_FLOAT, 3 DT_INT32, 9 DT_INT64, 19 DT_HALF, ...). */
  dtypeEnum: number;
  shape: number[];
  data: ArrayBufferView;
}

export interface BundleWriteOptions {
  /** Keys per data block; a new block starts after this many (the header key counts). */
  keysPerBlock?: number;
  restartInterval?: number;
  compression?: "none" | "snappy";
}

const TABLE_MAGIC = Uint8Array.of(0x57, 0xfb, 0x80, 0x8b, 0x24, 0x75, 0x47, 0xdb);

/** Write `PREFIX.index` and `PREFIX.data-00000-of-00001` holding `tensors`. */
export function writeTfBundle(prefix: string, tensors: BundleTensor[], options: BundleWriteOptions = {}): void {
  const sorted = [...tensors].sort((a, b) => Buffer.compare(Buffer.from(a.name), Buffer.from(b.name)));
  const dataParts: Uint8Array[] = [];
  const keys: Uint8Array[] = [new Uint8Array(0)];
  const values: Uint8Array[] = [protoMessage([varintField(1, 1), bytesField(3, protoMessage([varintField(1, 1)]))])];
  let offset = 0;
  for (const tensor of sorted) {
    const bytes = new Uint8Array(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
    const shape = protoMessage(tensor.shape.map((size) => bytesField(2, protoMessage([varintField(1, size)]))));
    const entry: Uint8Array[] = [varintField(1, tensor.dtypeEnum), bytesField(2, shape)];
    if (offset > 0) entry.push(varintField(4, offset));
    entry.push(varintField(5, bytes.length), fixed32Field(6, maskedCrc32c(bytes)));
    keys.push(new Uint8Array(Buffer.from(tensor.name)));
    values.push(protoMessage(entry));
    dataParts.push(bytes);
    offset += bytes.length;
  }
  writeFileSync(`${prefix}.data-00000-of-00001`, Buffer.concat(dataParts));
  writeFileSync(`${prefix}.index`, buildTable(keys, values, options));
}

function buildTable(keys: Uint8Array[], values: Uint8Array[], options: BundleWriteOptions): Uint8Array {
  const keysPerBlock = options.keysPerBlock ?? Infinity;
  const restartInterval = options.restartInterval ?? 16;
  const file: Uint8Array[] = [];
  let size = 0;
  const appendBlock = (contents: Uint8Array, compress: boolean): Uint8Array => {
    const stored = compress ? snappyCompress(contents) : contents;
    const typed = Buffer.concat([stored, Uint8Array.of(compress ? 1 : 0)]);
    const trailerCrc = Buffer.alloc(4);
    trailerCrc.writeUInt32LE(maskedCrc32c(typed));
    const handle = Buffer.concat([varint(size), varint(stored.length)]);
    file.push(typed, trailerCrc);
    size += typed.length + 4;
    return handle;
  };
  const indexKeys: Uint8Array[] = [];
  const indexValues: Uint8Array[] = [];
  for (let first = 0; first < keys.length; first += keysPerBlock) {
    const last = Math.min(first + keysPerBlock, keys.length);
    const block = buildBlock(keys.slice(first, last), values.slice(first, last), restartInterval);
    indexValues.push(appendBlock(block, options.compression === "snappy"));
    indexKeys.push(keys[last - 1]!); // the block's last key is a valid separator
  }
  const metaindexHandle = appendBlock(buildBlock([], [], 1), false);
  const indexHandle = appendBlock(buildBlock(indexKeys, indexValues, 1), false);
  const footer = new Uint8Array(48);
  footer.set(Buffer.concat([metaindexHandle, indexHandle]));
  footer.set(TABLE_MAGIC, 40);
  return Buffer.concat([...file, footer]);
}

function buildBlock(keys: Uint8Array[], values: Uint8Array[], restartInterval: number): Uint8Array {
  const parts: Uint8Array[] = [];
  const restarts: number[] = [];
  let size = 0;
  let previous: Uint8Array = new Uint8Array(0);
  keys.forEach((key, i) => {
    let shared = 0;
    if (i % restartInterval === 0) restarts.push(size);
    else while (shared < key.length && shared < previous.length && key[shared] === previous[shared]) shared++;
    const entry = Buffer.concat([
      varint(shared),
      varint(key.length - shared),
      varint(values[i]!.length),
      key.subarray(shared),
      values[i]!,
    ]);
    parts.push(entry);
    size += entry.length;
    previous = key;
  });
  if (restarts.length === 0) restarts.push(0);
  const tail = Buffer.alloc(4 * restarts.length + 4);
  restarts.forEach((restart, i) => tail.writeUInt32LE(restart, 4 * i));
  tail.writeUInt32LE(restarts.length, 4 * restarts.length);
  return Buffer.concat([...parts, tail]);
}

function varint(value: number): Uint8Array {
  const bytes: number[] = [];
  for (; value >= 128; value = Math.floor(value / 128)) bytes.push((value % 128) | 0x80);
  bytes.push(value);
  return Uint8Array.from(bytes);
}

const varintField = (field: number, value: number) => Buffer.concat([varint(field * 8), varint(value)]);
const bytesField = (field: number, bytes: Uint8Array) =>
  Buffer.concat([varint(field * 8 + 2), varint(bytes.length), bytes]);
const protoMessage = (fields: Uint8Array[]) => new Uint8Array(Buffer.concat(fields));

function fixed32Field(field: number, value: number): Uint8Array {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32LE(value);
  return Buffer.concat([varint(field * 8 + 5), bytes]);
}
