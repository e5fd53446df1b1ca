// The NCCL communicator: collectives on device memory, one GPU a rank, queued on that GPU's stream after the
// kernels that wrote the data and before the ones that read it (no host round trip, no synchronisation).
// Rank 0 makes NCCL's unique id; it reaches the other ranks through the host communicator (MPI) or a file.
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { Device } from "../device.ts";
import { TsgradError } from "../helpers.ts";
import type { Communicator, ReduceOp } from "./communicator.ts";
import {
  AVG_VERSION,
  type CollectiveLibrary,
  NCCL_OPS,
  NCCL_TYPES,
  NcclError,
  type NcclLibrary,
  type NcclType,
  UNIQUE_ID_BYTES,
  loadNccl,
  versionString,
} from "./nccl_library.ts";

/** A device address and a stream handle, as koffi passes them (bigint) or a driver hands them out. */
export type DevicePointer = bigint | number;

/** What NCCL needs of the GPU a rank drives: the stream to queue on, and the GPU made current for init. */
export interface NcclDevice {
  /** The stream the device's kernels run on (null: the legacy default stream). */
  stream: unknown;
  /** Makes the device's context current on this thread (NCCL binds a communicator to the current GPU). */
  activate(): void;
  /** The device address of memory its allocator handed out (a device from Device.allocator(...).native has it). */
  pointer?(raw: unknown): bigint;
}

/** How the ranks learn rank 0's unique id. */
export type Rendezvous = { kind: "host"; host: Communicator } | { kind: "file"; path: string; timeoutMs?: number };

export class NcclCommunicator {
  private comm: unknown;
  private closed = false;

  private constructor(
    private readonly nccl: NcclLibrary,
    comm: unknown,
    readonly rank: number,
    readonly size: number,
    private readonly device: NcclDevice,
  ) {
    this.comm = comm;
  }

  /**
   * Joins the NCCL world of `size` ranks as `rank` on `device`; every rank calls it with the same rendezvous.
   * `library` is "rccl" on AMD GPUs (RCCL: NCCL's API on HIP streams).
   */
  static open(
    rank: number,
    size: number,
    device: NcclDevice,
    rendezvous: Rendezvous,
    library: CollectiveLibrary = "nccl",
  ): NcclCommunicator {
    const nccl = loadNccl(process.env, library);
    const id = { internal: new Uint8Array(UNIQUE_ID_BYTES) };
    if (rank === 0) nccl.check("ncclGetUniqueId", nccl.ncclGetUniqueId(id));
    if (rendezvous.kind === "host") {
      if (rendezvous.host.rank !== rank || rendezvous.host.size !== size)
        throw new NcclError(
          `NCCL rank ${rank} of ${size} over a host communicator of rank ${rendezvous.host.rank} of ${rendezvous.host.size}`,
        );
      rendezvous.host.broadcast(id.internal, 0);
    } else {
      id.internal.set(exchangeByFile(rank, id.internal, rendezvous.path, rendezvous.timeoutMs ?? 120_000));
    }
    device.activate();
    const comm: unknown[] = [null];
    nccl.check("ncclCommInitRank", nccl.ncclCommInitRank(comm, size, id, rank), `rank ${rank} of ${size}`);
    return new NcclCommunicator(nccl, comm[0], rank, size, device);
  }

  /**
   * The communicator of `host`'s ranks (its MPI world carries the id) on the GPU `device` ("CUDA:3"): one GPU
   * a rank. NcclError where the library is missing or the device is not a GPU NCCL can drive.
   */
  static forDevice(host: Communicator, device: string): NcclCommunicator {
    const native = Device.allocator(device).native;
    if (!native)
      throw new NcclError(`${device} is not a GPU NCCL can use (NCCL works on CUDA devices, RCCL on AMD ones)`);
    const library = Device.canonicalize(device).startsWith("AMD") ? "rccl" : "nccl";
    return NcclCommunicator.open(host.rank, host.size, native, { kind: "host", host }, library);
  }

  /** The device address of a buffer on this communicator's GPU (its allocator's, as forDevice gives it). */
  devicePointer(buffer: { handle: unknown }): bigint {
    if (!this.device.pointer) throw new NcclError("this NCCL communicator was opened without a device allocator");
    return this.device.pointer(buffer.handle);
  }

