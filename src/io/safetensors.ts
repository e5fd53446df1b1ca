// The safetensors format over plain typed arrays (no tensors, no framework): an 8-byte
// little-endian header length N, N bytes of JSON (`{name: {dtype, shape, data_offsets}}`
// plus an optional `__metadata__` string map, padded with spaces to 8-byte alignment),
// then the tensors' bytes, little-endian, row-major, back to back without holes.
//
// Checksums (tsgrad's, within the format: other readers see two more kinds of metadata):
// `__metadata__["crc32c.<name>"]` is the CRC-32C of tensor <name>'s bytes and
// `__metadata__.crc32c` that of the header JSON as written with this value "00000000"
// (8 lowercase hex digits each). Files tsgrad writes carry them unless told not to; a file
// that carries them is verified when read, one without them (another writer's) is read as is.

import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { type AtomicWriteOptions, writeFileAtomicFrom } from "./atomic_file.ts";
import { crc32c } from "./crc32c.ts";

/** The typed array that holds each dtype's elements (16-bit floats as raw bits). */
export interface SafetensorsArrays {
  F64: Float64Array;
  F32: Float32Array;
  F16: Uint16Array;
  BF16: Uint16Array;
  I64: BigInt64Array;
  U64: BigUint64Array;
  I32: Int32Array;
  U32: Uint32Array;
  I16: Int16Array;
  U16: Uint16Array;
  I8: Int8Array;
  U8: Uint8Array;
  BOOL: Uint8Array;
}
export type SafetensorsDType = keyof SafetensorsArrays;

export type SafetensorsTensor = {
  [D in SafetensorsDType]: { dtype: D; shape: number[]; data: SafetensorsArrays[D] };
}[SafetensorsDType];

export interface SafetensorsContents {
  tensors: Record<string, SafetensorsTensor>;
  /** The metadata as written, without the checksums. */
  metadata: Record<string, string>;
  /** Whether the file carried checksums (and so was verified). */
  checksummed: boolean;
}

/** Options of the writers. */
export interface SafetensorsWriteOptions extends AtomicWriteOptions {
  /** Write each tensor's and the header's CRC-32C into the metadata (default true). */
  checksums?: boolean;
}

type TypedArrayClass = {
  new (buffer: ArrayBuffer, byteOffset: number, length: number): ArrayBufferView;
  BYTES_PER_ELEMENT: number;
};

const ARRAY_CLASSES: Record<SafetensorsDType, TypedArrayClass> = {
  F64: Float64Array,
  F32: Float32Array,
  F16: Uint16Array,
  BF16: Uint16Array,
  I64: BigInt64Array,
  U64: BigUint64Array,
  I32: Int32Array,
  U32: Uint32Array,
  I16: Int16Array,
  U16: Uint16Array,
  I8: Int8Array,
  U8: Uint8Array,
  BOOL: Uint8Array,
};

// Typed arrays use the host's byte order and the format is little-endian.
if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1)
  throw new Error("safetensors: big-endian hosts are not supported");

/** A malformed safetensors file or tensor; names the file, the tensor and the byte offset. */
export class SafetensorsError extends Error {
  constructor(
    readonly source: string,
    readonly tensor: string | undefined,
    readonly byteOffset: number,
    detail: string,
  ) {
    super(`${source}: ${tensor === undefined ? "" : `tensor "${tensor}", `}byte offset ${byteOffset}: ${detail}`);
    this.name = "SafetensorsError";
  }
}

const HEADER_CRC_KEY = "crc32c";
const tensorCrcKey = (name: string): string => `${HEADER_CRC_KEY}.${name}`;
const isChecksumKey = (key: string): boolean => key === HEADER_CRC_KEY || key.startsWith(`${HEADER_CRC_KEY}.`);
const hex32 = (value: number): string => value.toString(16).padStart(8, "0");
const UNKNOWN_CRC = "00000000";
const utf8 = new TextEncoder();

function isDType(name: unknown): name is SafetensorsDType {
  return typeof name === "string" && Object.hasOwn(ARRAY_CLASSES, name);
}

function elementCount(shape: readonly number[]): number {
  return shape.reduce((product, dim) => product * dim, 1);
}

function validShape(shape: unknown): shape is number[] {
  return Array.isArray(shape) && shape.every((dim) => Number.isSafeInteger(dim) && dim >= 0);
}

/** A tensor to write whose bytes come in pieces: `write` hands `emit` its data in order (all of it, no more). */
export interface SafetensorsStreamedTensor {
  dtype: SafetensorsDType;
  shape: number[];
  write(emit: (piece: ArrayBufferView) => void): void;
}

