// extractTarGz on archives written by real tar implementations (Python's tarfile in GNU, pax
// and ustar formats, and GNU tar 1.34; see test/fixtures/download/make_fixtures.py).
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import { extractTarGz, TarError } from "../../mlperf/bert/data/untar.ts";
import { scratchDir } from "../scratch.ts";

const FIXTURES = new URL("../fixtures/download/", import.meta.url).pathname;
const LONG_NAME = `${"a-file-name-longer-than-the-hundred-bytes-of-a-ustar-name-field-".repeat(2)}end.txt`;

const tempDir = () => scratchDir("untar-");

/** Every file under `dir`, relative, sorted (hidden temp files included). */
async function listFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath ?? e.path, e.name).slice(dir.length + 1))
    .sort();
}

test("extracts a GNU-format tarfile archive, GNU long name included", async () => {
  const dest = tempDir();
  const summary = await extractTarGz(join(FIXTURES, "text.tar.gz"), dest);
  assert.deepEqual(summary, { files: 4, directories: 1, bytes: 54 + 10800 + 38 + 10 });
  assert.deepEqual(await listFiles(dest), [
    `results4/${LONG_NAME}`,
    "results4/eval.txt",
    "results4/part-00000-of-00002",
    "results4/part-00001-of-00002",
  ]);
  assert.equal(
    await readFile(join(dest, "results4/part-00000-of-00002"), "utf8"),
    "First sentence of doc one.\nSecond sentence.\n\nDoc two.\n",
  );
  assert.equal(
    await readFile(join(dest, "results4/part-00001-of-00002"), "utf8"),
    "Another part.\n\nLast doc, last line.\n".repeat(300),
  );
  assert.equal(await readFile(join(dest, "results4", LONG_NAME), "utf8"), "long name\n");
});

test("takes a pax header's path over the truncated ustar name", async () => {
  const dest = tempDir();
  await extractTarGz(join(FIXTURES, "pax.tar.gz"), dest);
  const name = `deep/${"sub-folder-with-a-long-name/".repeat(10)}caf\u00e9.txt`;
  assert.deepEqual(await listFiles(dest), [name]);
  assert.equal(await readFile(join(dest, name), "utf8"), "pax path\n");
});

test("joins a ustar prefix and name", async () => {
  const dest = tempDir();
  await extractTarGz(join(FIXTURES, "ustar.tar.gz"), dest);
  const name = `${"prefix-part/".repeat(10)}ustar-name.txt`;
  assert.equal(await readFile(join(dest, name), "utf8"), "ustar prefix\n");
});

test("extracts an archive written by GNU tar with a long name", async () => {
  const dest = tempDir();
  await extractTarGz(join(FIXTURES, "gnutar.tar.gz"), dest);
  assert.equal(await readFile(join(dest, "gnu", `${"x".repeat(150)}.txt`), "utf8"), "written by GNU tar\n");
});

test("refuses a path that climbs out of the destination with ..", async () => {
  const parent = tempDir();
  const dest = join(parent, "basedir");
  await assert.rejects(extractTarGz(join(FIXTURES, "escape-dotdot.tar.gz"), dest), (error: Error) => {
    assert.ok(error instanceof TarError);
    assert.match(error.message, /escape-dotdot\.tar\.gz: refusing path "results4\/\.\.\/\.\.\/evil\.txt"/);
    return true;
  });
  assert.equal(existsSync(join(parent, "evil.txt")), false);
});

test("refuses an absolute path", async () => {
  await assert.rejects(
    extractTarGz(join(FIXTURES, "escape-absolute.tar.gz"), tempDir()),
    /refusing absolute path "\/tmp\/tsgrad-evil\.txt"/,
  );
});

test("refuses a symbolic link", async () => {
  await assert.rejects(
    extractTarGz(join(FIXTURES, "symlink.tar.gz"), tempDir()),
    /refusing symbolic link results4\/link -> \/etc\/passwd/,
  );
});

