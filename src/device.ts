// Devices by name ("JS", "JS:1", "CPU:0", ...), their buffers, and the interfaces a backend implements.
import { type DType, type TypedArray, typedArrayFor } from "./dtype.ts";
import { GlobalCounters, TsgradError, debugLevel } from "./helpers.ts";
import type { KernelIR } from "./codegen/ir.ts";

/** A compiled kernel: call it with buffers (outputs first, as the kernel's signature says). */
export interface Program {
  run(buffers: Buffer[], opts?: { wait?: boolean }): number | undefined;
  /** The kernel it runs, where that is not the one it was made for: BEAM's choice, once searched (DEBUG prints its options). */
  ranKernel?(): KernelIR;
  /** Told before a schedule runs it on `buffers`: a backend that compiles lazily builds what those runs need together. */
  expect?(buffers: Buffer[]): void;
}

/** What a backend provides: memory, and turning kernels into runnable programs. */
export interface Backend {
  readonly name: string;
  allocate(bytes: number): unknown;
  free?(raw: unknown): void;
  /** Host view of the buffer's bytes: the storage itself on host backends, a copy elsewhere. */
  copyout(raw: unknown, bytes: number): Uint8Array;
  copyin(raw: unknown, data: Uint8Array): void;
  /** Copies `bytes` from another device of the same kind straight into `dst` (peer to peer), when the backend can. */
  transfer?(dst: unknown, src: unknown, bytes: number, srcDevice: string): void;
  compile(kernel: KernelIR): Program;
  /**
   * Whether kernels are lowered in the forms that suit a host CPU (codegen/lower.ts, heuristics.ts): one-hot
   * sums along an output axis (an embedding's or a gather's gradient) as scatters, the output zeroed then each
   * summed row added where its index points (a vocabulary's worth less work); long sums to few outputs in
   * cached blocks; ragged 16-lane tiles; neighbouring output axes merged. GPUs keep their own forms (the
   * dense one-hot product runs every output in parallel on tensor cores).
   */
  readonly hostForms?: boolean;
  /**
   * Records the kernel launches (and copies) `run` makes, without running them, and returns a function that
   * replays them all at once (a CUDA graph, a CPU call table); undefined where the backend cannot, e.g. for
   * launches on several `devices` or with copies among them (then the JIT launches item by item). A replay
   * that waits for its kernels (host devices) returns the seconds they took.
   */
  captureGraph?(run: () => void, span: { readonly devices: readonly string[]; readonly copies: boolean }): ((swap?: ReadonlyMap<Buffer, Buffer>) => number | void) | undefined;
  /**
   * Whether this backend's graph replays take `swap` (recorded buffer -> buffer to use this time) and read the
   * swapped buffers directly (CPU tables: addresses patched); otherwise the JIT copies a call's inputs into
   * buffers the graph owns (CUDA graphs hold fixed pointers).
   */
  readonly graphsSwapBuffers?: boolean;
  /** While `captureGraph` records: takes a copy between two devices of this kind into the graph (true), or not (false). */
  recordCopy?(dst: Buffer, src: Buffer): boolean;
}

let nextBufferId = 0;

/** Device memory holding `size` elements of `dtype`. Allocated on first use. */
/**
 * The slots of a kernel's buffers whose memory another slot holds too (an in-place assign's output and input),
 * as "0,1"; "" if none. Renderers promise every other slot unaliased (C `restrict`, CUDA `__restrict__`).
 */
export function aliasedSlots(buffers: readonly Buffer[]): string {
  // every kernel run asks: the common answer without building the list
  if (new Set(buffers.map((b) => b.handle)).size === buffers.length) return "";
  const count = new Map<unknown, number>();
  for (const b of buffers) count.set(b.handle, (count.get(b.handle) ?? 0) + 1);
  return buffers.flatMap((b, slot) => (count.get(b.handle)! > 1 ? [slot] : [])).join(",");
}

export class Buffer {
  readonly id = nextBufferId++;
  /** Bumped by every assign into this buffer: a BUFFER node names a (buffer, version) pair. */
  version = 0;
  /** How many tensors were pointed at this buffer by realize(): above 1, an assign copies first. */
  realizedBy = 0;
  private raw: unknown = undefined;
  constructor(readonly device: string, readonly size: number, readonly dtype: DType) {}

  get nbytes(): number {
    return this.size * this.dtype.itemsize;
  }

  get isAllocated(): boolean {
    return this.raw !== undefined;
  }

  /** The backend's handle for this memory, allocating it the first time. */
  get handle(): unknown {
    if (this.raw === undefined) {
      this.raw = Device.backend(this.device).allocate(this.nbytes);
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
    Device.backend(this.device).free?.(this.raw);
    this.raw = undefined;
  }

  copyin(data: TypedArray): this {
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    if (bytes.byteLength !== this.nbytes) throw new TsgradError(`copyin: ${bytes.byteLength} bytes into a ${this.nbytes}-byte ${this.dtype.name} buffer on ${this.device}`);
    Device.backend(this.device).copyin(this.handle, bytes);
    this.version++; // new contents: nodes that stood for the old ones no longer do
    return this;
  }

  /** The contents as a fresh typed array of the buffer's dtype (16-bit floats as their bits). */
  toTypedArray(): TypedArray {
    const bytes = Device.backend(this.device).copyout(this.handle, this.nbytes);
    const copy = new Uint8Array(bytes.byteLength);
    copy.set(bytes);
    return typedArrayFor(this.dtype, copy.buffer, 0, this.size);
  }
}

const freed = new FinalizationRegistry<{ device: string; raw: unknown; nbytes: number }>(({ device, raw, nbytes }) => {
  GlobalCounters.memUsed -= nbytes;
  Device.backend(device).free?.(raw);
});

type BackendFactory = (index: number) => Backend;

/** The registry of backends, and the default device. */
export class Device {
  private static factories = new Map<string, { factory: BackendFactory; available: () => boolean }>();
  private static instances = new Map<string, Backend>();
  private static defaultName: string | undefined;
  /** Tried in order when nothing forces a device: the first available wins. */
  static preference: string[] = [];

  static register(name: string, factory: BackendFactory, available: () => boolean = () => true): void {
    Device.factories.set(name, { factory, available });
    if (!Device.preference.includes(name)) Device.preference.push(name);
  }

  /** "js:1" -> "JS:1"; "JS" stays "JS" (index 0). */
  static canonicalize(name: string): string {
    const [kind, index] = name.split(":");
    const upper = kind!.toUpperCase();
    if (!Device.factories.has(upper)) throw new TsgradError(`unknown device ${JSON.stringify(name)}; known: ${[...Device.factories.keys()].join(", ")}`);
    if (index !== undefined && !/^\d+$/.test(index)) throw new TsgradError(`bad device index in ${JSON.stringify(name)}`);
    return index === undefined || index === "0" ? upper : `${upper}:${index}`;
  }

  /** Whether a backend kind ("JS", "CPU", ...) works on this machine. */
  static isAvailable(kind: string): boolean {
    const entry = Device.factories.get(kind.toUpperCase());
    return entry !== undefined && entry.available();
  }

  static backend(name: string): Backend {
    const canonical = Device.canonicalize(name);
    let backend = Device.instances.get(canonical);
    if (!backend) {
      const [kind, index] = canonical.split(":");
      backend = Device.factories.get(kind!)!.factory(Number(index ?? 0));
      Device.instances.set(canonical, backend);
    }
    return backend;
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