/** A header as JSON: the metadata, then each tensor's entry in the order of its data. */
interface HeaderJson {
  __metadata__: Record<string, string>;
  entries: Record<string, { dtype: SafetensorsDType; shape: number[]; data_offsets: [number, number] }>;
}

/**
 * The header for tensors of these dtypes and shapes, and the order their data follows in: widest elements first,
 * so that every tensor's data starts aligned to its element size.
 */
function layoutSafetensors(
  tensors: Record<string, { dtype: unknown; shape: unknown; data?: ArrayBufferView & { length: number } }>,
  metadata: Record<string, string>,
): { json: HeaderJson; names: string[]; bytes: Map<string, number> } {
  const source = "<encode>";
  for (const [name, value] of Object.entries(metadata)) {
    if (typeof value !== "string")
      throw new SafetensorsError(source, undefined, 0, `__metadata__.${name} is ${typeof value}, not a string`);
    if (isChecksumKey(name))
      throw new SafetensorsError(source, undefined, 0, `__metadata__.${name}: the crc32c keys are the writer's`);
  }
  const width = (name: string) => {
    const { dtype } = tensors[name]!;
    return isDType(dtype) ? ARRAY_CLASSES[dtype].BYTES_PER_ELEMENT : 0;
  };
  const names = Object.keys(tensors).sort((a, b) => width(b) - width(a));
  const json: HeaderJson = { __metadata__: { ...metadata }, entries: {} };
  const bytes = new Map<string, number>();
  let dataLength = 0;
  for (const name of names) {
    if (name === "__metadata__") throw new SafetensorsError(source, name, 0, "the name __metadata__ is reserved");
    const { dtype, shape, data } = tensors[name]!;
    if (!isDType(dtype)) throw new SafetensorsError(source, name, dataLength, `unknown dtype ${String(dtype)}`);
    if (!validShape(shape))
      throw new SafetensorsError(source, name, dataLength, `invalid shape ${JSON.stringify(shape)}`);
    // (a tensor given whole: its array must be its dtype's and hold its shape)
    const arrayClass = ARRAY_CLASSES[dtype];
    if (
      data !== undefined &&
      !(data instanceof (arrayClass as unknown as abstract new (...args: never[]) => unknown))
    ) {
      throw new SafetensorsError(
        source,
        name,
        dataLength,
        `${dtype} data must be a ${arrayClass.name}, got ${data?.constructor?.name}`,
      );
    }
    if (data !== undefined && data.length !== elementCount(shape)) {
      throw new SafetensorsError(
        source,
        name,
        dataLength,
        `shape [${shape.join(", ")}] needs ${elementCount(shape)} elements, data has ${data.length}`,
      );
    }
    const byteLength = elementCount(shape) * ARRAY_CLASSES[dtype].BYTES_PER_ELEMENT;
    json.entries[name] = { dtype, shape, data_offsets: [dataLength, dataLength + byteLength] };
    bytes.set(name, byteLength);
    dataLength += byteLength;
  }
  return { json, names, bytes };
}

/**
 * The header bytes (length, JSON, padding). With `crcs` (each tensor's CRC-32C, in the data's order) the metadata
 * also holds them and the header's own; a header rendered with placeholder CRCs has the length of the final one.
 */
function renderHeader({ __metadata__, entries }: HeaderJson, crcs: Map<string, number> | undefined): Uint8Array {
  let text: string;
  if (crcs === undefined) {
    text = JSON.stringify(Object.keys(__metadata__).length > 0 ? { __metadata__, ...entries } : entries);
  } else {
    const metadata: Record<string, string> = { ...__metadata__ };
    for (const [name, crc] of crcs) metadata[tensorCrcKey(name)] = hex32(crc);
    metadata[HEADER_CRC_KEY] = UNKNOWN_CRC;
    const json = { __metadata__: metadata, ...entries };
    metadata[HEADER_CRC_KEY] = hex32(crc32c(utf8.encode(JSON.stringify(json))));
    text = JSON.stringify(json);
  }
  const bytes = utf8.encode(text);
  const headerLength = Math.ceil(bytes.length / 8) * 8;
  const header = new Uint8Array(8 + headerLength);
  new DataView(header.buffer).setBigUint64(0, BigInt(headerLength), true);
  header.fill(0x20, 8);
  header.set(bytes, 8);
  return header;
}

