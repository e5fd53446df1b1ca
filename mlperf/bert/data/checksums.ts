// MD5 digests of downloaded and extracted files, and the `md5sum` list format the MLPerf
// BERT text archive ships with (`bert_reference_results_text_md5.txt`).
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { join } from "node:path";

/** A file whose MD5 is not the published one. */
export class ChecksumError extends Error {
  constructor(
    readonly file: string,
    readonly expected: string,
    readonly actual: string,
    /** Where the mismatching file was moved, so that a rerun does not take it for a good copy. */
    readonly movedTo?: string,
  ) {
    super(
      `md5 mismatch for ${file}: expected ${expected}, got ${actual}${movedTo ? `; the file is now ${movedTo}` : ""}`,
    );
    this.name = "ChecksumError";
  }
}

/** A line of an md5 list that is not `<32 hex digits> <name>`. */
export class Md5ListError extends Error {
  constructor(listPath: string, lineNumber: number, line: string) {
    super(`${listPath}:${lineNumber}: not an md5sum line: ${JSON.stringify(line)}`);
    this.name = "Md5ListError";
  }
}

/** Hex MD5 of a file, streamed; `onBytes` sees each chunk's length (for a progress bar). */
export async function md5File(path: string, onBytes?: (n: number) => void): Promise<string> {
  const hash = createHash("md5");
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) {
    hash.update(chunk as Buffer);
    onBytes?.((chunk as Buffer).length);
  }
  return hash.digest("hex");
}

/** Throws a ChecksumError naming `path` unless its MD5 is `expected`. */
export async function verifyMd5(path: string, expected: string, onBytes?: (n: number) => void): Promise<void> {
  const actual = await md5File(path, onBytes);
  if (actual !== expected.toLowerCase()) throw new ChecksumError(path, expected, actual);
}

/**
 * Parses `md5sum` output: `<hex>  <name>` (text mode) or `<hex> *<name>` (binary mode), one
 * a line, blank lines ignored. Names are returned relative, without a leading `./`, in file order.
 */
export function parseMd5List(text: string, listPath: string): { name: string; md5: string }[] {
  const entries: { name: string; md5: string }[] = [];
  text.split("\n").forEach((raw, index) => {
    const line = raw.replace(/\r$/, "");
    if (line.trim() === "") return;
    const match = /^([0-9a-fA-F]{32}) [ *](.+)$/.exec(line);
    if (!match) throw new Md5ListError(listPath, index + 1, line);
    entries.push({ md5: match[1]!.toLowerCase(), name: match[2]!.replace(/^(\.\/)+/, "") });
  });
  return entries;
}

/**
 * Checks every file an md5 list names, relative to `folder`; the first mismatch or missing
 * file is an error naming it.
 */
export async function verifyMd5List(
  folder: string,
  entries: { name: string; md5: string }[],
  onBytes?: (n: number) => void,
): Promise<void> {
  for (const { name, md5 } of entries) await verifyMd5(join(folder, name), md5, onBytes);
}
