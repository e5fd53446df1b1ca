// MD5 of files and md5sum lists; reference digests from GNU coreutils' md5sum.
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ChecksumError, md5File, parseMd5List, verifyMd5, verifyMd5List } from "../../mlperf/bert/data/checksums.ts";
import { scratchDir } from "../scratch.ts";

async function fileWith(text: string, name = "f.txt"): Promise<string> {
  const path = join(scratchDir("md5-"), name);
  await writeFile(path, text);
  return path;
}

test("md5File matches md5sum", async () => {
  // printf abc | md5sum
  assert.equal(await md5File(await fileWith("abc")), "900150983cd24fb0d6963f7d28e17f72");
});

test("verifyMd5 names the file, the expected and the actual digest on a mismatch", async () => {
  const path = await fileWith("abc", "vocab.txt");
  await assert.rejects(verifyMd5(path, "64800d5d8528ce344256daf115d4965e"), (error: Error) => {
    assert.ok(error instanceof ChecksumError);
    assert.equal(
      error.message,
      `md5 mismatch for ${path}: expected 64800d5d8528ce344256daf115d4965e, got 900150983cd24fb0d6963f7d28e17f72`,
    );
    return true;
  });
});

test("parseMd5List reads text and binary md5sum lines and drops a leading ./", () => {
  const list =
    "a64a7c31eff5cd38ae6d94f7a6229dab  ./part-00000-of-00500\n\n2A220F790517261547B1B45ED3ADA07A *eval.txt\r\n";
  assert.deepEqual(parseMd5List(list, "list.txt"), [
    { md5: "a64a7c31eff5cd38ae6d94f7a6229dab", name: "part-00000-of-00500" },
    { md5: "2a220f790517261547b1b45ed3ada07a", name: "eval.txt" },
  ]);
});

test("parseMd5List names the list and line of a malformed entry", () => {
  assert.throws(
    () => parseMd5List("a64a7c31eff5cd38ae6d94f7a6229dab  ok\nnot a line\n", "sums.txt"),
    /^Md5ListError: sums\.txt:2: not an md5sum line: "not a line"$/m,
  );
});

test("verifyMd5List reports the first file that differs", async () => {
  const path = await fileWith("abc", "a.txt");
  const folder = join(path, "..");
  await writeFile(join(folder, "b.txt"), "abd");
  const entries = [
    { name: "a.txt", md5: "900150983cd24fb0d6963f7d28e17f72" },
    { name: "b.txt", md5: "900150983cd24fb0d6963f7d28e17f72" },
  ];
  await assert.rejects(
    verifyMd5List(folder, entries),
    new RegExp(
      `md5 mismatch for ${join(folder, "b.txt")}: expected 900150983cd24fb0d6963f7d28e17f72, got 4911e516e5aa21d327512e0c8b197616`,
    ),
  );
});
