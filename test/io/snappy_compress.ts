// A small snappy compressor for tests: it makes snappy-compressed table blocks and
// round-trip inputs, and can force the tag kinds libsnappy never emits (copy-4 and
// literal lengths of 3 or 4 bytes) so the decompressor's handling of them is exercised.

export interface SnappyCompressOptions {
  /** Write every copy with the 4-byte-offset tag. */
  copy4?: boolean;
  /** Bytes used for every literal length of 60 or more (1 to 4); the smallest that fits by default. */
  literalLengthBytes?: number;
}

const MIN_MATCH = 4;
const MAX_COPY = 64;

export function snappyCompress(input: Uint8Array, options: SnappyCompressOptions = {}): Uint8Array {
  const out: number[] = [];
  for (let n = input.length; ; n = Math.floor(n / 128)) {
    if (n < 128) {
      out.push(n);
      break;
    }
    out.push((n & 0x7f) | 0x80);
  }
  const lastSeen = new Map<number, number>();
  let literalStart = 0;
  let pos = 0;
  while (pos + MIN_MATCH <= input.length) {
    const key = (input[pos]! | (input[pos + 1]! << 8) | (input[pos + 2]! << 16) | (input[pos + 3]! << 24)) >>> 0;
    const candidate = lastSeen.get(key);
    lastSeen.set(key, pos);
    if (candidate === undefined) {
      pos++;
      continue;
    }
    let length = 0;
    while (pos + length < input.length && input[candidate + length] === input[pos + length]) length++;
    emitLiteral(out, input.subarray(literalStart, pos), options);
    for (let left = length; left > 0; ) {
      const piece = Math.min(left, MAX_COPY);
      emitCopy(out, pos - candidate, piece, options);
      left -= piece;
    }
    pos += length;
    literalStart = pos;
  }
  emitLiteral(out, input.subarray(literalStart), options);
  return Uint8Array.from(out);
}

function emitLiteral(out: number[], bytes: Uint8Array, options: SnappyCompressOptions): void {
  if (bytes.length === 0) return;
  const n = bytes.length - 1;
  const minimalBytes = n < 60 ? 0 : n < 2 ** 8 ? 1 : n < 2 ** 16 ? 2 : n < 2 ** 24 ? 3 : 4;
  const lengthBytes = minimalBytes === 0 ? 0 : Math.max(minimalBytes, options.literalLengthBytes ?? 0);
  if (lengthBytes === 0) out.push(n << 2);
  else {
    out.push((59 + lengthBytes) << 2);
    for (let i = 0; i < lengthBytes; i++) out.push(Math.floor(n / 2 ** (8 * i)) & 0xff);
  }
  for (const byte of bytes) out.push(byte);
}

function emitCopy(out: number[], distance: number, length: number, options: SnappyCompressOptions): void {
  if (options.copy4 || distance >= 2 ** 16) {
    out.push(
      ((length - 1) << 2) | 3,
      distance & 0xff,
      (distance >>> 8) & 0xff,
      (distance >>> 16) & 0xff,
      distance >>> 24,
    );
  } else if (length >= 4 && length <= 11 && distance < 2048) {
    out.push(((distance >>> 8) << 5) | ((length - 4) << 2) | 1, distance & 0xff);
  } else {
    out.push(((length - 1) << 2) | 2, distance & 0xff, distance >>> 8);
  }
}
