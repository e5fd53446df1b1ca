// The CUDA device: kernels rendered to CUDA C (renderer/cuda.ts), compiled by NVRTC or nvcc into cubins
// cached on disk, loaded and launched through the driver API (libcuda via koffi), on memory from a
// caching allocator.
//
// Devices are `CUDA`, `CUDA:1`, ... one per GPU, each on its primary context. Nothing is loaded until
// first used: `cudaAvailable()` is false (and cheap, and never throws) where libcuda is missing or no GPU
// answers, and then nothing else here runs.
//
// How kernels map to the GPU (renderer/cuda.ts, cuda_forms.ts, cuda_matmul.ts):
// - the output loops are flattened onto the grid, one thread per output iteration (CUDA_BLOCK threads a
//   block, default 256), with a bounds check; reduces are loops inside the thread;
// - a long reduce with few outputs, or whose rows no two outputs share (softmax, norms), runs in "group"
//   mode: one block per output, its threads split the reduce loop and combine with warp shuffles (4096 or
//   more such rows of up to 4096: one warp a row, 8 rows a block, shuffles alone);
// - reduces with many outputs get small register tiles (up to 4 x 4 upcast lanes), aligned neighbouring
//   loads become float4/ushort4 loads;
// - big elementwise kernels take 4 (or 2) neighbours a thread along the axis their store steps along:
//   aligned loads and the store become vectors (8 bytes for 16-bit floats, 16 for float32);
// - a float32 sum of products of two float16 (or bfloat16) factors, whatever follows it, becomes a
//   tensor-core kernel (mma.sync m16n8k16, 128 x 128 x 32 tiles, fragments by ldmatrix, split-K for few
//   tiles and a long k, with a device workspace). Factors that are plain loads travel by cp.async through
//   a pipeline of 2-4 stages in dynamic shared memory (as deep as two blocks a multiprocessor allow: 4 on
//   an H100/H200, 2 on a 4090; TC_STAGES sets it); a factor computed from loads (a bias added first) is
//   evaluated while staging, rounded to 16 bits, through two stages; TC=0 turns tensor cores off;
// - on an H100/H200 (sm_90) a tile may use wgmma instead (warpgroups multiplying straight from shared
//   memory); modules with such a kernel compile for sm_90a;
// - BEAM=n searches the loop options on the GPU (timed with events) as on the CPU, and times each
//   tensor-core kernel at every tile of cuda_matmul.ts's lists (block and warp shapes, pipeline depths,
//   wgmma on sm_90); TC_TILE (e.g. 128x256x32:2x4, 128x128x64:wgmma) sets the tile instead. Winners are
//   cached on disk (engine/search.ts).
//
// - kernels launch on a stream of the device's own; a jitted function's replays launch as one CUDA graph
//   (tensor/jit.ts; CUDA_GRAPH=0 launches kernel by kernel). A copy between GPUs is queued on the
//   receiving GPU's stream between event waits, so neither host nor the other GPUs stop for it.
//
// Environment: TSGRAD_LIBCUDA / TSGRAD_LIBNVRTC (library paths), CUDA_BLOCK, TC, TC_STAGES, TC_TILE, BEAM, CUDA_GRAPH, DEBUG (>= 2
// times each kernel with events, >= 3 reports compiles), TSGRAD_CACHE (where cubins are cached, under cuda/).
// Without a GPU, test/cuda/emu is a CPU emulator both library paths can point at (tests, gpu-check --emulate).
// On a GPU machine: bench/gpu-check.sh (op suite on CUDA, tensor-core checks, GEMMs and a BERT-large step
// beside PyTorch).
// Semantics match the JS reference as the C backend does, except that float32 exp2/log2/sin use CUDA's
// float functions (within 2 ulp) and reduces may add in another order (group mode, tensor cores).
import { type Backend, type Buffer, type Program, aliasedSlots } from "../device.ts";
import type { KernelIR } from "../codegen/ir.ts";
import { debugLevel, getenv } from "../helpers.ts";
import { beamSearch, searchChoice, searchLimits } from "../engine/search.ts";
import { CUDA_PRELUDE, type CudaKernelSource, type CudaLaunch } from "../renderer/cuda.ts";
import { type CudaForm, cudaForm, renderCudaForm } from "../codegen/cuda_forms.ts";
import { type MatmulPattern, type TensorCoreTile, WGMMA_ARCH, renderMatmulTC, tensorCoreTile, tileCandidates, tileName } from "../renderer/cuda_matmul.ts";
import { CachingAllocator } from "./cuda_allocator.ts";
import { compileCuda } from "./cuda_compile.ts";
import { ATTRIBUTE, type CudaDriver, CudaError, type Handle, cudaDriver, loadCudaDriver, out } from "./cuda_driver.ts";

