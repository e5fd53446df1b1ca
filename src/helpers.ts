// Small shared pieces: environment knobs, errors, counters, the disk cache's folder, array helpers.
import { renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/** Every error tsgrad throws on bad input: the message names the shape, dtype, device, path or offset. */
export class TsgradError extends Error {
  override name = "TsgradError";
}

/** An environment knob, read once per call; numbers parse as numbers. */
export function getenv(key: string, fallback: number): number;
export function getenv(key: string, fallback: string): string;
export function getenv(key: string, fallback: number | string): number | string {
  const raw = process.env[key];
  if (raw === undefined || raw === "") return fallback;
  if (typeof fallback === "number") {
    // decimal only: Number() would also read "0x20", " 2 " and "Infinity"
    if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(raw))
      throw new TsgradError(`environment variable ${key}=${JSON.stringify(raw)} is not a decimal number`);
    return Number(raw);
  }
  return raw;
}

/** DEBUG=2 prints one line per kernel; DEBUG=4 also prints its source. Read live so tests can change it. */
export function debugLevel(): number {
  return getenv("DEBUG", 0);
}

/**
 * `$TSGRAD_CACHE`, else `$XDG_CACHE_HOME/tsgrad`, else `~/.cache/tsgrad`. Read live so tests can point it elsewhere.
 */
export function cacheDir(): string {
  if (process.env.TSGRAD_CACHE) return process.env.TSGRAD_CACHE;
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "tsgrad");
}

/** Whether this runs in Node, with files: not in a browser (its caches on disk are then off). */
export const hasFileSystem = (): boolean =>
  typeof process !== "undefined" && typeof process.versions?.node === "string";

/** Writes a file so readers see either nothing or all of it. */
export function writeAtomic(path: string, data: string | Uint8Array): void {
  const temp = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  writeFileSync(temp, data);
  renameSync(temp, path);
}

/** Counts what ran, for benchmarks and tests (`GlobalCounters.reset()` between measurements). */
export const GlobalCounters = {
  kernelCount: 0,
  globalOps: 0,
  globalMem: 0,
  timeSumS: 0,
  memUsed: 0,
  reset(): void {
    this.kernelCount = 0;
    this.globalOps = 0;
    this.globalMem = 0;
    this.timeSumS = 0;
  },
};

export const prod = (xs: readonly number[]): number => xs.reduce((a, b) => a * b, 1);

export const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

export const arraysEqual = <T>(a: readonly T[], b: readonly T[]): boolean =>
  a.length === b.length && a.every((x, i) => x === b[i]);

/** Row-major strides of a contiguous array of `shape`. */
export function stridesFor(shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length);
  let step = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = step;
    step *= shape[i]!;
  }
  return strides;
}

export const fmtShape = (shape: readonly number[]): string => `[${shape.join(", ")}]`;

/** `axis` (negative counts from the end) as an index into `shape`, or an error naming `op`, the axis and the shape. */
export function axisFor(op: string, shape: readonly number[], axis: number): number {
  const a = axis < 0 ? axis + shape.length : axis;
  if (!Number.isInteger(a) || a < 0 || a >= shape.length)
    throw new TsgradError(`${op}: axis ${axis} is out of range for a tensor of shape ${fmtShape(shape)}`);
  return a;
}
