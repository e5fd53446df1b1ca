// The MPI communicator: collectives on host arrays through the system's libmpi, one process per rank
// (started by mpirun or srun). Blocking calls on the main thread; big arrays go through in slices.
import { TsgradError, getenv } from "../helpers.ts";
import { type Communicator, type HostArray, type ReduceOp, checkReduceOp, checkRoot } from "./communicator.ts";
import type { Launcher, World } from "./launcher.ts";
import { type Handle, MpiError, type MpiLibrary, loadMpi } from "./mpi_library.ts";

/**
 * Megabytes per MPI call. Open MPI's shared-memory collectives take scratch memory as big as the message,
 * and big allocations are fresh pages, faulted in again on every call (docs/performance.md); a few MB per
 * call keeps reusing warm memory.
 */
export const DEFAULT_SLICE_MB = 4;

/** Elements of `data` per MPI call: `TSGRAD_MPI_SLICE_MB` (fractions allowed), else DEFAULT_SLICE_MB. */
export function sliceElements(data: HostArray): number {
  const megabytes = getenv("TSGRAD_MPI_SLICE_MB", DEFAULT_SLICE_MB);
  if (!(megabytes > 0)) throw new TsgradError(`TSGRAD_MPI_SLICE_MB=${megabytes}: a slice must be positive`);
  return Math.max(1, Math.floor((megabytes * 2 ** 20) / data.BYTES_PER_ELEMENT));
}

/** The starts and lengths of `data`'s slices. */
function* slices(data: HostArray): Generator<[number, number]> {
  const step = sliceElements(data);
  for (let start = 0; start < data.length; start += step) yield [start, Math.min(step, data.length - start)];
}

export class MpiCommunicator implements Communicator {
  readonly backend = "mpi";
  private closed = false;

  private constructor(
    private readonly mpi: MpiLibrary,
    readonly launcher: Launcher,
    readonly rank: number,
    readonly size: number,
    readonly localRank: number,
  ) {}

  /** Initialises MPI (once per process) and checks that it sees the world the launcher announced. */
  static open(world: World): MpiCommunicator {
    const mpi = loadMpi();
    const { commWorld, errorsReturn } = mpi.handles;
    if (flag(mpi, "MPI_Finalized")) throw new MpiError("MPI was finalized in this process: it cannot start again");
    if (!flag(mpi, "MPI_Initialized")) mpi.check("MPI_Init", mpi.MPI_Init(null, null));
    // errors come back as codes (MpiError) instead of aborting the job without a word
    mpi.check("MPI_Comm_set_errhandler", mpi.MPI_Comm_set_errhandler(commWorld, errorsReturn));
    const rank = out(mpi, "MPI_Comm_rank", commWorld);
    const size = out(mpi, "MPI_Comm_size", commWorld);
    if (rank !== world.rank || size !== world.size)
      throw new MpiError(
        `the ${world.launcher} launcher announced rank ${world.rank} of ${world.size}, MPI sees rank ${rank} ` +
          `of ${size}: start every rank with mpirun (or srun), not each by hand`,
      );
    const communicator = new MpiCommunicator(mpi, world.launcher, rank, size, world.localRank);
    // a clean exit must finalize or mpirun fails the job; a failed one must not wait for the other ranks
    process.once("exit", (code) => {
      if (code === 0) communicator.close();
    });
    return communicator;
  }

  allReduce<T extends HostArray>(data: T, op: ReduceOp = "sum"): T {
    checkReduceOp(data, op);
    const { inPlace, sum, max } = this.mpi.handles;
    for (const [start, length] of slices(data)) {
      const part = data.subarray(start, start + length);
      this.call("MPI_Allreduce", inPlace, part, length, this.datatype(data), op === "max" ? max : sum);
      // divided while the slice is still in cache
      if (op === "mean") for (let i = 0; i < length; i++) part[i]! /= this.size;
    }
    return data;
  }

  broadcast<T extends HostArray>(data: T, root = 0): T {
    checkRoot(root, this.size);
    for (const [start, length] of slices(data)) {
      this.call("MPI_Bcast", data.subarray(start, start + length), length, this.datatype(data), root);
    }
    return data;
  }

  allGather<T extends HostArray>(data: T): T {
    const n = data.length;
    const make = data.constructor as new (length: number) => T;
    const gathered = new make(this.size * n);
    const type = this.datatype(data);
    // a slice gathers into one block per rank; each block is then copied to its rank's place
    const scratch = new make(this.size * Math.min(n, sliceElements(data)));
    for (const [start, length] of slices(data)) {
      this.call("MPI_Allgather", data.subarray(start, start + length), length, type, scratch, length, type);
      for (let r = 0; r < this.size; r++) gathered.set(scratch.subarray(r * length, (r + 1) * length), r * n + start);
    }
    return gathered;
  }

  barrier(): void {
    this.call("MPI_Barrier");
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (!flag(this.mpi, "MPI_Finalized")) this.mpi.check("MPI_Finalize", this.mpi.MPI_Finalize());
  }

  /** Calls a collective on the world communicator (its last argument), checking the result. */
  private call(name: "MPI_Allreduce" | "MPI_Bcast" | "MPI_Allgather" | "MPI_Barrier", ...args: unknown[]): void {
    if (this.closed) throw new MpiError(`${name}: the communicator is closed`);
    this.mpi.check(name, this.mpi[name](...args, this.mpi.handles.commWorld));
  }

  private datatype(data: HostArray): Handle {
    const { float32, float64, int32, byte } = this.mpi.handles;
    if (data instanceof Float32Array) return float32;
    if (data instanceof Float64Array) return float64;
    if (data instanceof Int32Array) return int32;
    if (data instanceof Uint8Array) return byte;
    throw new TsgradError(
      `MPI collectives take a Float32Array, Float64Array, Int32Array or Uint8Array, not ${typeOf(data)}`,
    );
  }
}

const typeOf = (value: unknown): string => (value as object)?.constructor?.name ?? typeof value;

/** A call that fills one int, checked. */
function out(mpi: MpiLibrary, name: "MPI_Comm_rank" | "MPI_Comm_size", comm: Handle): number {
  const value: number[] = [0];
  mpi.check(name, mpi[name](comm, value));
  return value[0]!;
}

/** MPI_Initialized or MPI_Finalized: callable before MPI_Init and after MPI_Finalize. */
function flag(mpi: MpiLibrary, name: "MPI_Initialized" | "MPI_Finalized"): boolean {
  const value: number[] = [0];
  mpi.check(name, mpi[name](value));
  return value[0] !== 0;
}
