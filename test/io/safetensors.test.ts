import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  decodeSafetensors,
  encodeSafetensors,
  readSafetensorsFile,
  readSafetensorsHeader,
  SafetensorsError,
  verifySafetensorsFile,
  writeSafetensorsFile,
  writeSafetensorsStream,
  type SafetensorsTensor,
} from "../../src/io/safetensors.ts";
import { crc32c } from "../../src/io/crc32c.ts";
import { scratchDir } from "../scratch.ts";

// Written by test/fixtures/data/generate.py by hand from the spec, data in alphabetical order.
const REFERENCE = new URL("../fixtures/data/reference.safetensors", import.meta.url).pathname;

/** Safetensors bytes with `header` (any JSON) and `dataLength` zero bytes of data. */
function rawFile(header: unknown, dataLength: number): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const bytes = new Uint8Array(8 + json.length + dataLength);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(json.length), true);
  bytes.set(json, 8);
  return bytes;
}

function throwsSafetensors(run: () => unknown, pattern: RegExp): void {
  assert.throws(run, (error: unknown) => {
    assert.ok(error instanceof SafetensorsError, String(error));
    assert.match(error.message, pattern);
    return true;
  });
}

test("reads a file written by an independent Python writer, every dtype", () => {
  const { tensors, metadata } = readSafetensorsFile(REFERENCE);
  assert.deepEqual(metadata, { source: "generate.py", note: "hand-written" });
  assert.deepEqual(tensors.weight, {
    dtype: "F32",
    shape: [2, 3],
    data: new Float32Array([1.5, -2.0, 0.25, 3.0, -0.0, 1e-3]),
  });
  assert.deepEqual(tensors.ids, { dtype: "I64", shape: [3], data: new BigInt64Array([-1n, 2n ** 40n + 7n, 30521n]) });
  assert.deepEqual(tensors.half, { dtype: "F16", shape: [2], data: new Uint16Array([0x3c00, 0xfbff]) });
  assert.deepEqual(tensors.brain, { dtype: "BF16", shape: [2], data: new Uint16Array([0x3f80, 0xbfc0]) });
  assert.deepEqual(tensors.mask, { dtype: "U8", shape: [4], data: new Uint8Array([0, 1, 255, 7]) });
  assert.deepEqual(tensors.flags, { dtype: "BOOL", shape: [2], data: new Uint8Array([1, 0]) });
  assert.deepEqual(tensors.counts, { dtype: "U16", shape: [2], data: new Uint16Array([30521, 65535]) });
  assert.deepEqual(tensors.doubles, { dtype: "F64", shape: [1, 1], data: new Float64Array([Math.PI]) });
  assert.deepEqual(tensors.empty, { dtype: "F32", shape: [0, 4], data: new Float32Array(0) });
  assert.deepEqual(tensors.small, { dtype: "I8", shape: [3], data: new Int8Array([-128, 0, 127]) });
});

test("re-encoding the reference file's tensors decodes to the same tensors", () => {
  const { tensors, metadata, checksummed } = readSafetensorsFile(REFERENCE);
  assert.equal(checksummed, false, "another writer's file has no checksums");
  assert.deepEqual(decodeSafetensors(encodeSafetensors(tensors, metadata)), { tensors, metadata, checksummed: true });
});

test("encoding pads the header with spaces to 8-byte alignment and writes the length little-endian", () => {
  const bytes = encodeSafetensors(
    { x: { dtype: "U8", shape: [3], data: new Uint8Array([7, 8, 9]) } },
    {},
    { checksums: false },
  );
  const headerLength = Number(new DataView(bytes.buffer).getBigUint64(0, true));
  assert.equal(headerLength % 8, 0);
  const header = new TextDecoder().decode(bytes.subarray(8, 8 + headerLength));
  assert.equal(header.trimEnd(), '{"x":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}');
  assert.match(header, /^[^ ]* *$/);
  assert.deepEqual([...bytes.subarray(8 + headerLength)], [7, 8, 9]);
});

test("encoding places wider elements first so decoded arrays view the bytes aligned", () => {
  const tensors: Record<string, SafetensorsTensor> = {
    a: { dtype: "U8", shape: [3], data: new Uint8Array([1, 2, 3]) },
    b: { dtype: "F64", shape: [1], data: new Float64Array([2.5]) },
    c: { dtype: "I16", shape: [1], data: new Int16Array([-3]) },
  };
  const bytes = encodeSafetensors(tensors);
  const decoded = decodeSafetensors(bytes).tensors;
  assert.equal(decoded.b!.data.buffer, bytes.buffer, "F64 data is a view, not a copy");
  assert.deepEqual(decoded, tensors);
});

