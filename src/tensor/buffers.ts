// The device memory behind a realized tensor: what code that moves bytes itself (collectives between
// processes, the JIT's buffer swaps) works on, one buffer per device the tensor lives on.
import type { Buffer } from "../device.ts";
import { storedBuffer } from "../engine/schedule.ts";
import { MultiLazy } from "./multi.ts";
import type { Tensor } from "./tensor.ts";

/** The buffers holding `t` (one per device), or undefined while it is lazy or a view of other memory. */
export function buffersOf(t: Tensor): Buffer[] | undefined {
  const shards = t.node instanceof MultiLazy ? t.node.shards : [t.node];
  const buffers = shards.map((u) => storedBuffer(u));
  return buffers.every((b) => b !== undefined) ? (buffers as Buffer[]) : undefined;
}

/**
 * The buffers holding `t`, one per device, each exactly its elements in row-major order: a lazy tensor or a
 * view is first stored in buffers of its own (so writing them changes `t` and nothing else).
 */
export function realizedBuffers(t: Tensor): Buffer[] {
  let buffers = buffersOf(t);
  if (!buffers) {
    t.node = t.contiguous().node;
    t.realize();
    buffers = buffersOf(t)!;
  }
  return buffers;
}