const bytesOf = (view: ArrayBufferView): Uint8Array => new Uint8Array(view.buffer, view.byteOffset, view.byteLength);

/** Serialises `tensors` (and string `metadata`) into the bytes of a safetensors file. */
export function encodeSafetensors(
  tensors: Record<string, SafetensorsTensor>,
  metadata: Record<string, string> = {},
  { checksums = true }: SafetensorsWriteOptions = {},
): Uint8Array {
  const { json, names, bytes: sizes } = layoutSafetensors(tensors, metadata);
  const crcs = checksums ? new Map(names.map((name) => [name, crc32c(bytesOf(tensors[name]!.data))])) : undefined;
  const header = renderHeader(json, crcs);
  const bytes = new Uint8Array(header.length + names.reduce((n, name) => n + sizes.get(name)!, 0));
  bytes.set(header);
  let offset = header.length;
  for (const name of names) {
    bytes.set(bytesOf(tensors[name]!.data), offset);
    offset += sizes.get(name)!;
  }
  return bytes;
}

/** Where one tensor lies in a safetensors file, from its header. */
export interface SafetensorsEntry {
  dtype: SafetensorsDType;
  shape: number[];
  /** Offset of the tensor's first byte from the start of the file. */
  byteOffset: number;
  byteLength: number;
  /** The CRC-32C of its bytes, in a file that carries checksums. */
  crc32c?: number;
}

export interface SafetensorsHeader {
  entries: Record<string, SafetensorsEntry>;
  /** The metadata as written, without the checksums. */
  metadata: Record<string, string>;
  /** Whether the file carries checksums: the header's was verified, each entry has its `crc32c`. */
  checksummed: boolean;
}

/**
 * Validates a header (`prefix` holds the file's first bytes, at least the 8-byte length)
 * against a file of `fileLength` bytes; the caller then reads the data it needs.
 */
function parseHeader(prefix: Uint8Array, fileLength: number, source: string): SafetensorsHeader {
  if (fileLength < 8)
    throw new SafetensorsError(source, undefined, 0, `${fileLength} bytes is too short for the 8-byte header length`);
  const headerLength = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (headerLength > BigInt(fileLength - 8)) {
    throw new SafetensorsError(
      source,
      undefined,
      0,
      `header length ${headerLength} runs past the end of the file (${fileLength} bytes)`,
    );
  }
  const dataStart = 8 + Number(headerLength);
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(prefix.subarray(8, dataStart)));
  } catch (error) {
    throw new SafetensorsError(source, undefined, 8, `header is not valid UTF-8 JSON (${(error as Error).message})`);
  }
  if (typeof header !== "object" || header === null || Array.isArray(header)) {
    throw new SafetensorsError(source, undefined, 8, "header is not a JSON object");
  }
  const written = parseMetadata(source, (header as Record<string, unknown>).__metadata__);
  const crcs = checkHeaderCrc(source, header as Record<string, unknown>, written);
  const metadata = Object.fromEntries(Object.entries(written).filter(([key]) => !isChecksumKey(key)));
  const parsed = Object.entries(header)
    .filter(([name]) => name !== "__metadata__")
    .map(([name, entry]) => parseEntry(source, name, entry, dataStart));
  parsed.sort((a, b) => a.begin - b.begin);
  const dataLength = fileLength - dataStart;
  let expectedBegin = 0;
  const entries: Record<string, SafetensorsEntry> = {};
  for (const { name, dtype, shape, begin, end } of parsed) {
    if (begin < expectedBegin)
      throw new SafetensorsError(
        source,
        name,
        dataStart + begin,
        `data overlaps the previous tensor's, which ends at byte offset ${dataStart + expectedBegin}`,
      );
    if (begin > expectedBegin)
      throw new SafetensorsError(
        source,
        name,
        dataStart + expectedBegin,
        `bytes ${dataStart + expectedBegin}..${dataStart + begin} belong to no tensor`,
      );
    if (end > dataLength)
      throw new SafetensorsError(
        source,
        name,
        dataStart + begin,
        `data ends at byte offset ${dataStart + end}, past the end of the file (${fileLength} bytes)`,
      );
    entries[name] = { dtype, shape, byteOffset: dataStart + begin, byteLength: end - begin };
    if (crcs !== undefined) entries[name].crc32c = tensorCrc(source, name, crcs, dataStart + begin);
    expectedBegin = end;
  }
  if (crcs !== undefined) {
    const orphan = [...crcs.keys()].find((name) => !Object.hasOwn(entries, name));
    if (orphan !== undefined)
      throw new SafetensorsError(source, undefined, 8, `__metadata__ has ${tensorCrcKey(orphan)}, but no such tensor`);
  }
  if (expectedBegin !== dataLength) {
    throw new SafetensorsError(
      source,
      undefined,
      dataStart + expectedBegin,
      `${dataLength - expectedBegin} trailing bytes belong to no tensor`,
    );
  }
  return { entries, metadata, checksummed: crcs !== undefined };
}