test("writeSafetensorsFile round-trips through a file and leaves no temp file", () => {
  const dir = scratchDir("st-");
  const path = join(dir, "model.safetensors");
  const tensors: Record<string, SafetensorsTensor> = {
    w: { dtype: "F32", shape: [2, 2], data: new Float32Array([1, 2, 3, 4]) },
  };
  writeSafetensorsFile(path, tensors, { step: "3" });
  assert.deepEqual(readSafetensorsFile(path), { tensors, metadata: { step: "3" }, checksummed: true });
  assert.deepEqual(readdirSync(dir), ["model.safetensors"]);
});

test("encoding refuses data whose length disagrees with the shape", () => {
  throwsSafetensors(
    () => encodeSafetensors({ w: { dtype: "F32", shape: [2, 3], data: new Float32Array(5) } }),
    /tensor "w".*needs 6 elements, data has 5/,
  );
});

test("encoding refuses a typed array of the wrong kind for the dtype", () => {
  const wrong = { dtype: "F32", shape: [2], data: new Float64Array(2) } as unknown as SafetensorsTensor;
  throwsSafetensors(
    () => encodeSafetensors({ w: wrong }),
    /tensor "w".*F32 data must be a Float32Array, got Float64Array/,
  );
});

test("decoding a file shorter than 8 bytes is an error at offset 0", () => {
  throwsSafetensors(
    () => decodeSafetensors(new Uint8Array(5), "tiny.st"),
    /^tiny\.st: byte offset 0: 5 bytes is too short/,
  );
});

test("a header length beyond the file is an error naming the file and offset 0", () => {
  const bytes = rawFile({}, 0);
  new DataView(bytes.buffer).setBigUint64(0, 1000n, true);
  throwsSafetensors(
    () => decodeSafetensors(bytes, "big.st"),
    /^big\.st: byte offset 0: header length 1000 runs past the end of the file \(10 bytes\)/,
  );
});

test("a header that is not JSON is an error at offset 8", () => {
  const bytes = rawFile({}, 0);
  bytes[9] = "x".charCodeAt(0);
  throwsSafetensors(
    () => decodeSafetensors(bytes, "bad.st"),
    /^bad\.st: byte offset 8: header is not valid UTF-8 JSON/,
  );
});

test("an unknown dtype is an error naming the tensor", () => {
  const bytes = rawFile({ w: { dtype: "F8", shape: [1], data_offsets: [0, 1] } }, 1);
  throwsSafetensors(() => decodeSafetensors(bytes, "f.st"), /^f\.st: tensor "w", byte offset 8: unknown dtype "F8"/);
});

test("shape times itemsize disagreeing with the byte length is an error at the tensor's data offset", () => {
  const bytes = rawFile({ w: { dtype: "F32", shape: [2], data_offsets: [0, 12] } }, 12);
  const dataStart = bytes.length - 12;
  throwsSafetensors(
    () => decodeSafetensors(bytes, "f.st"),
    new RegExp(`tensor "w", byte offset ${dataStart}: shape \\[2\\] of F32 needs 8 bytes, data_offsets give 12`),
  );
});

test("offsets past the end of the file are an error naming the tensor", () => {
  const bytes = rawFile({ w: { dtype: "U8", shape: [8], data_offsets: [0, 8] } }, 4);
  throwsSafetensors(
    () => decodeSafetensors(bytes, "f.st"),
    /tensor "w", byte offset \d+: data ends at byte offset \d+, past the end of the file/,
  );
});

test("overlapping tensors are an error naming the second one", () => {
  const bytes = rawFile(
    { a: { dtype: "U8", shape: [4], data_offsets: [0, 4] }, b: { dtype: "U8", shape: [2], data_offsets: [2, 4] } },
    4,
  );
  throwsSafetensors(
    () => decodeSafetensors(bytes, "f.st"),
    /tensor "b", byte offset \d+: data overlaps the previous tensor's/,
  );
});

