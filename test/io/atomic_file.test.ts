import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { removeStaleTemps, writeFileAtomic, writeFileAtomicFrom } from "../../src/io/atomic_file.ts";
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

test("writeAt overwrites bytes already written, and refuses bytes past them", () => {
  const path = join(scratchDir("atomic-"), "patched.bin");
  writeFileAtomicFrom(path, (write, writeAt) => {
    write(new Uint8Array([0, 0, 0, 4]));
    writeAt(new Uint8Array([1, 2]), 1);
  });
  assert.deepEqual([...readFileSync(path)], [0, 1, 2, 4]);
  assert.throws(
    () =>
      writeFileAtomicFrom(path, (write, writeAt) => {
        write(new Uint8Array(2));
        writeAt(new Uint8Array(2), 1);
      }),
    /writeAt 1\.\.3 past the 2 bytes written/,
  );
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

test("with overwrite false a file already at the path stays, the write fails with EEXIST and leaves no temp", () => {
  const dir = scratchDir("atomic-");
  const path = join(dir, "data.bin");
  writeFileAtomicFrom(path, (write) => write(new Uint8Array([1])), { overwrite: false });
  assert.deepEqual([...readFileSync(path)], [1], "a new name is written");
  assert.throws(() => writeFileAtomicFrom(path, (write) => write(new Uint8Array([2])), { overwrite: false }), {
    code: "EEXIST",
  });
  assert.deepEqual([...readFileSync(path)], [1]);
  assert.deepEqual(readdirSync(dir), ["data.bin"]);
});

test("removeStaleTemps deletes temp files of processes that are gone, and nothing else", () => {
  const dir = scratchDir("atomic-");
  // a pid that certainly ran and ended: a child that has exited
  const gone = spawnSync(process.execPath, ["-e", ""]).pid!;
  const live = process.ppid;
  const names = [
    `.step_0000100.safe.${gone}.k3x9.tmp`,
    `.part-00007.shard.${gone}.tmp`,
    `.report.html.${live}.tmp`,
    `.mine.${process.pid}.ab.tmp`,
    "step_0000100.safe",
    "notes.tmp",
  ];
  for (const name of names) writeFileSync(join(dir, name), "x");
  assert.deepEqual(removeStaleTemps(dir).sort(), [
    `.part-00007.shard.${gone}.tmp`,
    `.step_0000100.safe.${gone}.k3x9.tmp`,
  ]);
  assert.deepEqual(
    readdirSync(dir).sort(),
    [`.mine.${process.pid}.ab.tmp`, `.report.html.${live}.tmp`, "notes.tmp", "step_0000100.safe"].sort(),
  );
  assert.deepEqual(removeStaleTemps(join(dir, "absent")), []);
});
