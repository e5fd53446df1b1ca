// Memory of the host backends (JS, CPU): a buffer is a Uint8Array over an ArrayBuffer, started at a 64-byte
// boundary. Node's ArrayBuffers start 16 bytes past one (malloc's header), so every 64-byte vector load or
// store of a kernel would straddle two cache lines, which slows a packing copy and a whole train step alike
// (bench/host-alignment.ts).
import koffi from "koffi";
import type { Allocator } from "../device.ts";

/** Bytes a host buffer's start is aligned to: a cache line, and an AVX-512 vector. */
export const HOST_ALIGNMENT = 64;

/** `bytes` of zeroed memory starting at a multiple of HOST_ALIGNMENT. */
export function alignedBytes(bytes: number): Uint8Array {
  const raw = new ArrayBuffer(bytes + HOST_ALIGNMENT);
  // (V8 never moves an ArrayBuffer's memory: the offset holds for the buffer's life)
  return new Uint8Array(raw, alignmentOffset(raw), bytes);
}

/** Bytes from the start of `raw` to its first aligned address. */
function alignmentOffset(raw: ArrayBuffer): number {
  const misalignment = Number(koffi.address(raw) % BigInt(HOST_ALIGNMENT));
  return misalignment === 0 ? 0 : HOST_ALIGNMENT - misalignment;
}

const view = (raw: unknown): Uint8Array => raw as Uint8Array;

export const hostMemory: Pick<Allocator, "allocate" | "copyout" | "copyin" | "transfer"> = {
  allocate: (bytes) => alignedBytes(bytes),
  copyout: (raw, bytes) => view(raw).subarray(0, bytes),
  copyin: (raw, data) => view(raw).set(data),
  // one memcpy between two host buffers (virtual devices share the machine's memory)
  transfer: (dst, src, bytes) => view(dst).set(view(src).subarray(0, bytes)),
};