/** Device memory as the CUDA backend hands it out. */
export interface CudaMemory {
  readonly pointer: number;
  readonly bytes: number;
}

/** Whether a GPU answers (loads libcuda once; false, never an exception, where there is none). */
export function cudaAvailable(): boolean {
  try {
    return loadCudaDriver() !== null;
  } catch {
    return false;
  }
}

/** How many GPUs the driver sees (0 without a driver). */
export function cudaDeviceCount(): number {
  const d = loadCudaDriver();
  return d ? out<number>(d, "cuDeviceGetCount") : 0;
}

let currentContext: Handle | undefined;

/** One GPU: its context, architecture and memory. */
export class CudaDevice {
  readonly driver: CudaDriver;
  readonly context: Handle;
  /** The compile target, e.g. "sm_90". */
  readonly arch: string;
  /** Shared memory a multiprocessor has, in bytes (what the tensor-core pipeline's depth is chosen by). */
  readonly sharedPerMultiprocessor: number;
  /** The tile tensor-core kernels take unless BEAM chose another: TC_TILE's or the default, at this GPU's depth. */
  readonly tcTile: TensorCoreTile;
  readonly allocator: CachingAllocator;
  private readonly peers = new Set<number>();
  /**
   * The stream kernels run on (created with the context; a blocking stream, so the synchronous copies on
   * the legacy stream still wait for its work and it for theirs). A stream of its own can be captured.
   */
  private launchStream: Handle | undefined;
  /** The event other streams wait on for this one's work (`waitFor`). */
  private marker: Handle | undefined;
  /** Scratch memory for kernels that ask for it (split-K); shared, since launches run in stream order. */
  private scratch: { pointer: number; bytes: number; zeroed: number } | undefined;

  constructor(readonly index: number) {
    this.driver = cudaDriver();
    const count = out<number>(this.driver, "cuDeviceGetCount");
    if (index >= count) throw new CudaError(`CUDA:${index} does not exist: the driver sees ${count} GPU(s)`);
    const device = out<number>(this.driver, "cuDeviceGet", index);
    this.context = out<Handle>(this.driver, "cuDevicePrimaryCtxRetain", device);
    const major = out<number>(this.driver, "cuDeviceGetAttribute", ATTRIBUTE.computeCapabilityMajor, device);
    const minor = out<number>(this.driver, "cuDeviceGetAttribute", ATTRIBUTE.computeCapabilityMinor, device);
    this.arch = `sm_${major}${minor}`;
    this.sharedPerMultiprocessor = out<number>(this.driver, "cuDeviceGetAttribute", ATTRIBUTE.maxSharedMemoryPerMultiprocessor, device);
    this.tcTile = tensorCoreTile(this.sharedPerMultiprocessor, undefined, this.arch);
    const d = this.driver;
    this.allocator = new CachingAllocator(
      (bytes) => (this.activate(), out<number>(d, "cuMemAlloc_v2", bytes)),
      (pointer) => (this.activate(), d.check("cuMemFree_v2", d.cuMemFree_v2(pointer))),
      (e) => e instanceof CudaError && e.message.includes("CUDA_ERROR_OUT_OF_MEMORY"),
    );
    if (debugLevel() >= 1) console.error(`tsgrad: CUDA:${index} ${this.arch}, tensor-core tile ${tileName(this.tcTile)}`);
  }

  /** Shared-memory stages of the default tensor-core pipeline on this GPU. */
  get tcStages(): number {
    return this.tcTile.stages;
  }

  /** Makes this device's context the thread's current one (the driver's calls act on it). */
  activate(): void {
    if (currentContext === this.context) return;
    this.driver.check("cuCtxSetCurrent", this.driver.cuCtxSetCurrent(this.context));
    currentContext = this.context;
  }

  get stream(): Handle {
    if (this.launchStream === undefined) {
      this.activate();
      this.launchStream = out<Handle>(this.driver, "cuStreamCreate", 0);
    }
    return this.launchStream;
  }