/** A metadata CRC as a number: 8 hex digits. */
function parseCrc(source: string, key: string, text: string): number {
  if (!/^[0-9a-f]{8}$/.test(text))
    throw new SafetensorsError(
      source,
      undefined,
      8,
      `__metadata__.${key} is ${JSON.stringify(text)}, not 8 hex digits`,
    );
  return Number.parseInt(text, 16);
}

/**
 * For a header that carries checksums, verifies the header's own and returns the tensors' CRCs by tensor name;
 * undefined for a header without any.
 */
function checkHeaderCrc(
  source: string,
  header: Record<string, unknown>,
  metadata: Record<string, string>,
): Map<string, string> | undefined {
  const keys = Object.keys(metadata).filter(isChecksumKey);
  if (keys.length === 0) return undefined;
  const stored = metadata[HEADER_CRC_KEY];
  if (stored === undefined)
    throw new SafetensorsError(source, undefined, 8, `__metadata__ has tensor checksums but no ${HEADER_CRC_KEY}`);
  // The writer's JSON.stringify of the same object: parsing keeps the keys' order.
  const asWritten = { ...header, __metadata__: { ...metadata, [HEADER_CRC_KEY]: UNKNOWN_CRC } };
  const actual = crc32c(utf8.encode(JSON.stringify(asWritten)));
  if (actual !== parseCrc(source, HEADER_CRC_KEY, stored))
    throw new SafetensorsError(
      source,
      undefined,
      8,
      `the header's CRC-32C is ${hex32(actual)}, __metadata__.${HEADER_CRC_KEY} says ${stored}: the header is corrupt`,
    );
  return new Map(
    keys.filter((key) => key !== HEADER_CRC_KEY).map((key) => [key.slice(HEADER_CRC_KEY.length + 1), metadata[key]!]),
  );
}

function tensorCrc(source: string, name: string, crcs: Map<string, string>, byteOffset: number): number {
  const text = crcs.get(name);
  if (text === undefined)
    throw new SafetensorsError(source, name, byteOffset, `no ${tensorCrcKey(name)} in __metadata__ beside the others`);
  return parseCrc(source, tensorCrcKey(name), text);
}

/** The error for data whose CRC-32C is `crc`, unless that is the entry's stored one (or it has none). */
function crcMismatch(source: string, name: string, entry: SafetensorsEntry, crc: number): SafetensorsError | undefined {
  if (entry.crc32c === undefined || crc === entry.crc32c) return undefined;
  return new SafetensorsError(
    source,
    name,
    entry.byteOffset,
    `the CRC-32C of its ${entry.byteLength} bytes is ${hex32(crc)}, the header says ${hex32(entry.crc32c)}: the data is corrupt`,
  );
}

/**
 * Parses and validates safetensors bytes. Arrays view `bytes` where their data is aligned
 * (copies otherwise), so they share memory with it. `source` names the bytes in errors.
 */
export function decodeSafetensors(bytes: Uint8Array, source = "<bytes>"): SafetensorsContents {
  const { entries, metadata, checksummed } = parseHeader(bytes, bytes.length, source);
  const tensors: Record<string, SafetensorsTensor> = {};
  for (const [name, entry] of Object.entries(entries)) {
    const { dtype, shape, byteOffset, byteLength } = entry;
    const problem =
      checksummed && crcMismatch(source, name, entry, crc32c(bytes.subarray(byteOffset, byteOffset + byteLength)));
    if (problem) throw problem;
    tensors[name] = { dtype, shape, data: typedView(bytes, dtype, byteOffset, byteLength) } as SafetensorsTensor;
  }
  return { tensors, metadata, checksummed };
}

/** Reads and validates only the header of a safetensors file, for reading its data in parts. */
export function readSafetensorsHeader(path: string): SafetensorsHeader {
  const fd = openSync(path, "r");
  try {
    const fileLength = fstatSync(fd).size;
    const lengthBytes = new Uint8Array(8);
    readSync(fd, lengthBytes, 0, 8, 0);
    const headerLength = Number(new DataView(lengthBytes.buffer).getBigUint64(0, true));
    const prefix = new Uint8Array(fileLength < 8 ? 8 : 8 + Math.min(headerLength, fileLength - 8));
    readSync(fd, prefix, 0, prefix.length, 0);
    return parseHeader(prefix, fileLength, path);
  } finally {
    closeSync(fd);
  }
}

