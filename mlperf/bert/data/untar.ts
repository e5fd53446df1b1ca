// Streaming .tar.gz extraction: gunzip feeds a small tar parser (ustar, GNU long names, pax
// headers) that writes each regular file through a temp file and a rename, so the
// decompressed tar never touches the disk and no half-written file carries its real name.
import { createReadStream } from "node:fs";
import { mkdir, open, rename, rm } from "node:fs/promises";
import { basename, dirname, join, resolve, sep } from "node:path";
import { pipeline, Transform } from "node:stream";
import { createGunzip } from "node:zlib";

const BLOCK = 512;
/** Largest GNU long-name or pax header body we accept; real ones are a few hundred bytes. */
const MAX_META_BYTES = 1 << 20;

/** A bad, truncated or unsafe archive, with the byte offset in the decompressed tar. */
export class TarError extends Error {
  constructor(
    readonly archive: string,
    readonly offset: number,
    message: string,
  ) {
    super(`${archive}: ${message} (at byte ${offset} of the tar stream)`);
    this.name = "TarError";
  }
}

export interface ExtractOptions {
  /** Compressed bytes read so far are reported through this (for a progress bar). */
  onArchiveBytes?: (n: number) => void;
}

export interface ExtractSummary {
  files: number;
  directories: number;
  bytes: number;
}

/**
 * Extracts the regular files and directories of a gzip-compressed tar into `destDir`.
 * Refuses absolute names, `..` components, links and device nodes; a truncated archive is
 * an error naming the archive and the offset where it ended.
 */
export async function extractTarGz(
  archive: string,
  destDir: string,
  options: ExtractOptions = {},
): Promise<ExtractSummary> {
  const counter = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      options.onArchiveBytes?.(chunk.length);
      callback(null, chunk);
    },
  });
  const gunzip = createGunzip({ chunkSize: 1 << 18 });
  // The callback keeps pipeline from throwing; its errors reach the loop below through gunzip.
  const tar = pipeline(createReadStream(archive), counter, gunzip, () => {});
  const reader = new ByteReader(tar[Symbol.asyncIterator]());
  try {
    return await extractEntries(reader, archive, resolve(destDir));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? "";
    if (code.startsWith("Z_")) {
      throw new TarError(archive, reader.offset, `gzip stream is truncated or corrupt (${(error as Error).message})`);
    }
    throw error;
  } finally {
    tar.destroy();
  }
}

/** The fields of a tar header that extraction needs. */
interface TarHeader {
  name: string;
  size: number;
  type: string;
  linkName: string;
}

async function extractEntries(reader: ByteReader, archive: string, destDir: string): Promise<ExtractSummary> {
  const summary: ExtractSummary = { files: 0, directories: 0, bytes: 0 };
  let longName: string | undefined;
  let pax: Map<string, string> = new Map();
  for (;;) {
    const offset = reader.offset;
    const block = await reader.exactly(BLOCK);
    if (block === undefined)
      throw new TarError(archive, offset, "truncated archive: it ends without the end-of-archive marker");
    if (block.length < BLOCK) throw new TarError(archive, reader.offset, "truncated archive: it ends inside a header");
    if (block.every((byte) => byte === 0)) break;
    const header = parseHeader(block, archive, offset);
    if (header.type === "L" || header.type === "K" || header.type === "x" || header.type === "g") {
      if (header.size > MAX_META_BYTES)
        throw new TarError(archive, offset, `${header.size}-byte metadata entry is too large`);
      const body = await readBody(reader, header.size, archive, "metadata entry");
      if (header.type === "L") longName = cString(body);
      if (header.type === "x") pax = parsePax(body, archive, offset);
      continue; // 'K' (long link name) and 'g' (global pax) matter only for what we refuse or ignore
    }
    const name = pax.get("path") ?? longName ?? header.name;
    const linkName = pax.get("linkpath") ?? header.linkName;
    const size = pax.has("size") ? Number(pax.get("size")) : header.size;
    longName = undefined;
    pax = new Map();
    const target = safeTarget(destDir, name, archive, offset);
    // Pre-POSIX tars mark directories only by a trailing slash on a type-NUL entry.
    const type = header.type === "\0" && name.endsWith("/") ? "5" : header.type;
    switch (type) {
      case "0":
      case "\0":
      case "7":
        if (target === destDir) throw new TarError(archive, offset, `file entry ${JSON.stringify(name)} has no name`);
        await writeFile(reader, target, size, archive, name);
        summary.files++;
        summary.bytes += size;
        break;
      case "5":
        await mkdir(target, { recursive: true });
        summary.directories++;
        await skip(reader, size, archive, name);
        break;
      case "1":
      case "2":
        throw new TarError(
          archive,
          offset,
          `refusing ${type === "1" ? "hard" : "symbolic"} link ${name} -> ${linkName}`,
        );
      case "3":
      case "4":
      case "6":
        throw new TarError(archive, offset, `refusing device or FIFO entry ${name}`);
      default:
        throw new TarError(archive, offset, `unsupported tar entry type ${JSON.stringify(type)} for ${name}`);
    }
  }
  // Read to the end so that gzip checks its CRC and length trailer.
  while ((await reader.chunk(1 << 20)) !== undefined);
  return summary;
}