  /**
   * Records the launches `run` makes into a CUDA graph and returns its replay (one launch for all of them),
   * or undefined where capture is off (CUDA_GRAPH=0), unsupported by the driver or fails: then callers
   * launch one by one as before. `run` must only launch kernels (no copies, no allocations).
   */
  captureGraph(run: () => void): (() => void) | undefined {
    if (getenv("CUDA_GRAPH", 1) === 0) return undefined;
    const d = this.driver, stream = this.stream;
    this.activate();
    try {
      // relaxed: the capture does not forbid other driver calls in this thread (a lazy module load)
      d.check("cuStreamBeginCapture_v2", d.cuStreamBeginCapture_v2(stream, 2));
    } catch {
      return undefined;
    }
    let failed: unknown;
    try {
      run();
    } catch (e) {
      failed = e;
    }
    const graph: unknown[] = [null];
    const ended = d.cuStreamEndCapture(stream, graph);
    if (failed || ended !== 0) {
      if (debugLevel() >= 1) console.error(`tsgrad: CUDA graph capture failed (${failed instanceof Error ? failed.message : `cuStreamEndCapture ${ended}`}); launching one by one`);
      return undefined;
    }
    const exec: unknown[] = [null];
    if (d.cuGraphInstantiateWithFlags(exec, graph[0], 0) !== 0) return undefined;
    return () => {
      this.activate(); // a copy between GPUs may have left another device's context current
      d.check("cuGraphLaunch", d.cuGraphLaunch(exec[0], stream), `a captured CUDA graph on CUDA:${this.index}`);
    };
  }

  /**
   * A workspace of at least `bytes` whose first `zeroedBytes` are zero (kernels leave them so). Grows by
   * replacing the old one, which is kept, not freed: a recorded CUDA graph may still launch kernels on it.
   */
  workspace(bytes: number, zeroedBytes: number): number {
    const s = this.scratch;
    if (s && s.bytes >= bytes && s.zeroed >= zeroedBytes) return s.pointer;
    const size = Math.max(bytes, s?.bytes ?? 0), zeroed = Math.max(zeroedBytes, s?.zeroed ?? 0);
    const pointer = this.allocator.alloc(size);
    this.activate();
    this.driver.check("cuMemcpyHtoD_v2", this.driver.cuMemcpyHtoD_v2(pointer, new Uint8Array(zeroed), zeroed), "zeroing a kernel workspace");
    this.scratch = { pointer, bytes: size, zeroed };
    return pointer;
  }

  /** Makes this device's stream hold its later work until `other`'s stream has run what it has queued so far. */
  waitFor(other: CudaDevice): void {
    const d = this.driver;
    other.activate();
    other.marker ??= out<Handle>(d, "cuEventCreate", 2); // CU_EVENT_DISABLE_TIMING: cheaper
    d.check("cuEventRecord", d.cuEventRecord(other.marker, other.stream), `CUDA:${other.index}'s stream`);
    this.activate();
    // the wait is for the record as it is now: recording the event again later does not move it
    d.check("cuStreamWaitEvent", d.cuStreamWaitEvent(this.stream, other.marker, 0), `CUDA:${this.index} waiting for CUDA:${other.index}`);
  }

  /**
   * Queues a copy of `bytes` from `source`'s memory into this device's on this device's stream: after the
   * work both have queued so far (`src` written, `dst` no longer read), before `source`'s later work (which
   * may reuse `src`'s memory) and this device's. The host does not wait, and neither GPU stops the others
   * (cuMemcpyPeer would hold all work of both contexts, turning a ring all-reduce's copies into a queue).
   */
  copyFrom(source: CudaDevice, dst: number, src: number, bytes: number): void {
    this.enablePeer(source);
    this.waitFor(source);
    this.activate();
    const d = this.driver;
    d.check("cuMemcpyPeerAsync", d.cuMemcpyPeerAsync(dst, this.context, src, source.context, bytes, this.stream), `${bytes} bytes CUDA:${source.index} -> CUDA:${this.index}`);
    source.waitFor(this);
  }

  /** Lets this device read `peer`'s memory directly, when the hardware can (once per pair). */
  enablePeer(peer: CudaDevice): void {
    if (this.peers.has(peer.index) || peer === this) return;
    this.peers.add(peer.index);
    if (!out<number>(this.driver, "cuDeviceCanAccessPeer", this.index, peer.index)) return;
    this.activate();
    const result = this.driver.cuCtxEnablePeerAccess(peer.context, 0);
    // 704: CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
    if (result !== 704) this.driver.check("cuCtxEnablePeerAccess", result, `CUDA:${this.index} -> CUDA:${peer.index}`);
  }
}

