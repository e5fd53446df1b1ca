// Reads back the PNG a browser wrote, to check what it shows: 8-bit RGB or RGBA, not interlaced (what Chromium's
// screenshots are). The chunks' image data is inflated and each row unfiltered (PNG spec, section 9).
import { inflateSync } from "node:zlib";

export class PngError extends Error {
  override name = "PngError";
}

export interface Image {
  width: number;
  height: number;
  /** Bytes per pixel: 3 (RGB) or 4 (RGBA). */
  channels: number;
  /** Row after row, `channels` bytes a pixel. */
  pixels: Uint8Array;
}

const SIGNATURE = [137, 80, 78, 71, 13, 10, 26, 10];

export function decodePng(bytes: Uint8Array): Image {
  if (!SIGNATURE.every((b, i) => bytes[i] === b)) throw new PngError("not a PNG: bad signature");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let width = 0;
  let height = 0;
  let channels = 0;
  const data: Uint8Array[] = [];
  for (let at = 8; at < bytes.length; ) {
    const length = view.getUint32(at);
    const type = String.fromCharCode(...bytes.subarray(at + 4, at + 8));
    const body = bytes.subarray(at + 8, at + 8 + length);
    if (type === "IHDR") {
      width = view.getUint32(at + 8);
      height = view.getUint32(at + 12);
      const [bitDepth, colorType, , , interlace] = body.subarray(8);
      channels = colorType === 6 ? 4 : colorType === 2 ? 3 : 0;
      if (bitDepth !== 8 || channels === 0 || interlace !== 0)
        throw new PngError(`unsupported PNG: bit depth ${bitDepth}, color type ${colorType}, interlace ${interlace}`);
    } else if (type === "IDAT") {
      data.push(body);
    }
    at += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(data));
  const stride = width * channels;
  const pixels = new Uint8Array(stride * height);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)]!;
    const row = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    const out = y * stride;
    for (let x = 0; x < stride; x++) {
      const left = x >= channels ? pixels[out + x - channels]! : 0;
      const up = y > 0 ? pixels[out - stride + x]! : 0;
      const upLeft = y > 0 && x >= channels ? pixels[out - stride + x - channels]! : 0;
      pixels[out + x] = (row[x]! + predict(filter, left, up, upLeft)) & 0xff;
    }
  }
  return { width, height, channels, pixels };
}

/** The filter's prediction of a byte from its left, upper and upper-left neighbours. */
function predict(filter: number, left: number, up: number, upLeft: number): number {
  if (filter === 0) return 0;
  if (filter === 1) return left;
  if (filter === 2) return up;
  if (filter === 3) return (left + up) >> 1;
  if (filter === 4) {
    const p = left + up - upLeft;
    const [pa, pb, pc] = [Math.abs(p - left), Math.abs(p - up), Math.abs(p - upLeft)];
    return pa <= pb && pa <= pc ? left : pb <= pc ? up : upLeft;
  }
  throw new PngError(`bad row filter ${filter}`);
}

/** How many pixels are within `tolerance` of the colour `#rrggbb` in every channel. */
export function countColor(image: Image, hex: string, tolerance = 8): number {
  const target = [1, 3, 5].map((i) => Number.parseInt(hex.slice(i, i + 2), 16));
  let count = 0;
  for (let at = 0; at < image.pixels.length; at += image.channels) {
    if (target.every((c, i) => Math.abs(image.pixels[at + i]! - c) <= tolerance)) count++;
  }
  return count;
}

/** How many different colours the image holds (a blank or failed page has one or two). */
export function distinctColors(image: Image): number {
  const seen = new Set<number>();
  for (let at = 0; at < image.pixels.length; at += image.channels)
    seen.add((image.pixels[at]! << 16) | (image.pixels[at + 1]! << 8) | image.pixels[at + 2]!);
  return seen.size;
}