test("a hole between tensors is an error", () => {
  const bytes = rawFile(
    { a: { dtype: "U8", shape: [2], data_offsets: [0, 2] }, b: { dtype: "U8", shape: [2], data_offsets: [3, 5] } },
    5,
  );
  throwsSafetensors(
    () => decodeSafetensors(bytes, "f.st"),
    /tensor "b", byte offset \d+: bytes \d+\.\.\d+ belong to no tensor/,
  );
});

test("trailing bytes after the last tensor are an error", () => {
  const bytes = rawFile({ a: { dtype: "U8", shape: [2], data_offsets: [0, 2] } }, 3);
  throwsSafetensors(() => decodeSafetensors(bytes, "f.st"), /1 trailing bytes belong to no tensor/);
});

test("non-string metadata values are an error", () => {
  const bytes = rawFile({ __metadata__: { step: 3 } }, 0);
  throwsSafetensors(() => decodeSafetensors(bytes, "f.st"), /__metadata__\.step is 3, not a string/);
});

test("readSafetensorsFile names the path in errors", () => {
  const path = join(scratchDir("st-"), "broken.safetensors");
  writeFileSync(path, readFileSync(REFERENCE).subarray(0, 100));
  throwsSafetensors(() => readSafetensorsFile(path), new RegExp(`^${path}: byte offset 0: header length`));
});

test("decoding bytes that start at an odd offset copies the unaligned data correctly", () => {
  const tensors: Record<string, SafetensorsTensor> = {
    w: { dtype: "F32", shape: [2], data: new Float32Array([1.25, -7]) },
  };
  const encoded = encodeSafetensors(tensors);
  const shifted = new Uint8Array(encoded.length + 1);
  shifted.set(encoded, 1);
  assert.deepEqual(decodeSafetensors(shifted.subarray(1)).tensors, tensors);
});

test("readSafetensorsHeader gives each tensor's absolute byte range without reading the data", () => {
  const { entries, metadata } = readSafetensorsHeader(REFERENCE);
  const bytes = readFileSync(REFERENCE);
  assert.equal(metadata.source, "generate.py");
  const { dtype, shape, byteOffset, byteLength } = entries.counts!;
  assert.deepEqual({ dtype, shape, byteLength }, { dtype: "U16", shape: [2], byteLength: 4 });
  assert.deepEqual([...bytes.subarray(byteOffset, byteOffset + byteLength)], [0x39, 0x77, 0xff, 0xff]);
});

test("readSafetensorsHeader validates offsets against the file size", () => {
  const path = join(scratchDir("st-"), "cut.safetensors");
  const bytes = readFileSync(REFERENCE);
  writeFileSync(path, bytes.subarray(0, bytes.length - 1));
  throwsSafetensors(
    () => readSafetensorsHeader(path),
    new RegExp(
      `^${path}: tensor "weight", byte offset \\d+: data ends at byte offset ${bytes.length}, past the end of the file \\(${bytes.length - 1} bytes\\)`,
    ),
  );
});

// ---- checksums ---------------------------------------------------------------------------

const SMALL: Record<string, SafetensorsTensor> = {
  w: { dtype: "F32", shape: [2], data: new Float32Array([1.5, -2]) },
  ids: { dtype: "U16", shape: [3], data: new Uint16Array([7, 30521, 0]) },
};

/** The JSON of a safetensors file's header. */
function headerJson(bytes: Uint8Array): Record<string, Record<string, unknown>> {
  const length = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
  return JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + length)));
}

test("a written file's metadata holds each tensor's CRC-32C and the header's; reading verifies and drops them", () => {
  const bytes = encodeSafetensors(SMALL, { step: "3" });
  const metadata = headerJson(bytes).__metadata__!;
  assert.deepEqual(Object.keys(metadata), ["step", "crc32c.w", "crc32c.ids", "crc32c"]);
  const dataCrc = (name: string) => crc32c(new Uint8Array(SMALL[name]!.data.buffer)).toString(16).padStart(8, "0");
  assert.equal(metadata["crc32c.w"], dataCrc("w"));
  assert.equal(metadata["crc32c.ids"], dataCrc("ids"));
  const { metadata: read, checksummed } = decodeSafetensors(bytes);
  assert.deepEqual([read, checksummed], [{ step: "3" }, true]);
});