/** A kernel ready to launch: its function in a loaded module and its launch dimensions. */
interface Loaded {
  readonly fn: Handle;
  readonly launch: CudaLaunch;
}

/** Programs created but not compiled yet: the first run compiles those of its device together, in one module. */
const pending = new Set<CudaProgram>();

/** A kernel compiled for one device, in each aliasing variant it runs with (compiled on first use of each). */
export class CudaProgram implements Program {
  readonly loaded = new Map<string, Loaded>();
  private readonly params: globalThis.Buffer[];
  private readonly bufferParams: globalThis.Buffer[];
  private events: [Handle, Handle] | undefined;
  private form: CudaForm | undefined;

  constructor(readonly device: CudaDevice, readonly kernel: KernelIR) {
    // the buffers, then a workspace pointer for kernels that take one
    this.params = [...kernel.buffers, null].map(() => globalThis.Buffer.alloc(8));
    this.bufferParams = this.params.slice(0, kernel.buffers.length);
    pending.add(this);
  }

  ranKernel(): KernelIR {
    return this.form?.kind === "loops" ? this.form.kernel : this.kernel;
  }

  /** The kernel's form on the GPU: searched (BEAM), tensor cores, or GPU-shaped loops. */
  chosenForm(): CudaForm {
    if (this.form) return this.form;
    const form = cudaForm(this.kernel);
    if (form.kind === "loops" && searchLimits().beam > 0) {
      return (this.form = { kind: "loops", kernel: beamSearch(this.kernel, "CUDA", (ks) => timeCandidates(this.device, ks)) });
    }
    if (form.kind === "tensorCores" && searchLimits().beam > 0 && !process.env.TC_TILE) {
      const tiles = tileCandidates(this.device.sharedPerMultiprocessor, form.pattern, this.device.arch);
      const byName = new Map(tiles.map((t) => [tileName(t), t]));
      const chosen = searchChoice(this.kernel, `CUDA ${this.device.arch}`, [...byName.keys()], (names) =>
        timeTiles(this.device, this.kernel, form.pattern, names.map((n) => byName.get(n)!)));
      return (this.form = { ...form, tile: chosen ? byName.get(chosen) : undefined });
    }
    return (this.form = form);
  }

  run(buffers: Buffer[], opts: { wait?: boolean } = {}): number | undefined {
    // one buffer in two slots (an in-place assign) must not be promised to the compiler as unaliased: those
    // slots lose __restrict__ in a variant of their own ("" is the plain kernel)
    const aliased = aliasedSlots(buffers);
    if (!this.loaded.has(aliased)) {
      const others = aliased === "" ? [...pending].filter((p) => p !== this && p.device === this.device) : [];
      compileTogether(this.device, [this, ...others], aliased);
    }
    const { fn, launch } = this.loaded.get(aliased)!;
    buffers.forEach((b, i) => this.params[i]!.writeBigUInt64LE(BigInt((b.handle as CudaMemory).pointer)));
    const params = launch.workspace ? this.params : this.bufferParams;
    if (launch.workspace) this.params[buffers.length]!.writeBigUInt64LE(BigInt(this.device.workspace(launch.workspace.bytes, launch.workspace.zeroedBytes)));
    return launchKernel(this.device, fn, launch, params, this.kernel.name, opts.wait ? this.timingEvents() : undefined);
  }

  private timingEvents(): [Handle, Handle] {
    this.events ??= [out<Handle>(this.device.driver, "cuEventCreate", 0), out<Handle>(this.device.driver, "cuEventCreate", 0)];
    return this.events;
  }
}

/**
 * Compiles several programs' kernels as one module (the compiler starts once; the cache keeps the whole
 * batch). Kernels whose code is the same (a model's layers) are compiled once and share a function.
 */
