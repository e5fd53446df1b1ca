import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { SnappyError, snappyDecompress, snappyUncompressedLength } from "../../src/io/snappy.ts";
import { snappyCompress } from "./snappy_compress.ts";

// Streams made by libsnappy itself (see test/fixtures/snappy/make_vectors.py).
const libsnappyVectors = JSON.parse(
  readFileSync(new URL("../fixtures/snappy/vectors.json", import.meta.url), "utf8"),
) as { vectors: { name: string; uncompressed_hex: string; compressed_hex: string; tags: string[] }[] };

const fromHex = (hex: string) => new Uint8Array(Buffer.from(hex, "hex"));
const ascii = (text: string) => new Uint8Array(Buffer.from(text, "latin1"));

/** Deterministic pseudo-random bytes (xorshift32), so round trips see incompressible data. */
function noise(length: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(length);
  let state = seed;
  for (let i = 0; i < length; i++) {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    bytes[i] = state & 0xff;
  }
  return bytes;
}

test("decodes every libsnappy-made stream to its original bytes", () => {
  const tagsSeen = new Set(libsnappyVectors.vectors.flatMap((vector) => vector.tags));
  for (const tag of ["literal", "literal-1", "literal-2", "copy-1", "copy-2", "copy-2-far"])
    assert.ok(tagsSeen.has(tag), tag);
  for (const vector of libsnappyVectors.vectors) {
    const decoded = snappyDecompress(fromHex(vector.compressed_hex));
    assert.deepEqual(Buffer.from(decoded).toString("hex"), vector.uncompressed_hex, vector.name);
  }
});

test("reads the declared length from the varint preamble", () => {
  assert.equal(snappyUncompressedLength(Uint8Array.of(0xfe, 0xff, 0x7f)), 2097150);
  assert.equal(snappyUncompressedLength(Uint8Array.of(0)), 0);
});

test("decodes a hand-built copy-4 element", () => {
  // "abcd" as a literal, then copy 6 bytes from 4 back with a 4-byte offset: "abcdabcdab".
  const stream = Uint8Array.of(10, 3 << 2, ...ascii("abcd"), ((6 - 1) << 2) | 3, 4, 0, 0, 0);
  assert.equal(Buffer.from(snappyDecompress(stream)).toString("latin1"), "abcdabcdab");
});

test("decodes literals whose length takes 3 and 4 bytes", () => {
  const input = noise(300, 7);
  for (const literalLengthBytes of [3, 4]) {
    const stream = snappyCompress(input, { literalLengthBytes });
    assert.equal(stream[varintLength(input.length)], (59 + literalLengthBytes) << 2);
    assert.deepEqual(snappyDecompress(stream), input);
  }
});

test("round-trips mixed data through every copy kind, including offsets past 64 KiB", () => {
  const repeated = noise(5000, 3);
  const input = new Uint8Array(80000);
  input.set(repeated, 0);
  input.set(ascii("ab".repeat(40)), 5000);
  input.set(noise(70000, 11), 5080);
  input.set(repeated, 75000);
  for (const copy4 of [false, true]) assert.deepEqual(snappyDecompress(snappyCompress(input, { copy4 })), input);
});

test("names the byte offset of a copy that reaches before the output start", () => {
  // literal "ab", then a copy-1 of 4 bytes from 3 back: only 2 bytes exist.
  const stream = Uint8Array.of(6, 1 << 2, ...ascii("ab"), 1, 3);
  assert.throws(
    () => snappyDecompress(stream, "block.sst"),
    (error: unknown) => {
      assert.ok(error instanceof SnappyError);
      assert.equal(error.offset, 4);
      assert.match(error.message, /block\.sst: copy offset 3 outside the 2 bytes produced so far at byte 4/);
      return true;
    },
  );
});

test("rejects a literal that runs past the end of the input", () => {
  const stream = Uint8Array.of(5, 4 << 2, ...ascii("abc"));
  assert.throws(() => snappyDecompress(stream), /literal of 5 bytes runs past the end of the input at byte 1/);
});

test("rejects output longer than the declared length", () => {
  const stream = Uint8Array.of(2, 2 << 2, ...ascii("abc"));
  assert.throws(() => snappyDecompress(stream), /overflows the declared length 2 at byte 1/);
});

test("rejects a stream that ends before the declared length", () => {
  const stream = Uint8Array.of(9, 2 << 2, ...ascii("abc"));
  assert.throws(() => snappyDecompress(stream), /input ends after 3 of the declared 9 bytes at byte 5/);
});

test("rejects a truncated copy element and a truncated preamble", () => {
  assert.throws(() => snappyDecompress(Uint8Array.of(8, 0, 0x61, 2)), /copy-2 offset bytes missing at byte 3/);
  assert.throws(() => snappyDecompress(Uint8Array.of(0x80, 0x80)), /length preamble truncated at byte 2/);
});

function varintLength(value: number): number {
  let bytes = 1;
  while (value >= 128) {
    value = Math.floor(value / 128);
    bytes++;
  }
  return bytes;
}
