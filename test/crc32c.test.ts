import { test } from "node:test";
import assert from "node:assert/strict";
import { crc32c } from "../src/crc32c.ts";

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
