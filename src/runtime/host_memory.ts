// Memory of the host backends (JS, CPU): ArrayBuffers the kernels work on directly.
import type { Backend } from "../device.ts";

export const hostMemory: Pick<Backend, "allocate" | "copyout" | "copyin" | "transfer"> = {
  allocate: (bytes) => new ArrayBuffer(bytes),
  copyout: (raw, bytes) => new Uint8Array(raw as ArrayBuffer, 0, bytes),
  copyin: (raw, data) => new Uint8Array(raw as ArrayBuffer).set(data),
  // one memcpy between two host buffers (virtual devices share the machine's memory)
  transfer: (dst, src, bytes) => new Uint8Array(dst as ArrayBuffer).set(new Uint8Array(src as ArrayBuffer, 0, bytes)),
};
