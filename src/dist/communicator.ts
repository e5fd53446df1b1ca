// What every backend offers: collectives over host arrays among the processes of one job, blocking, in place.
import { TsgradError } from "../helpers.ts";
import type { Launcher } from "./launcher.ts";

export type ReduceOp = "sum" | "mean" | "max";
/** The host arrays the collectives take; bytes (Uint8Array) only move (broadcast, allGather), they do not add up. */
export type HostArray = Float32Array | Float64Array | Int32Array | Uint8Array;

export interface Communicator {
  readonly backend: "single" | "mpi";
  readonly launcher: Launcher;
  readonly rank: number;
  readonly size: number;
  /** The rank among the processes on this machine: which local device to use. */
  readonly localRank: number;
  /** Reduces `data` across ranks into every rank's `data`; returns it. */
  allReduce<T extends HostArray>(data: T, op?: ReduceOp): T;
  /** Copies `root`'s `data` into every rank's `data`; returns it. */
  broadcast<T extends HostArray>(data: T, root?: number): T;
  /** Every rank's `data` (each of the same length n), in rank order: a new array of size * n. */
  allGather<T extends HostArray>(data: T): T;
  /** Returns when every rank has called it. */
  barrier(): void;
  /** Ends this process's part in the job; no collective may follow. */
  close(): void;
}

/** Rejects what no backend can do, so that one process and many fail alike. */
export function checkReduceOp(data: HostArray, op: ReduceOp): void {
  if (op !== "sum" && op !== "mean" && op !== "max")
    throw new TsgradError(`allReduce: unknown op ${JSON.stringify(op)} (sum, mean or max)`);
  if (data instanceof Uint8Array)
    throw new TsgradError(
      "allReduce: bytes (Uint8Array) do not add up; reduce a Float32Array, Float64Array or Int32Array",
    );
  if (op === "mean" && data instanceof Int32Array)
    throw new TsgradError("allReduce: the mean of an Int32Array is not an integer; reduce a float array");
}

/** Rejects a root that is not a rank. */
export function checkRoot(root: number, size: number): void {
  if (!Number.isInteger(root) || root < 0 || root >= size)
    throw new TsgradError(`broadcast: root ${root} is not a rank of a world of ${size}`);
}

/** World size 1: no library loaded, every collective the identity. */
export class SingleProcess implements Communicator {
  readonly backend = "single";
  readonly rank = 0;
  readonly size = 1;
  readonly localRank = 0;

  constructor(readonly launcher: Launcher = "none") {}

  allReduce<T extends HostArray>(data: T, op: ReduceOp = "sum"): T {
    checkReduceOp(data, op);
    return data;
  }

  broadcast<T extends HostArray>(data: T, root = 0): T {
    checkRoot(root, this.size);
    return data;
  }

  allGather<T extends HostArray>(data: T): T {
    return data.slice() as T;
  }

  barrier(): void {}

  close(): void {}
}