function compileTogether(device: CudaDevice, programs: readonly CudaProgram[], aliased: string): void {
  const restrict = aliased === "" || new Set(aliased.split(",").map(Number));
  const rendered = programs.map((p) => renderCudaForm(p.chosenForm(), "tg_kernel", restrict, device.tcTile));
  const firstOf = new Map<string, number>();
  rendered.forEach((r, i) => firstOf.has(r.code) || firstOf.set(r.code, i));
  const unique = [...firstOf.keys()];
  const names = [...firstOf.values()].map((i, u) => `${programs[i]!.kernel.name.replace(/\W/g, "_")}_${u}`);
  const source = `${CUDA_PRELUDE}\n${unique.map((code, u) => code.replace(/\btg_kernel\b/, names[u]!)).join("\n\n")}\n`;
  const what = programs.length === 1 ? programs[0]!.kernel.name : `${unique.length} kernels (${programs[0]!.kernel.name}, ...)`;
  const fns = loadFunctions(device, source, names, what);
  const fnOf = new Map(unique.map((code, u) => [code, fns[u]!]));
  rendered.forEach((r, i) => allowSharedMemory(device, fnOf.get(r.code)!, r.launch, programs[i]!.kernel.name));
  programs.forEach((p, i) => {
    p.loaded.set(aliased, { fn: fnOf.get(rendered[i]!.code)!, launch: rendered[i]!.launch });
    if (aliased === "") pending.delete(p);
  });
}

/** Compiles (or finds in the cache) and loads a module; the handles of its functions `names`. */
function loadFunctions(device: CudaDevice, source: string, names: readonly string[], what: string): Handle[] {
  const cubin = compileCuda(source, compileArch(device.arch, source), what);
  device.activate();
  const module = out<Handle>(device.driver, "cuModuleLoadData", cubin);
  return names.map((name) => out<Handle>(device.driver, "cuModuleGetFunction", module, name));
}

/**
 * The architecture a module is compiled for: the GPU's, or its "a" variant (sm_90a: code for that GPU
 * alone) where a kernel of the module (past the prelude, which defines the helpers) uses wgmma.
 */
export function compileArch(arch: string, source: string): string {
  const kernels = source.startsWith(CUDA_PRELUDE) ? source.slice(CUDA_PRELUDE.length) : source;
  return arch === WGMMA_ARCH && /\btg_wgmma_/.test(kernels) ? `${arch}a` : arch;
}

/** The shared memory a block may take without asking (more needs the function's attribute raised). */
const STATIC_SHARED_LIMIT = 48 << 10;
/** CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
const MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

/** Lets `fn` launch with more than 48 KB of dynamic shared memory, where its launch asks for that. */
function allowSharedMemory(device: CudaDevice, fn: Handle, launch: CudaLaunch, name: string): void {
  if (launch.sharedBytes <= STATIC_SHARED_LIMIT) return;
  const d = device.driver;
  d.check("cuFuncSetAttribute", d.cuFuncSetAttribute(fn, MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.sharedBytes), `${name}: ${launch.sharedBytes} bytes of shared memory`);
}

/** Launches on the device's stream; with `events`, waits and returns the kernel's seconds. */
function launchKernel(device: CudaDevice, fn: Handle, launch: CudaLaunch, params: globalThis.Buffer[], name: string, events?: [Handle, Handle]): number | undefined {
  const d = device.driver;
  device.activate();
  const stream = device.stream;
  if (events) d.check("cuEventRecord", d.cuEventRecord(events[0], stream), name);
  const [gx, gy, gz] = launch.grid, [bx, by, bz] = launch.block;
  d.check("cuLaunchKernel", d.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, launch.sharedBytes, stream, params, null), `${name} grid ${launch.grid} block ${launch.block}`);
  if (!events) return undefined;
  d.check("cuEventRecord", d.cuEventRecord(events[1], stream), name);
  d.check("cuEventSynchronize", d.cuEventSynchronize(events[1]), name);
  return out<number>(d, "cuEventElapsedTime", events[0], events[1]) / 1000;
}

/** Times BEAM's candidates on scratch buffers of the kernel's sizes (Infinity for those that fail to compile or launch). */
function timeCandidates(device: CudaDevice, kernels: readonly KernelIR[]): number[] {
  if (kernels.length === 0) return [];
  return timeSources(device, kernels[0]!, kernels.map((kernel) => () => renderCudaForm({ kind: "loops", kernel }, "candidate", true)));
}

/**
 * Times a tensor-core kernel at each tile (seconds; Infinity where one fails to compile or launch), on
 * scratch buffers, or on `on` (the kernel's own buffers: the output then holds the last tile's result).
 */
export function timeTiles(device: CudaDevice, kernel: KernelIR, pattern: MatmulPattern, tiles: readonly TensorCoreTile[], on?: readonly Buffer[]): number[] {
  return timeSources(device, kernel, tiles.map((tile) => () => renderMatmulTC(pattern, "candidate", true, tile)), on);
}

