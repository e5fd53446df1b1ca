// Memory of the host backends (JS, CPU): a buffer is a Uint8Array over an ArrayBuffer, started at a 64-byte
// boundary. Node's ArrayBuffers start 16 bytes past one (malloc's header), so every 64-byte vector load or
// store of a kernel would straddle two cache lines, which slows a packing copy and a whole train step alike
// (bench/host-alignment.ts).
import koffi from "koffi";
import type { Allocator } from "../device.ts";
import { getenv } from "../helpers.ts";

/** Bytes a host buffer's start is aligned to: a cache line, and an AVX-512 vector. */
export const HOST_ALIGNMENT = 64;

/** Bytes of a transparent huge page on x86-64 (and arm64 with 4 KiB pages). */
export const HUGE_PAGE = 2 ** 21;

/**
 * `bytes` of memory starting at a multiple of HOST_ALIGNMENT, zeroed unless `zeroed` is false. From half a huge
 * page up it starts on a huge page, and Linux is asked to back the huge pages it spans with huge pages
 * (TSGRAD_HUGE_PAGES=0: never): fresh memory faults in on first touch, inside the kernel that writes it, and one
 * 2 MiB fault costs about what one 4 KiB fault does (docs/performance.md). So a buffer holds at most one huge page
 * more than it needs, as PyTorch's CUDA allocator rounds to 2 MiB; the rest of the ArrayBuffer is address space
 * no kernel touches.
 */
export function alignedBytes(bytes: number, { zeroed = true } = {}): Uint8Array {
  const huge = bytes >= HUGE_PAGE / 2 && hugePageAdvice() !== null;
  const [alignment, span] = huge ? [HUGE_PAGE, Math.ceil(bytes / HUGE_PAGE) * HUGE_PAGE] : [HOST_ALIGNMENT, bytes];
  const raw = zeroed ? new ArrayBuffer(span + alignment) : unzeroedBytes(span + alignment);
  const address = addressOf(raw);
  if (address === undefined) return new Uint8Array(raw, 0, bytes);
  const misalignment = Number(address % BigInt(alignment));
  const offset = misalignment === 0 ? 0 : alignment - misalignment;
  // (V8 never moves an ArrayBuffer's memory: the offset and the advice hold for the buffer's life)
  if (huge) hugePageAdvice()!(address + BigInt(offset), span, MADV_HUGEPAGE);
  return new Uint8Array(raw, offset, bytes);
}

const nodeBuffer = (globalThis as { Buffer?: { allocUnsafeSlow(bytes: number): Uint8Array } }).Buffer;

/**
 * Memory nobody clears (Node's Buffer.allocUnsafeSlow: malloc, not calloc), where there is such a thing: malloc
 * hands back memory the process freed before, which calloc would write zeros over, slack included.
 */
function unzeroedBytes(bytes: number): ArrayBuffer {
  return nodeBuffer ? (nodeBuffer.allocUnsafeSlow(bytes).buffer as ArrayBuffer) : new ArrayBuffer(bytes);
}

/** Whether memory addresses can be read (koffi loads): not in a browser, where no native code reads them either. */
let addressable: boolean | undefined;

/** Where `raw`'s memory starts, or undefined where addresses cannot be read. */
function addressOf(raw: ArrayBuffer): bigint | undefined {
  if (addressable === false) return undefined;
  try {
    const address = koffi.address(raw);
    addressable = true;
    return address;
  } catch (error) {
    if (addressable) throw error;
    addressable = false;
    return undefined;
  }
}

const MADV_HUGEPAGE = 14;
type Madvise = (address: bigint, bytes: number, advice: number) => number;
let madvise: Madvise | null | undefined;

/** libc's madvise on Linux with addressable memory, else null (other systems, browsers, TSGRAD_HUGE_PAGES=0). */
function hugePageAdvice(): Madvise | null {
  if (madvise !== undefined) return madvise;
  madvise = null;
  if (addressOf(new ArrayBuffer(HOST_ALIGNMENT)) === undefined) return madvise;
  if (process.platform !== "linux" || getenv("TSGRAD_HUGE_PAGES", 1) === 0) return madvise;
  try {
    madvise = koffi.load("libc.so.6").func("int madvise(uintptr_t addr, size_t length, int advice)") as Madvise;
  } catch {
    // not glibc: 4 KiB pages
  }
  return madvise;
}

const view = (raw: unknown): Uint8Array => raw as Uint8Array;

/**
 * Freed host buffers by byte size, handed to the next allocation of that size: fresh memory costs a page fault
 * per page on its first touch, inside the kernel that writes it (an eager matmul's packed operands were mostly
 * faults). Kernels write every element they store, so neither reused nor fresh memory is zeroed. At most `limit`
 * bytes wait here (TSGRAD_HOST_POOL_MB, default 2048; 0 turns the pool off); beyond that a freed buffer goes to
 * the garbage collector.
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
      return alignedBytes(bytes, { zeroed: false });
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