  /** NCCL's version, e.g. "2.18.5", and where it was loaded from. */
  get library(): { version: string; path: string } {
    return { version: versionString(this.nccl.version), path: this.nccl.path };
  }

  /**
   * Reduces `count` elements at each address across ranks, in place, queued on the device's stream; several
   * buffers go as one NCCL group (one launch).
   */
  allReduce(buffers: readonly { pointer: DevicePointer; count: number; type: NcclType }[], op: ReduceOp = "sum"): void {
    if (op === "mean" && this.nccl.version < AVG_VERSION)
      throw new NcclError(
        `NCCL ${versionString(this.nccl.version)} has no average (ncclAvg came with 2.10): reduce with sum and divide`,
      );
    const ncclOp = op === "mean" ? NCCL_OPS.avg : op === "max" ? NCCL_OPS.max : NCCL_OPS.sum;
    this.grouped(() => {
      for (const { pointer, count, type } of buffers) {
        const at = BigInt(pointer);
        this.call("ncclAllReduce", () =>
          this.nccl.ncclAllReduce(at, at, count, NCCL_TYPES[type], ncclOp, this.comm, this.stream),
        );
      }
    });
  }

  /** Copies `root`'s `count` elements at `pointer` to every rank's, in place. */
  broadcast(pointer: DevicePointer, count: number, type: NcclType, root = 0): void {
    if (!Number.isInteger(root) || root < 0 || root >= this.size)
      throw new NcclError(`broadcast: root ${root} is not a rank of a world of ${this.size}`);
    const at = BigInt(pointer);
    this.call("ncclBroadcast", () =>
      this.nccl.ncclBroadcast(at, at, count, NCCL_TYPES[type], root, this.comm, this.stream),
    );
  }

  /** Each rank's `count` elements at `send`, in rank order, into `size * count` elements at `receive`. */
  allGather(send: DevicePointer, receive: DevicePointer, count: number, type: NcclType): void {
    this.call("ncclAllGather", () =>
      this.nccl.ncclAllGather(BigInt(send), BigInt(receive), count, NCCL_TYPES[type], this.comm, this.stream),
    );
  }

  /** Ends this rank's part; a failed job aborts instead (no waiting for ranks that are gone). */
  close({ abort = false }: { abort?: boolean } = {}): void {
    if (this.closed) return;
    this.closed = true;
    const call = abort ? "ncclCommAbort" : "ncclCommDestroy";
    this.nccl.check(call, this.nccl[call](this.comm));
  }

  private get stream(): unknown {
    return this.device.stream ?? null;
  }

  private grouped(body: () => void): void {
    this.call("ncclGroupStart", () => this.nccl.ncclGroupStart());
    try {
      body();
    } finally {
      this.call("ncclGroupEnd", () => this.nccl.ncclGroupEnd());
    }
  }

  /** Runs one NCCL call, checked; never on a closed communicator (its memory is freed). */
  private call(name: string, invoke: () => unknown): void {
    if (this.closed) throw new NcclError(`${name}: the communicator is closed`);
    this.nccl.check(name, invoke(), `rank ${this.rank} of ${this.size}`);
  }
}

/**
 * Rank 0 writes `id` to `path` (whole or not at all); the others wait for the file and read it. For launchers
 * without MPI (srun without PMI, torchrun), on a file system every rank sees.
 */
export function exchangeByFile(rank: number, id: Uint8Array, path: string, timeoutMs: number): Uint8Array {
  if (rank === 0) {
    // whole or not at all: the others must never read a half-written id
    const temporary = `${path}.${process.pid}.tmp`;
    writeFileSync(temporary, id);
    renameSync(temporary, path);
    return id;
  }
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(path)) {
    if (Date.now() > deadline)
      throw new NcclError(`rank ${rank}: no NCCL id at ${path} after ${timeoutMs / 1000} s: did rank 0 start?`);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
  }
  const bytes = readFileSync(path);
  if (bytes.length !== UNIQUE_ID_BYTES)
    throw new TsgradError(`${path}: ${bytes.length} bytes, an NCCL id has ${UNIQUE_ID_BYTES}`);
  return new Uint8Array(bytes);
}
