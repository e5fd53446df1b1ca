// readTextLines reads a file a megabyte at a time: its lines must be those of the whole text read at once, whatever
// falls on a chunk's edge, and a bad byte's offset must be the file's, not the chunk's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { readTextLines } from "../../mlperf/bert/data/preprocess.ts";
import { scratchDir } from "../scratch.ts";

const MB = 1 << 20;

/** The lines readDocuments cuts from the whole text: every CR deleted, split at LF, no line after a final LF. */
function wholeTextLines(text: string): string[] {
  const lines = text.replaceAll("\r", "").split("\n");
  if (lines.at(-1) === "") lines.pop();
  return lines;
}

function linesOf(path: string): { lines: string[]; size: number; chunks: number[] } {
  const lines: string[] = [];
  const chunks: number[] = [];
  const size = readTextLines(
    path,
    (line) => lines.push(line),
    (bytesRead) => chunks.push(bytesRead),
  );
  return { lines, size, chunks };
}

test("lines across chunk edges, longer than a chunk, with CRLF and multi-byte characters are the whole text's", () => {
  const path = join(scratchDir("lines-"), "text.txt");
  const sentence = "Größe 坂本 𝐀𝐁𝐂 naïve café\r\n";
  const text = `\ufeff${sentence.repeat(40_000)}\n${"long line é ".repeat(150_000)}\r\n\r\n${sentence.repeat(20_000)}last line`;
  writeFileSync(path, text);
  const bytes = Buffer.byteLength(text);
  assert.ok(bytes > 3 * MB);
  const { lines, size, chunks } = linesOf(path);
  assert.equal(size, bytes);
  assert.deepEqual(lines, wholeTextLines(text));
  assert.equal(lines[0]!.charCodeAt(0), 0xfeff, "a leading BOM is kept, as Python keeps it");
  assert.equal(chunks.at(-1), bytes);
  assert.deepEqual(
    chunks,
    [...chunks].sort((a, b) => a - b),
  );
});

test("a bad byte past the first chunk is named by its offset in the file", () => {
  const path = join(scratchDir("lines-"), "bad.txt");
  const good = Buffer.from("é line\n".repeat(300_000)); // 2.4 MB
  writeFileSync(path, Buffer.concat([good, Buffer.from([0x41, 0xe2, 0x82, 0x41, 0x0a])]));
  assert.throws(() => linesOf(path), {
    name: "PreprocessError",
    message: `input file ${path} is not valid UTF-8 (first bad byte at offset ${good.length + 1})`,
  });
});

test("a multi-byte character cut short by the file's end is a bad byte at its start", () => {
  const path = join(scratchDir("lines-"), "cut.txt");
  writeFileSync(path, Buffer.from([0x61, 0x0a, 0x62, 0xf0, 0x9f, 0x98]));
  assert.throws(() => linesOf(path), { message: /first bad byte at offset 3\)/ });
});

test("an empty file has no lines and size 0; a missing one is named", () => {
  const dir = scratchDir("lines-");
  writeFileSync(join(dir, "empty.txt"), "");
  assert.deepEqual(linesOf(join(dir, "empty.txt")), { lines: [], size: 0, chunks: [] });
  assert.throws(() => linesOf(join(dir, "nope.txt")), { message: /nope\.txt: it does not exist/ });
});