const VERIFY_CHUNK_BYTES = 8 << 20;
/** The most one read asks for: Node's reads stop short of 2 GiB. */
const READ_LIMIT_BYTES = 1 << 30;

/** Fills `bytes` from `fd` at `position`, naming `tensor` if the file ends first. */
function readFully(fd: number, bytes: Uint8Array, position: number, path: string, tensor: string): void {
  for (let done = 0; done < bytes.length; ) {
    const read = readSync(fd, bytes, done, Math.min(bytes.length - done, READ_LIMIT_BYTES), position + done);
    if (read === 0) throw new SafetensorsError(path, tensor, position + done, "the file ended while it was read");
    done += read;
  }
}

export interface VerifySafetensorsOptions {
  /**
   * Called after each tensor with the error its data gives (undefined where it matches) and the bytes checked so far;
   * given it, a mismatch does not stop the check, so that every tensor gets a verdict.
   */
  onTensor?: (name: string, problem: SafetensorsError | undefined, bytesRead: number, bytesTotal: number) => void;
}

/**
 * Reads a safetensors file's header and, where it carries checksums, verifies every tensor's data against them, a
 * chunk at a time (little memory for any size); returns the header. A mismatch names the file and the tensor.
 */
export function verifySafetensorsFile(path: string, { onTensor }: VerifySafetensorsOptions = {}): SafetensorsHeader {
  const header = readSafetensorsHeader(path);
  if (!header.checksummed) return header;
  const entries = Object.entries(header.entries);
  const bytesTotal = entries.reduce((sum, [, entry]) => sum + entry.byteLength, 0);
  let bytesRead = 0;
  const fd = openSync(path, "r");
  try {
    const chunk = new Uint8Array(VERIFY_CHUNK_BYTES);
    for (const [name, entry] of entries) {
      let crc = 0;
      for (let done = 0; done < entry.byteLength; done += chunk.length) {
        const piece = chunk.subarray(0, Math.min(chunk.length, entry.byteLength - done));
        readFully(fd, piece, entry.byteOffset + done, path, name);
        crc = crc32c(piece, crc);
      }
      const problem = crcMismatch(path, name, entry, crc);
      if (problem && !onTensor) throw problem;
      bytesRead += entry.byteLength;
      onTensor?.(name, problem, bytesRead, bytesTotal);
    }
  } finally {
    closeSync(fd);
  }
  return header;
}

function parseMetadata(source: string, metadata: unknown): Record<string, string> {
  if (metadata === undefined) return {};
  if (typeof metadata !== "object" || metadata === null || Array.isArray(metadata)) {
    throw new SafetensorsError(source, undefined, 8, "__metadata__ is not a JSON object");
  }
  for (const [key, value] of Object.entries(metadata)) {
    if (typeof value !== "string")
      throw new SafetensorsError(source, undefined, 8, `__metadata__.${key} is ${JSON.stringify(value)}, not a string`);
  }
  return metadata as Record<string, string>;
}

interface HeaderEntry {
  name: string;
  dtype: SafetensorsDType;
  shape: number[];
  begin: number;
  end: number;
}

function parseEntry(source: string, name: string, entry: unknown, dataStart: number): HeaderEntry {
  const fail = (detail: string) => new SafetensorsError(source, name, 8, detail);
  if (typeof entry !== "object" || entry === null) throw fail("header entry is not a JSON object");
  const { dtype, shape, data_offsets: offsets } = entry as Record<string, unknown>;
  if (!isDType(dtype)) throw fail(`unknown dtype ${JSON.stringify(dtype)}`);
  if (!validShape(shape)) throw fail(`invalid shape ${JSON.stringify(shape)}`);
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)) {
    throw fail(`invalid data_offsets ${JSON.stringify(offsets)}`);
  }
  const [begin, end] = offsets as [number, number];
  if (end < begin)
    throw new SafetensorsError(
      source,
      name,
      dataStart + begin,
      `data_offsets [${begin}, ${end}] end before they begin`,
    );
  const expectedBytes = elementCount(shape) * ARRAY_CLASSES[dtype].BYTES_PER_ELEMENT;
  if (end - begin !== expectedBytes) {
    throw new SafetensorsError(
      source,
      name,
      dataStart + begin,
      `shape [${shape.join(", ")}] of ${dtype} needs ${expectedBytes} bytes, data_offsets give ${end - begin}`,
    );
  }
  return { name, dtype, shape, begin, end };
}

