// Memory of the host backends (JS, CPU): a buffer is a Uint8Array over an ArrayBuffer, started at a 64-byte
// boundary. Node's ArrayBuffers start 16 bytes past one (malloc's header), so every 64-byte vector load or
// store of a kernel would straddle two cache lines, which slows a packing copy and a whole train step alike
// (bench/host-alignment.ts).
import koffi from "koffi";
import type { Allocator } from "../device.ts";
import { getenv } from "../helpers.ts";

/** Bytes a host buffer's start is aligned to: a cache line, and an AVX-512 vector. */
export const HOST_ALIGNMENT = 64;

/** `bytes` of zeroed memory starting at a multiple of HOST_ALIGNMENT. */
export function alignedBytes(bytes: number): Uint8Array {
  const raw = new ArrayBuffer(bytes + HOST_ALIGNMENT);
  // (V8 never moves an ArrayBuffer's memory: the offset holds for the buffer's life)
  return new Uint8Array(raw, alignmentOffset(raw), bytes);
}

/** Whether memory addresses can be read (koffi loads): not in a browser, where no native code reads them either. */
let addressable: boolean | undefined;

/** Bytes from the start of `raw` to its first aligned address (0 where addresses cannot be read). */
function alignmentOffset(raw: ArrayBuffer): number {
  let address: bigint;
  if (addressable === false) return 0;
  try {
    address = koffi.address(raw);
    addressable = true;
  } catch (error) {
    if (addressable) throw error;
    addressable = false;
    return 0;
  }
  const misalignment = Number(address % BigInt(HOST_ALIGNMENT));
  return misalignment === 0 ? 0 : HOST_ALIGNMENT - misalignment;
}

const view = (raw: unknown): Uint8Array => raw as Uint8Array;

/**
 * Freed host buffers by byte size, handed to the next allocation of that size: fresh memory costs a page fault
 * per 4 KiB on its first touch, inside the kernel that writes it (an eager matmul's packed operands were mostly
 * faults). Kernels write every element they store, so reused memory need not be zeroed. At most `limit` bytes
 * wait here (TSGRAD_HOST_POOL_MB, default 2048; 0 turns the pool off); beyond that a freed buffer goes to the
 * garbage collector.
 */
export class HostPool {
  private readonly free = new Map<number, Uint8Array[]>();
  private held = 0;
  /** Allocations served from the pool, and from fresh memory. */
  readonly counts = { reused: 0, fresh: 0 };
  constructor(readonly limit: number) {}

  allocate(bytes: number): Uint8Array {
    const kept = this.free.get(bytes)?.pop();
    if (!kept) {
      this.counts.fresh++;
      return alignedBytes(bytes);
    }
    this.counts.reused++;
    this.held -= bytes;
    return kept;
  }

  release(memory: Uint8Array): void {
    if (this.held + memory.byteLength > this.limit) return;
    const list = this.free.get(memory.byteLength);
    if (list) list.push(memory);
    else this.free.set(memory.byteLength, [memory]);
    this.held += memory.byteLength;
  }

  /** Bytes waiting for reuse. */
  get bytes(): number {
    return this.held;
  }

  /** Lets the garbage collector have every waiting buffer. */
  clear(): void {
    this.free.clear();
    this.held = 0;
  }
}

export const hostPool = new HostPool(getenv("TSGRAD_HOST_POOL_MB", 2048) * 2 ** 20);

export const hostMemory: Pick<Allocator, "allocate" | "free" | "copyout" | "copyin" | "transfer"> = {
  allocate: (bytes) => hostPool.allocate(bytes),
  free: (raw) => hostPool.release(view(raw)),
  copyout: (raw, bytes) => view(raw).subarray(0, bytes),
  copyin: (raw, data) => view(raw).set(data),
  // one memcpy between two host buffers (virtual devices share the machine's memory)
  transfer: (dst, src, bytes) => view(dst).set(view(src).subarray(0, bytes)),
};
