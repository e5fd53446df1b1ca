import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { writeFileAtomic, writeFileAtomicFrom } from "../../src/io/atomic_file.ts";
import { scratchDir } from "../scratch.ts";

test("writeFileAtomic replaces a file's bytes and leaves no temp file", () => {
  const dir = scratchDir("atomic-");
  const path = join(dir, "data.bin");
  writeFileSync(path, "old");
  writeFileAtomic(path, new Uint8Array([1, 2, 3]));
  assert.deepEqual([...readFileSync(path)], [1, 2, 3]);
  assert.deepEqual(readdirSync(dir), ["data.bin"]);
});

test("writeFileAtomicFrom writes the pieces in order", () => {
  const path = join(scratchDir("atomic-"), "pieces.bin");
  writeFileAtomicFrom(path, (write) => [[1], [2, 3], [], [4]].forEach((piece) => write(new Uint8Array(piece))));
  assert.deepEqual([...readFileSync(path)], [1, 2, 3, 4]);
});

test("a write that fails part way leaves the old file whole and no temp file", () => {
  const dir = scratchDir("atomic-");
  const path = join(dir, "data.bin");
  writeFileSync(path, "old");
  assert.throws(
    () =>
      writeFileAtomicFrom(path, (write) => {
        write(new Uint8Array([9, 9]));
        throw new Error("the producer failed");
      }),
    /the producer failed/,
  );
  assert.equal(readFileSync(path, "utf8"), "old");
  assert.deepEqual(readdirSync(dir), ["data.bin"]);
});