function parseHeader(block: Buffer, archive: string, offset: number): TarHeader {
  const stored = parseNumber(block.subarray(148, 156), archive, offset, "checksum");
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const byte = i >= 148 && i < 156 ? 0x20 : block[i]!;
    unsigned += byte;
    signed += byte > 127 ? byte - 256 : byte;
  }
  if (stored !== unsigned && stored !== signed) {
    throw new TarError(
      archive,
      offset,
      `header checksum ${stored} does not match computed ${unsigned}: not a tar header`,
    );
  }
  const magic = block.toString("latin1", 257, 265);
  let name = cString(block.subarray(0, 100));
  // POSIX ustar splits long names into prefix/name; GNU ("ustar  \0") uses the field otherwise.
  const prefix = magic === "ustar\x0000" ? cString(block.subarray(345, 500)) : "";
  if (prefix) name = `${prefix}/${name}`;
  return {
    name,
    size: parseNumber(block.subarray(124, 136), archive, offset, "size"),
    type: String.fromCharCode(block[156]!),
    linkName: cString(block.subarray(157, 257)),
  };
}

/** Octal digits padded with NULs or spaces, or GNU base-256 when the top bit is set. */
function parseNumber(field: Buffer, archive: string, offset: number, what: string): number {
  if (field[0]! & 0x80) {
    let value = field[0]! & 0x7f;
    for (let i = 1; i < field.length; i++) value = value * 256 + field[i]!;
    return value;
  }
  const text = field
    .toString("latin1")
    .replace(/[\0 ]+$/, "")
    .replace(/^[\0 ]+/, "");
  if (!/^[0-7]*$/.test(text)) throw new TarError(archive, offset, `bad ${what} field ${JSON.stringify(text)}`);
  return text === "" ? 0 : parseInt(text, 8);
}

/** Pax records: `<length> <key>=<value>\n`, the length counting the whole record. */
function parsePax(body: Buffer, archive: string, offset: number): Map<string, string> {
  const records = new Map<string, string>();
  let at = 0;
  while (at < body.length && body[at] !== 0) {
    const space = body.indexOf(0x20, at);
    const length = space > at ? Number(body.toString("latin1", at, space)) : NaN;
    if (!Number.isInteger(length) || length <= 0 || at + length > body.length) {
      throw new TarError(archive, offset, `malformed pax record at byte ${at} of the extended header`);
    }
    const record = body.toString("utf8", space + 1, at + length - 1);
    const eq = record.indexOf("=");
    if (eq > 0) records.set(record.slice(0, eq), record.slice(eq + 1));
    at += length;
  }
  if (records.has("size") && !/^\d+$/.test(records.get("size")!)) {
    throw new TarError(archive, offset, `bad pax size ${JSON.stringify(records.get("size"))}`);
  }
  return records;
}

