// Snappy raw-block decompression (the format LevelDB tables use for compressed blocks).
//
// A block is a varint32 of the uncompressed length, then elements whose tag byte's low
// two bits choose: 0 a literal run, 1 a copy with an 11-bit offset, 2 a copy with a
// 16-bit offset, 3 a copy with a 32-bit offset. Copies may overlap their own output
// (offset < length repeats a pattern), so they are done byte by byte.

/** Corrupt or truncated snappy input; `offset` is the byte in the compressed input where decoding failed. */
export class SnappyError extends Error {
  constructor(
    message: string,
    readonly offset: number,
    readonly source?: string,
  ) {
    super(`snappy: ${source ? `${source}: ` : ""}${message} at byte ${offset}`);
    this.name = "SnappyError";
  }
}

const TAG_LITERAL = 0;
const TAG_COPY_1 = 1;
const TAG_COPY_2 = 2;

/** Length of the output a snappy block declares in its varint preamble. */
export function snappyUncompressedLength(input: Uint8Array, source?: string): number {
  return readPreamble(input, source).length;
}

/**
 * Decompress one snappy raw block. `source` names the input in errors (a file and offset, say).
 *
 *   snappyDecompress(Uint8Array.of(5, 0x10, 104, 101, 108, 108, 111)) // "hello"
 */
export function snappyDecompress(input: Uint8Array, source?: string): Uint8Array {
  const fail = (message: string, at: number): never => {
    throw new SnappyError(message, at, source);
  };
  const { length, end: preambleEnd } = readPreamble(input, source);
  const output = new Uint8Array(length);
  let produced = 0;
  let pos = preambleEnd;
  while (pos < input.length) {
    const tagAt = pos;
    const tag = input[pos++]!;
    const kind = tag & 3;
    if (kind === TAG_LITERAL) {
      let runLength = tag >>> 2;
      if (runLength >= 60) {
        const extraBytes = runLength - 59;
        if (pos + extraBytes > input.length) fail(`literal length needs ${extraBytes} bytes past the end`, tagAt);
        runLength = 0;
        for (let i = 0; i < extraBytes; i++) runLength += input[pos++]! * 2 ** (8 * i);
      }
      runLength += 1;
      if (pos + runLength > input.length) fail(`literal of ${runLength} bytes runs past the end of the input`, tagAt);
      if (produced + runLength > length)
        fail(`literal of ${runLength} bytes overflows the declared length ${length}`, tagAt);
      output.set(input.subarray(pos, pos + runLength), produced);
      pos += runLength;
      produced += runLength;
      continue;
    }
    let copyLength: number;
    let distance: number;
    if (kind === TAG_COPY_1) {
      if (pos + 1 > input.length) fail("copy-1 offset byte missing", tagAt);
      copyLength = 4 + ((tag >>> 2) & 7);
      distance = ((tag >>> 5) << 8) | input[pos++]!;
    } else if (kind === TAG_COPY_2) {
      if (pos + 2 > input.length) fail("copy-2 offset bytes missing", tagAt);
      copyLength = 1 + (tag >>> 2);
      distance = input[pos]! | (input[pos + 1]! << 8);
      pos += 2;
    } else {
      if (pos + 4 > input.length) fail("copy-4 offset bytes missing", tagAt);
      copyLength = 1 + (tag >>> 2);
      distance = (input[pos]! | (input[pos + 1]! << 8) | (input[pos + 2]! << 16) | (input[pos + 3]! << 24)) >>> 0;
      pos += 4;
    }
    if (distance === 0 || distance > produced)
      fail(`copy offset ${distance} outside the ${produced} bytes produced so far`, tagAt);
    if (produced + copyLength > length)
      fail(`copy of ${copyLength} bytes overflows the declared length ${length}`, tagAt);
    for (let i = 0; i < copyLength; i++, produced++) output[produced] = output[produced - distance]!;
  }
  if (produced !== length) fail(`input ends after ${produced} of the declared ${length} bytes`, pos);
  return output;
}

function readPreamble(input: Uint8Array, source?: string): { length: number; end: number } {
  let length = 0;
  for (let i = 0; i < 5; i++) {
    if (i >= input.length) throw new SnappyError("length preamble truncated", i, source);
    const byte = input[i]!;
    length += (byte & 0x7f) * 2 ** (7 * i);
    if (byte < 0x80) {
      if (length > 0xffffffff) throw new SnappyError(`length preamble ${length} exceeds 32 bits`, 0, source);
      return { length, end: i + 1 };
    }
  }
  throw new SnappyError("length preamble longer than 5 bytes", 0, source);
}