test("a streamed file is the encoded file byte for byte, checksums included", () => {
  const path = join(scratchDir("st-"), "streamed.safetensors");
  writeSafetensorsStream(
    path,
    {
      w: { dtype: "F32", shape: [2], write: (emit) => [[1.5], [-2]].forEach((x) => emit(new Float32Array(x))) },
      ids: { dtype: "U16", shape: [3], write: (emit) => emit(new Uint16Array([7, 30521, 0])) },
    },
    { step: "3" },
  );
  assert.ok(readFileSync(path).equals(encodeSafetensors(SMALL, { step: "3" })));
});

test("flipping any bit of a checksummed file makes reading it an error", () => {
  const bytes = encodeSafetensors(SMALL, { step: "3" });
  for (let at = 0; at < bytes.length; at++) {
    for (let bit = 0; bit < 8; bit++) {
      const flipped = bytes.slice();
      flipped[at]! ^= 1 << bit;
      assert.throws(() => decodeSafetensors(flipped, "f.st"), SafetensorsError, `byte ${at}, bit ${bit}`);
    }
  }
});

test("a flipped data byte is an error naming the file, the tensor and its byte offset", () => {
  const path = join(scratchDir("st-"), "model.safetensors");
  writeSafetensorsFile(path, SMALL);
  const { entries } = readSafetensorsHeader(path);
  const bytes = readFileSync(path);
  bytes[entries.ids!.byteOffset + 1]! ^= 0x10;
  writeFileSync(path, bytes);
  const expected = new RegExp(
    `^${path}: tensor "ids", byte offset ${entries.ids!.byteOffset}: the CRC-32C of its 6 bytes is [0-9a-f]{8}, the header says [0-9a-f]{8}: the data is corrupt`,
  );
  throwsSafetensors(() => readSafetensorsFile(path), expected);
  throwsSafetensors(() => verifySafetensorsFile(path), expected);
});

test("a flipped byte in the metadata is an error: the header's own CRC-32C", () => {
  const bytes = encodeSafetensors(SMALL, { step: "3" });
  bytes[bytes.indexOf(0x33 /* "3" */, 8)] = 0x34;
  throwsSafetensors(
    () => decodeSafetensors(bytes, "f.st"),
    /^f\.st: byte offset 8: the header's CRC-32C is [0-9a-f]{8}/,
  );
});

test("verifySafetensorsFile checks data larger than its read chunk, a chunk at a time", () => {
  const path = join(scratchDir("st-"), "big.safetensors");
  const big = new Uint8Array(9 << 20).map((_, i) => (i * 2654435761) >>> 24);
  writeSafetensorsFile(path, { big: { dtype: "U8", shape: [big.length], data: big } });
  assert.equal(verifySafetensorsFile(path).entries.big!.crc32c, crc32c(big));
  const bytes = readFileSync(path);
  bytes[bytes.length - 1]! ^= 1;
  writeFileSync(path, bytes);
  throwsSafetensors(() => verifySafetensorsFile(path), /tensor "big".*the data is corrupt/);
});

test("a file without checksums reads unverified, as another writer's would", () => {
  const bytes = encodeSafetensors(SMALL, {}, { checksums: false });
  assert.deepEqual(Object.keys(headerJson(bytes)), ["w", "ids"]);
  bytes[bytes.length - 1]! ^= 1;
  assert.equal(decodeSafetensors(bytes).checksummed, false);
});

test("the crc32c metadata keys are the writer's: given ones are refused", () => {
  throwsSafetensors(() => encodeSafetensors(SMALL, { crc32c: "00000000" }), /__metadata__\.crc32c: the crc32c keys/);
  throwsSafetensors(() => encodeSafetensors(SMALL, { "crc32c.w": "0" }), /__metadata__\.crc32c\.w: the crc32c keys/);
});

test("a header with tensor checksums but one missing is an error naming the tensor", () => {
  const bytes = encodeSafetensors(SMALL);
  const json = headerJson(bytes);
  delete json.__metadata__!["crc32c.w"];
  const text = JSON.stringify({ ...json, __metadata__: { ...json.__metadata__, crc32c: "00000000" } });
  json.__metadata__!.crc32c = crc32c(new TextEncoder().encode(text)).toString(16).padStart(8, "0");
  const data = bytes.subarray(8 + Number(new DataView(bytes.buffer).getBigUint64(0, true)));
  const rebuilt = rawFile(json, data.length);
  rebuilt.set(data, rebuilt.length - data.length);
  throwsSafetensors(
    () => decodeSafetensors(rebuilt, "f.st"),
    /^f\.st: tensor "w", byte offset \d+: no crc32c\.w in __metadata__/,
  );
});