/**
 * The fastest of three launches of each rendering of `kernel`, on scratch buffers of its sizes (or on `on`);
 * Infinity for one that fails to render, compile or launch. Renderings with the same code are timed once.
 */
function timeSources(device: CudaDevice, kernel: KernelIR, renders: readonly (() => CudaKernelSource)[], on?: readonly Buffer[]): number[] {
  const sizes = kernel.buffers.map((b) => b.size * b.dtype.itemsize);
  const scratch = on ? [] : sizes.map((bytes) => device.allocator.alloc(bytes));
  const buffers = on ? on.map((b) => (b.handle as CudaMemory).pointer) : scratch;
  const params = [...buffers, 0].map((pointer) => {
    const p = globalThis.Buffer.alloc(8);
    p.writeBigUInt64LE(BigInt(pointer));
    return p;
  });
  const events: [Handle, Handle] = [out<Handle>(device.driver, "cuEventCreate", 0), out<Handle>(device.driver, "cuEventCreate", 0)];
  const byCode = new Map<string, number>();
  try {
    return renders.map((render) => {
      try {
        const rendered = render();
        const known = byCode.get(rendered.code);
        if (known !== undefined) return known;
        const [fn] = loadFunctions(device, `${CUDA_PRELUDE}\n${rendered.code}\n`, ["candidate"], `BEAM candidate of ${kernel.name}`);
        allowSharedMemory(device, fn!, rendered.launch, kernel.name);
        const { workspace } = rendered.launch;
        if (workspace) params[buffers.length]!.writeBigUInt64LE(BigInt(device.workspace(workspace.bytes, workspace.zeroedBytes)));
        const launchParams = workspace ? params : params.slice(0, buffers.length);
        let fastest = Infinity;
        for (let run = 0; run < 3; run++) fastest = Math.min(fastest, launchKernel(device, fn!, rendered.launch, launchParams, kernel.name, events)!);
        byCode.set(rendered.code, fastest);
        return fastest;
      } catch {
        return Infinity;
      }
    });
  } finally {
    scratch.forEach((pointer, i) => device.allocator.free(pointer, sizes[i]!));
    for (const event of events) device.driver.check("cuEventDestroy_v2", device.driver.cuEventDestroy_v2(event), `timing ${kernel.name}`);
  }
}

const devices = new Map<number, CudaDevice>();

/** The device `CUDA:index` (its context made on first use). */
export function cudaDevice(index: number): CudaDevice {
  let device = devices.get(index);
  if (!device) {
    device = new CudaDevice(index);
    devices.set(index, device);
  }
  return device;
}

/** The backend of `CUDA:index`. Its `transfer` queues a copy device to device (peer to peer where the GPUs allow). */
export function cudaBackend(index: number): Backend {
  const device = cudaDevice(index);
  const d = device.driver;
  return {
    name: index === 0 ? "CUDA" : `CUDA:${index}`,
    allocate: (bytes): CudaMemory => ({ pointer: device.allocator.alloc(bytes), bytes }),
    free: (raw) => device.allocator.free((raw as CudaMemory).pointer, (raw as CudaMemory).bytes),
    copyout: (raw, bytes) => {
      const host = new Uint8Array(bytes);
      device.activate();
      d.check("cuMemcpyDtoH_v2", d.cuMemcpyDtoH_v2(host, (raw as CudaMemory).pointer, bytes), `${bytes} bytes from CUDA:${index}`);
      return host;
    },
    copyin: (raw, data) => {
      device.activate();
      d.check("cuMemcpyHtoD_v2", d.cuMemcpyHtoD_v2((raw as CudaMemory).pointer, data, data.byteLength), `${data.byteLength} bytes to CUDA:${index}`);
    },
    compile: (kernel) => new CudaProgram(device, kernel),
    // one stream's capture: kernels of this device only
    captureGraph: (run, span) => (span.devices.length === 1 && !span.copies ? device.captureGraph(run) : undefined),
    transfer: (dstRaw, srcRaw, bytes, srcDevice) => {
      const [dst, src] = [dstRaw as CudaMemory, srcRaw as CudaMemory];
      const srcIndex = Number(srcDevice.split(":")[1] ?? 0);
      if (srcIndex !== index) return device.copyFrom(cudaDevice(srcIndex), dst.pointer, src.pointer, bytes);
      device.activate();
      d.check("cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync_v2(dst.pointer, src.pointer, bytes, device.stream), `${bytes} bytes on CUDA:${index}`);
    },
  };
}
