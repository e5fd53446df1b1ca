// Devices by name ("JS", "JS:1", "CPU:0", ...), their buffers, and the memory interface a device provides.
// What a device does with kernels is the engine's (engine/backend.ts): the core knows memory and names only.
import { type DType, type TypedArray, typedArrayFor } from "./dtype.ts";
import { GlobalCounters, TsgradError, debugLevel } from "./helpers.ts";

/** A device's memory: raw allocations and the copies in and out of them. */
export interface Allocator {
  allocate(bytes: number): unknown;
  free?(raw: unknown): void;
  /** Host view of the buffer's bytes: the storage itself on host devices, a copy elsewhere. */
  copyout(raw: unknown, bytes: number): Uint8Array;
  copyin(raw: unknown, data: Uint8Array): void;
  /** Copies `bytes` from another device of the same kind straight into `dst` (peer to peer), when the device can. */
  transfer?(dst: unknown, src: unknown, bytes: number, srcDevice: string): void;
  /** For libraries that work on the device's memory themselves (NCCL), where the device has them. */
  native?: NativeDevice;
}

/** A GPU as a library such as NCCL sees it: memory addresses, the stream work is queued on, its context. */
export interface NativeDevice {
  /** The device address of memory this allocator handed out. */
  pointer(raw: unknown): bigint;
  /** The stream the device's kernels and copies run on, in the library's handle form. */
  readonly stream: unknown;
  /** Makes the device current on this thread (what such libraries bind to). */
  activate(): void;
}

let nextBufferId = 0;

/**
 * The buffers made while each memory scope is open (`tidy()`), innermost last: every new buffer is listed in
 * the innermost, which frees at its end the ones nothing outside it keeps.
 */
export const memoryScopes: Buffer[][] = [];

/**
 * The slots of a kernel's buffers whose memory another slot holds too (an in-place assign's output and input),
 * as "0,1"; "" if none. Renderers promise every other slot unaliased (C `restrict`, CUDA `__restrict__`).
 */
export function aliasedSlots(buffers: readonly Buffer[]): string {
  // every kernel run asks: the common answer without building the list. A buffer's memory is its own (two
  // objects never share it), so the objects say it without allocating or touching a disposed input
  if (new Set(buffers).size === buffers.length) return "";
  const count = new Map<Buffer, number>();
  for (const b of buffers) count.set(b, (count.get(b) ?? 0) + 1);
  return buffers.flatMap((b, slot) => (count.get(b)! > 1 ? [slot] : [])).join(",");
}

/** Device memory holding `size` elements of `dtype`. Allocated on first use. */
export class Buffer {
  readonly id = nextBufferId++;
  /** Bumped by every assign into this buffer: a BUFFER node names a (buffer, version) pair. */
  version = 0;
  /** How many tensors were pointed at this buffer by realize(): above 1, an assign copies first. */
  realizedBy = 0;
  /** Held by something other than tensors (a JIT capture replays into it): dispose() and tidy() leave it be. */
  pinned = false;
  /** Given back by dispose(): any later use is an error, never a silent read of memory someone else now holds. */
  disposed = false;
  private raw: unknown = undefined;
  constructor(
    readonly device: string,
    readonly size: number,
    readonly dtype: DType,
  ) {
    memoryScopes.at(-1)?.push(this);
  }

  get nbytes(): number {
    return this.size * this.dtype.itemsize;
  }

  get isAllocated(): boolean {
    return this.raw !== undefined;
  }

  /** The device's handle for this memory, allocating it the first time. */
  get handle(): unknown {
    if (this.raw === undefined) {
      if (this.disposed) throw new TsgradError(`${this.describe()} was used after it was disposed: ${DISPOSED_HINT}`);
      this.raw = Device.allocator(this.device).allocate(this.nbytes);
      GlobalCounters.memUsed += this.nbytes;
      freed.register(this, { device: this.device, raw: this.raw, nbytes: this.nbytes }, this);
    }
    return this.raw;
  }

  /**
   * Gives the memory back now rather than when the garbage collector finds this buffer unreachable (it
   * knows nothing of device memory). The contents are lost; a later use allocates afresh.
   */
  release(): void {
    if (this.raw === undefined) return;
    freed.unregister(this);
    GlobalCounters.memUsed -= this.nbytes;
    Device.allocator(this.device).free?.(this.raw);
    this.raw = undefined;
  }

  /**
   * Gives the memory back now (to the device's pool, for the next buffer of its size) and marks this buffer
   * dead: reading or writing it later throws. What `Tensor.dispose()` and the end of `tidy()` call.
   */
  dispose(): void {
    this.release();
    this.disposed = true;
  }

