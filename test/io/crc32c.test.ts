import { test } from "node:test";
import assert from "node:assert/strict";
import { crc32c } from "../../src/io/crc32c.ts";

test("crc32c matches the standard check value of '123456789'", () => {
  assert.equal(crc32c(new TextEncoder().encode("123456789")), 0xe3069283);
});

test("crc32c of 32 zero bytes matches RFC 3720's test vector", () => {
  assert.equal(crc32c(new Uint8Array(32)), 0x8a9136aa);
});

test("crc32c continues across chunks", () => {
  const bytes = new TextEncoder().encode("hello, tfrecord");
  assert.equal(crc32c(bytes.subarray(5), crc32c(bytes.subarray(0, 5))), crc32c(bytes));
});

test("crc32c agrees with a bytewise reference on every length and alignment", () => {
  const bytewise = (bytes: Uint8Array): number => {
    let c = 0xffffffff;
    for (const b of bytes) {
      c ^= b;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    }
    return ~c >>> 0;
  };
  const data = Uint8Array.from({ length: 100 }, (_, i) => (i * 131 + 7) & 0xff);
  for (let start = 0; start < 9; start++)
    for (let end = start; end <= data.length; end += 7) {
      assert.equal(crc32c(data.subarray(start, end)), bytewise(data.subarray(start, end)), `bytes ${start}..${end}`);
    }
});