test("refuses a hard link", async () => {
  await assert.rejects(
    extractTarGz(join(FIXTURES, "hardlink.tar.gz"), tempDir()),
    /refusing hard link results4\/hard -> \/etc\/passwd/,
  );
});

test("a gzip stream cut short is an error naming the archive and the offset", async () => {
  const whole = await readFile(join(FIXTURES, "text.tar.gz"));
  const archive = join(tempDir(), "cut.tar.gz");
  await writeFile(archive, whole.subarray(0, whole.length - 20));
  await assert.rejects(extractTarGz(archive, tempDir()), (error: Error) => {
    assert.ok(error instanceof TarError);
    assert.match(
      error.message,
      /cut\.tar\.gz: gzip stream is truncated or corrupt .* \(at byte \d+ of the tar stream\)/,
    );
    return true;
  });
});

test("a tar cut inside a file's data names the file and the offset, and leaves no partial file", async () => {
  const tar = gunzipSync(await readFile(join(FIXTURES, "text.tar.gz")));
  // Headers: results4/ at 0, part-00000 at 512 (data 1024), part-00001 at 1536 (data 2048..12848).
  const archive = join(tempDir(), "cut-inside.tar.gz");
  await writeFile(archive, gzipSync(tar.subarray(0, 5000)));
  const dest = tempDir();
  await assert.rejects(
    extractTarGz(archive, dest),
    /cut-inside\.tar\.gz: truncated archive: results4\/part-00001-of-00002 is missing its last 7848 bytes \(at byte 5000 of the tar stream\)/,
  );
  assert.deepEqual(await listFiles(dest), ["results4/part-00000-of-00002"]);
});

test("a tar that stops between entries without the end marker is truncated", async () => {
  const tar = gunzipSync(await readFile(join(FIXTURES, "text.tar.gz")));
  const archive = join(tempDir(), "no-end.tar.gz");
  await writeFile(archive, gzipSync(tar.subarray(0, 1536)));
  await assert.rejects(
    extractTarGz(archive, tempDir()),
    /no-end\.tar\.gz: truncated archive: it ends without the end-of-archive marker \(at byte 1536/,
  );
});

test("a corrupted header is an error at its offset", async () => {
  const tar = Buffer.from(gunzipSync(await readFile(join(FIXTURES, "text.tar.gz"))));
  tar[512 + 10] ^= 0x01; // a byte of part-00000's name
  const archive = join(tempDir(), "bad-header.tar.gz");
  await writeFile(archive, gzipSync(tar));
  await assert.rejects(
    extractTarGz(archive, tempDir()),
    /bad-header\.tar\.gz: header checksum \d+ does not match computed \d+.*\(at byte 512 /,
  );
});

test("a type-NUL entry whose name ends in / is a directory, as pre-POSIX tars wrote them", async () => {
  const tar = Buffer.from(gunzipSync(await readFile(join(FIXTURES, "text.tar.gz"))));
  assert.equal(tar.toString("latin1", 0, 9), "results4/");
  tar[156] = 0; // typeflag '5' -> NUL; then the checksum again, as octal with NUL and space
  tar.fill(0x20, 148, 156);
  const sum = tar.subarray(0, 512).reduce((a, b) => a + b, 0);
  tar.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "latin1");
  const archive = join(tempDir(), "v7-dir.tar.gz");
  await writeFile(archive, gzipSync(tar));
  const dest = tempDir();
  const summary = await extractTarGz(archive, dest);
  assert.equal(summary.directories, 1);
  assert.equal(await readFile(join(dest, "results4", "eval.txt"), "utf8"), "Eval sentence one.\nEval sentence two.\n");
});

test("reports every compressed byte read", async () => {
  let read = 0;
  await extractTarGz(join(FIXTURES, "text.tar.gz"), tempDir(), { onArchiveBytes: (n) => (read += n) });
  assert.equal(read, (await readFile(join(FIXTURES, "text.tar.gz"))).length);
});