/** Where `name` goes under `destDir`, refusing names that would land anywhere else. */
function safeTarget(destDir: string, name: string, archive: string, offset: number): string {
  if (name.startsWith("/") || /^[A-Za-z]:/.test(name)) {
    throw new TarError(archive, offset, `refusing absolute path ${JSON.stringify(name)}`);
  }
  const parts = name.split(/[\\/]/).filter((part) => part !== "" && part !== ".");
  if (parts.includes(".."))
    throw new TarError(archive, offset, `refusing path ${JSON.stringify(name)} that escapes the destination`);
  const target = join(destDir, ...parts);
  if (target !== destDir && !target.startsWith(destDir + sep)) {
    throw new TarError(archive, offset, `refusing path ${JSON.stringify(name)} outside ${destDir}`);
  }
  return target;
}

async function writeFile(
  reader: ByteReader,
  target: string,
  size: number,
  archive: string,
  name: string,
): Promise<void> {
  await mkdir(dirname(target), { recursive: true });
  const temp = join(dirname(target), `.${basename(target)}.${process.pid}.tmp`);
  const handle = await open(temp, "w");
  try {
    let left = size;
    while (left > 0) {
      const chunk = await reader.chunk(left);
      if (chunk === undefined) throw truncatedIn(reader, archive, name, left);
      for (let written = 0; written < chunk.length; ) written += (await handle.write(chunk, written)).bytesWritten;
      left -= chunk.length;
    }
    await handle.close();
    await skipPadding(reader, size, archive, name);
  } catch (error) {
    await handle.close().catch(() => {});
    await rm(temp, { force: true });
    throw error;
  }
  await rename(temp, target);
}

async function readBody(reader: ByteReader, size: number, archive: string, name: string): Promise<Buffer> {
  const body = await reader.exactly(size);
  if (size > 0 && (body === undefined || body.length < size))
    throw truncatedIn(reader, archive, name, size - (body?.length ?? 0));
  await skipPadding(reader, size, archive, name);
  return body ?? Buffer.alloc(0);
}

async function skip(reader: ByteReader, size: number, archive: string, name: string): Promise<void> {
  for (let left = size; left > 0; ) {
    const chunk = await reader.chunk(left);
    if (chunk === undefined) throw truncatedIn(reader, archive, name, left);
    left -= chunk.length;
  }
  await skipPadding(reader, size, archive, name);
}

async function skipPadding(reader: ByteReader, size: number, archive: string, name: string): Promise<void> {
  const padding = (BLOCK - (size % BLOCK)) % BLOCK;
  const read = await reader.exactly(padding);
  if (padding > 0 && (read === undefined || read.length < padding))
    throw truncatedIn(reader, archive, name, padding - (read?.length ?? 0));
}

function truncatedIn(reader: ByteReader, archive: string, name: string, missing: number): TarError {
  return new TarError(archive, reader.offset, `truncated archive: ${name} is missing its last ${missing} bytes`);
}

function cString(bytes: Buffer): string {
  const end = bytes.indexOf(0);
  return bytes.toString("utf8", 0, end === -1 ? bytes.length : end);
}

/** Pulls bytes from a stream of chunks, counting the offset consumed. */
class ByteReader {
  offset = 0;
  private pending: Buffer = Buffer.alloc(0);

  constructor(private readonly source: AsyncIterator<Buffer>) {}

  /** Up to `max` bytes (at least one), or undefined at the end of the stream. */
  async chunk(max: number): Promise<Buffer | undefined> {
    while (this.pending.length === 0) {
      const next = await this.source.next();
      if (next.done) return undefined;
      this.pending = next.value;
    }
    const out = this.pending.subarray(0, max);
    this.pending = this.pending.subarray(out.length);
    this.offset += out.length;
    return out;
  }

  /** `n` bytes, fewer if the stream ends first, undefined if it had already ended. */
  async exactly(n: number): Promise<Buffer | undefined> {
    const parts: Buffer[] = [];
    let have = 0;
    while (have < n) {
      const part = await this.chunk(n - have);
      if (part === undefined) break;
      parts.push(part);
      have += part.length;
    }
    if (n > 0 && have === 0) return undefined;
    return parts.length === 1 ? parts[0] : Buffer.concat(parts);
  }
}