function typedView(bytes: Uint8Array, dtype: SafetensorsDType, offset: number, byteLength: number): ArrayBufferView {
  const arrayClass = ARRAY_CLASSES[dtype];
  const length = byteLength / arrayClass.BYTES_PER_ELEMENT;
  const absolute = bytes.byteOffset + offset;
  if (absolute % arrayClass.BYTES_PER_ELEMENT === 0)
    return new arrayClass(bytes.buffer as ArrayBuffer, absolute, length);
  const copy = new Uint8Array(byteLength); // not bytes.slice: a Node Buffer's slice is a view
  copy.set(bytes.subarray(offset, offset + byteLength));
  return new arrayClass(copy.buffer, 0, length);
}

/** Writes a safetensors file atomically (temp file + rename), each tensor's data straight from its array. */
export function writeSafetensorsFile(
  path: string,
  tensors: Record<string, SafetensorsTensor>,
  metadata: Record<string, string> = {},
  options: SafetensorsWriteOptions = {},
): void {
  // (`data` rides along for the layout to check it, before any file is opened)
  const streamed = Object.fromEntries(
    Object.entries(tensors).map(([name, { dtype, shape, data }]) => [
      name,
      { dtype, shape, data, write: (emit: (piece: ArrayBufferView) => void) => emit(data) },
    ]),
  );
  writeSafetensorsStream(path, streamed, metadata, options);
}

/**
 * Writes a safetensors file atomically whose tensors hand over their data in pieces (in the file's order:
 * widest elements first), so that a file need not be held in memory whole. A tensor that hands over more or
 * fewer bytes than its shape holds fails the write, naming it; nothing is left at `path` then. The checksums are
 * taken as the data passes and written into the header at the end.
 */
export function writeSafetensorsStream(
  path: string,
  tensors: Record<string, SafetensorsStreamedTensor>,
  metadata: Record<string, string> = {},
  { checksums = true, overwrite = true }: SafetensorsWriteOptions = {},
): void {
  const { json, names, bytes } = layoutSafetensors(tensors, metadata);
  const crcs = checksums ? new Map(names.map((name) => [name, 0])) : undefined;
  const header = renderHeader(json, crcs);
  writeFileAtomicFrom(
    path,
    (write, writeAt) => {
      write(header);
      let offset = header.length;
      for (const name of names) {
        const expected = bytes.get(name)!;
        let given = 0;
        tensors[name]!.write((piece) => {
          if (given + piece.byteLength > expected)
            throw new SafetensorsError(
              path,
              name,
              offset + given,
              `more data than its shape holds (${expected} bytes)`,
            );
          given += piece.byteLength;
          const pieceBytes = bytesOf(piece);
          if (crcs !== undefined) crcs.set(name, crc32c(pieceBytes, crcs.get(name)));
          write(pieceBytes);
        });
        if (given !== expected)
          throw new SafetensorsError(path, name, offset + given, `${given} bytes of data, its shape holds ${expected}`);
        offset += expected;
      }
      if (crcs !== undefined) writeAt(renderHeader(json, crcs), 0); // the same length: 8 hex digits a CRC
    },
    { overwrite },
  );
}

/**
 * Reads and validates a safetensors file, verifying its checksums where it carries them; errors name `path`. Each
 * tensor is read into its own array, so that a file may be larger than one buffer can be (a BERT-large training
 * state is about 4 GB).
 */
export function readSafetensorsFile(path: string): SafetensorsContents {
  const { entries, metadata, checksummed } = readSafetensorsHeader(path);
  const tensors: Record<string, SafetensorsTensor> = {};
  const fd = openSync(path, "r");
  try {
    for (const [name, entry] of Object.entries(entries)) {
      const { dtype, shape, byteOffset, byteLength } = entry;
      const bytes = new Uint8Array(byteLength);
      readFully(fd, bytes, byteOffset, path, name);
      const problem = checksummed && crcMismatch(path, name, entry, crc32c(bytes));
      if (problem) throw problem;
      tensors[name] = { dtype, shape, data: typedView(bytes, dtype, 0, byteLength) } as SafetensorsTensor;
    }
  } finally {
    closeSync(fd);
  }
  return { tensors, metadata, checksummed };
}