  /** "a float32 buffer of 1024 elements on CPU", for errors. */
  describe(): string {
    return `a ${this.dtype.name} buffer of ${this.size} elements on ${this.device}`;
  }

  copyin(data: TypedArray): this {
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    if (bytes.byteLength !== this.nbytes)
      throw new TsgradError(
        `copyin: ${bytes.byteLength} bytes into a ${this.nbytes}-byte ${this.dtype.name} buffer on ${this.device}`,
      );
    Device.allocator(this.device).copyin(this.handle, bytes);
    this.version++; // new contents: nodes that stood for the old ones no longer do
    return this;
  }

  /** The contents as a fresh typed array of the buffer's dtype (16-bit floats as their bits). */
  toTypedArray(): TypedArray {
    const bytes = Device.allocator(this.device).copyout(this.handle, this.nbytes);
    const copy = new Uint8Array(bytes.byteLength);
    copy.set(bytes);
    return typedArrayFor(this.dtype, copy.buffer, 0, this.size);
  }
}

/** How to keep what an error says was disposed. */
export const DISPOSED_HINT =
  "Tensor.dispose() or the end of the tidy() scope that made it gave its memory back; return a tensor from tidy(), or keep() it, to use it after";

const freed = new FinalizationRegistry<{ device: string; raw: unknown; nbytes: number }>(({ device, raw, nbytes }) => {
  GlobalCounters.memUsed -= nbytes;
  Device.allocator(device).free?.(raw);
});

type AllocatorFactory = (index: number) => Allocator;

/** The registry of device kinds, and the default device. */
// biome-ignore lint/complexity/noStaticOnlyClass: `Device.DEFAULT` and `Device.register` are the API users know from tinygrad
export class Device {
  private static factories = new Map<string, { factory: AllocatorFactory; available: () => boolean }>();
  private static instances = new Map<string, Allocator>();
  private static defaultName: string | undefined;
  /** Tried in order when nothing forces a device: the first available wins. */
  static preference: string[] = [];

  /** Adds a device kind; `factory` opens its device `index` (engine/backend.ts's registerBackend calls this). */
  static register(name: string, factory: AllocatorFactory, available: () => boolean = () => true): void {
    Device.factories.set(name, { factory, available });
    if (!Device.preference.includes(name)) Device.preference.push(name);
  }

  /** "js:1" -> "JS:1"; "JS" stays "JS" (index 0). */
  static canonicalize(name: string): string {
    const [kind, index] = name.split(":");
    const upper = kind!.toUpperCase();
    if (!Device.factories.has(upper))
      throw new TsgradError(
        `unknown device ${JSON.stringify(name)}; known: ${[...Device.factories.keys()].join(", ")}`,
      );
    if (index !== undefined && !/^\d+$/.test(index))
      throw new TsgradError(`bad device index in ${JSON.stringify(name)}`);
    return index === undefined || index === "0" ? upper : `${upper}:${index}`;
  }

  /** Whether a device kind ("JS", "CPU", ...) works on this machine. */
  static isAvailable(kind: string): boolean {
    const entry = Device.factories.get(kind.toUpperCase());
    return entry?.available() === true;
  }

  /** The memory of device `name`, opening the device the first time. */
  static allocator(name: string): Allocator {
    const canonical = Device.canonicalize(name);
    let allocator = Device.instances.get(canonical);
    if (!allocator) {
      const [kind, index] = canonical.split(":");
      allocator = Device.factories.get(kind!)!.factory(Number(index ?? 0));
      Device.instances.set(canonical, allocator);
    }
    return allocator;
  }

  /** The device new tensors go to: `DEVICE=JS`, or `CPU=1`-style flags, else the first available. */
  static get DEFAULT(): string {
    if (Device.defaultName) return Device.defaultName;
    const forced = process.env.DEVICE ?? [...Device.factories.keys()].find((k) => process.env[k] === "1");
    if (forced) {
      Device.defaultName = Device.canonicalize(forced);
    } else {
      const pick = Device.preference.find((k) => Device.factories.get(k)!.available());
      if (!pick) throw new TsgradError("no device is available");
      Device.defaultName = pick;
    }
    if (debugLevel() >= 1) console.error(`tsgrad: default device ${Device.defaultName}`);
    return Device.defaultName;
  }

  static set DEFAULT(name: string) {
    Device.defaultName = Device.canonicalize(name);
  }
}
