// The WEBGPU device in Node: Dawn (npm's optional `webgpu` package) driven from a worker thread, so that the
// engine's synchronous calls work on an API whose readback is asynchronous only. The engine's thread posts
// allocations, copies in and kernel launches to the worker without waiting (they queue in order); a copy out,
// a compile and a wait post their request and block on a SharedArrayBuffer (Atomics.wait) until the worker
// has the answer. Errors of queued work (a validation error, a lost device) are kept by the worker and thrown
// at the next blocking call.
//
// No GPU: Dawn needs a Vulkan driver. Where none is configured and Debian's Chromium is installed, its
// SwiftShader (a Vulkan on the CPU) is used (VK_ICD_FILENAMES); `libvulkan1` must be installed either way.
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";
import { TsgradError, debugLevel, hasFileSystem } from "../helpers.ts";

export class WebGpuError extends TsgradError {
  override name = "WebGpuError";
}

/** Where Debian's (and Ubuntu's) Chromium keeps its SwiftShader Vulkan driver. */
const SWIFTSHADER_ICDS = [
  "/usr/lib/chromium/vk_swiftshader_icd.json",
  "/usr/lib/chromium-browser/vk_swiftshader_icd.json",
];

/** How long a blocking call waits for the worker before it calls the device dead. */
const ANSWER_TIMEOUT_MS = 120_000;

/** A buffer on the device: an id the worker knows it by, and its size in bytes. */
export interface WebGpuBuffer {
  readonly id: number;
  readonly bytes: number;
}

/** What the adapter is and allows, as the worker found it. */
export interface WebGpuInfo {
  readonly adapter: string;
  readonly maxStorageBuffersPerShaderStage: number;
  readonly maxStorageBufferBindingSize: number;
  readonly maxBufferSize: number;
}

// The worker: plain JavaScript (it runs the same under tsx and from dist/), the GPU's only user. Replies go
// into the request's SharedArrayBuffer from byte 8: int32 [0] is set to 1 when done, [1] says what came: a read's
// bytes as their length, a JSON answer (an error included) as -1 - its length, so that no read is taken for an
// error however many bytes it has.
const WORKER_SOURCE = `
let gpu, device, firstError = null;
const buffers = new Map(), pipelines = new Map(), layouts = new Map();
const answer = (reply, value, bytes) => {
  const flag = new Int32Array(reply, 0, 2);
  const data = new Uint8Array(reply, 8);
  if (bytes) { data.set(bytes.subarray(0, Math.min(bytes.length, data.length))); flag[1] = bytes.length; }
  else {
    const text = new TextEncoder().encode(JSON.stringify(value ?? null));
    data.set(text.subarray(0, data.length)); flag[1] = -1 - Math.min(text.length, data.length);
  }
  Atomics.store(flag, 0, 1); Atomics.notify(flag, 0);
};
const takeError = () => { const e = firstError; firstError = null; return e; };
const round4 = (n) => Math.max(4, Math.ceil(n / 4) * 4);
async function init(reply) {
  try {
    gpu = await openGpu();
    if (!gpu) return answer(reply, { error: "this browser has no WebGPU (navigator.gpu)" });
    const adapter = await gpu.requestAdapter();
    if (!adapter) return answer(reply, { error: "no WebGPU adapter (no Vulkan driver found: install libvulkan1 and a GPU driver, or Chromium for SwiftShader)" });
    const limits = {};
    for (const name of ["maxStorageBuffersPerShaderStage", "maxStorageBufferBindingSize", "maxBufferSize", "maxComputeWorkgroupsPerDimension"])
      limits[name] = adapter.limits[name];
    device = await adapter.requestDevice({ requiredLimits: limits });
    device.addEventListener("uncapturederror", (event) => { firstError ??= String(event.error?.message ?? event.error); });
    device.lost.then((info) => { firstError ??= "the device was lost: " + info.message; });
    const info = adapter.info ?? {};
    answer(reply, { info: {
      adapter: [info.vendor, info.architecture, info.description].filter(Boolean).join(" ") || "unknown",
      maxStorageBuffersPerShaderStage: device.limits.maxStorageBuffersPerShaderStage,
      maxStorageBufferBindingSize: device.limits.maxStorageBufferBindingSize,
      maxBufferSize: device.limits.maxBufferSize,
    } });
  } catch (error) { answer(reply, { error: String(error?.message ?? error) }); }
}
function layoutFor(count) {
  let layout = layouts.get(count);
  if (!layout) {
    const entries = Array.from({ length: count }, (_, binding) => ({
      binding, visibility: GPUShaderStage.COMPUTE,
      buffer: { type: binding === 0 ? "storage" : "read-only-storage" },
    }));
    layout = device.createPipelineLayout({ bindGroupLayouts: [device.createBindGroupLayout({ entries })] });
    layouts.set(count, layout);
  }
  return layout;
}
async function compile({ id, code, bindingCount, reply }) {
  device.pushErrorScope("validation");
  const module = device.createShaderModule({ code });
  const pipeline = device.createComputePipeline({ layout: layoutFor(bindingCount), compute: { module, entryPoint: "main" } });
  const error = await device.popErrorScope();
  if (error) {
    const messages = (await module.getCompilationInfo()).messages.map((m) => m.lineNum + ":" + m.linePos + " " + m.message);
    return answer(reply, { error: [error.message, ...messages].join("\\n") });
  }
  pipelines.set(id, pipeline);
  answer(reply, {});
}
function run({ pipeline, ids, groups }) {
  const p = pipelines.get(pipeline);
  const entries = ids.map((id, binding) => ({ binding, resource: { buffer: buffers.get(id) } }));
  const group = device.createBindGroup({ layout: p.getBindGroupLayout(0), entries });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(p); pass.setBindGroup(0, group); pass.dispatchWorkgroups(groups[0], groups[1]); pass.end();
  device.queue.submit([encoder.finish()]);
}
async function read({ id, bytes, reply }) {
  const staging = device.createBuffer({ size: round4(bytes), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffers.get(id), 0, staging, 0, round4(bytes));
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const error = takeError();
  const data = new Uint8Array(staging.getMappedRange()).slice(0, bytes);
  staging.unmap(); staging.destroy();
  if (error) return answer(reply, { error });
  answer(reply, null, data);
}
listen((m) => {
  try {
    switch (m.t) {
      case "init": return void init(m.reply);
      case "alloc": return void buffers.set(m.id, device.createBuffer({ size: round4(m.bytes), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST }));
      case "free": { buffers.get(m.id)?.destroy(); buffers.delete(m.id); return; }
      case "write": {
        const padded = m.data.length % 4 === 0 ? m.data : (() => { const p = new Uint8Array(round4(m.data.length)); p.set(m.data); return p; })();
        return void device.queue.writeBuffer(buffers.get(m.id), 0, padded);
      }
      case "compile": return void compile(m).catch((e) => answer(m.reply, { error: String(e?.message ?? e) }));
      case "run": return run(m);
      case "read": return void read(m).catch((e) => answer(m.reply, { error: String(e?.message ?? e) }));
      case "sync": return void device.queue.onSubmittedWorkDone().then(() => answer(m.reply, { error: takeError() }));
    }
  } catch (error) { firstError ??= String(error?.message ?? error); }
});
`;

/** How the worker hears the engine and finds the GPU: in Node, worker_threads and Dawn from npm's `webgpu`. */
const NODE_WORKER_PRELUDE = `
const { parentPort, workerData } = require("node:worker_threads");
const listen = (handle) => parentPort.on("message", handle);
async function openGpu() {
  const webgpu = await import(workerData.module);
  Object.assign(globalThis, webgpu.globals);
  const gpu = webgpu.create([]);
  globalThis.tgGpu = gpu; // Dawn crashes if this object is collected while in use
  return gpu;
}
`;

/** In a browser: a Web Worker and the browser's own WebGPU. */
const BROWSER_WORKER_PRELUDE = `
const listen = (handle) => { self.onmessage = (event) => handle(event.data); };
async function openGpu() { return self.navigator.gpu; }
`;

/** A worker's answer: the bytes of a read, or the JSON of anything else (an error included). */
interface Reply {
  bytes?: Uint8Array;
  json?: unknown;
}

/** The answer in `reply` (copied out: browsers decode no view of shared memory). */
function replyOf(reply: SharedArrayBuffer): Reply {
  const length = new Int32Array(reply, 0, 2)[1]!;
  if (length >= 0) return { bytes: new Uint8Array(reply, 8, length).slice() };
  const text = new TextDecoder().decode(new Uint8Array(reply, 8, -1 - length).slice());
  try {
    return { json: JSON.parse(text) };
  } catch {
    throw new WebGpuError(
      `WEBGPU: the device's worker answered in pieces (${text.length} characters kept): ${text.slice(0, 200)}`,
    );
  }
}

/** A worker of either kind, as the device uses it. */
interface GpuWorker {
  postMessage(message: unknown): void;
  terminate(): void;
}

/** The worker: a worker thread in Node, a Web Worker in a browser (where this code itself must run in a worker). */
function startWorker(module: string | null): GpuWorker {
  if (hasFileSystem()) {
    const worker = new Worker(NODE_WORKER_PRELUDE + WORKER_SOURCE, { eval: true, workerData: { module } });
    worker.unref(); // an idle GPU does not keep the process alive
    return worker;
  }
  if (typeof (globalThis as { document?: unknown }).document !== "undefined")
    throw new WebGpuError(
      "WEBGPU in a browser runs in a Web Worker: a page's main thread cannot wait for the GPU (run tsgrad in a worker)",
    );
  if (
    typeof SharedArrayBuffer === "undefined" ||
    !(globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated
  )
    throw new WebGpuError(
      "WEBGPU in a browser needs SharedArrayBuffer: serve the page cross-origin isolated (Cross-Origin-Opener-Policy: same-origin, Cross-Origin-Embedder-Policy: require-corp)",
    );
  const source = new Blob([BROWSER_WORKER_PRELUDE + WORKER_SOURCE], { type: "text/javascript" });
  const WebWorker = (globalThis as unknown as { Worker: new (url: string) => GpuWorker }).Worker;
  return new WebWorker(URL.createObjectURL(source));
}

/** The `webgpu` package's entry, or null where it is not installed (it is an optional dependency). */
function webgpuModule(): string | null {
  try {
    return import.meta.resolve("webgpu");
  } catch {
    // where import.meta.resolve is missing (code compiled to CommonJS), node's resolver
    try {
      return pathToFileURL(createRequire(import.meta.url).resolve("webgpu")).href;
    } catch {
      return null;
    }
  }
}

/** One WebGPU device, driven through its worker. */
export class WebGpuDevice {
  private readonly worker: GpuWorker;
  private nextId = 1;
  readonly info: WebGpuInfo;

  private constructor(worker: GpuWorker, info: WebGpuInfo) {
    this.worker = worker;
    this.info = info;
  }

  /** Starts the worker and waits for its adapter, blocking (Node); `module` is the `webgpu` package's entry. */
  static openBlocking(module: string): WebGpuDevice {
    if (!process.env.VK_ICD_FILENAMES) {
      const icd = SWIFTSHADER_ICDS.find((path) => existsSync(path));
      // set in this process's environment (setenv) before Dawn, in the worker, loads Vulkan
      if (icd) process.env.VK_ICD_FILENAMES = icd;
    }
    const worker = startWorker(module);
    const reply = new SharedArrayBuffer(8 + (1 << 16));
    worker.postMessage({ t: "init", reply });
    if (Atomics.wait(new Int32Array(reply, 0, 2), 0, 0, ANSWER_TIMEOUT_MS) === "timed-out")
      throw new WebGpuError(`WEBGPU: the device's worker gave no answer in ${ANSWER_TIMEOUT_MS / 1000} s`);
    return WebGpuDevice.opened(worker, reply);
  }

  /**
   * Starts the worker and waits for its adapter without blocking: a browser worker cannot block while the worker it
   * just made starts (the new worker's start needs its parent's event loop), so there the device opens this way.
   */
  static async open(): Promise<WebGpuDevice> {
    const worker = startWorker(null);
    const reply = new SharedArrayBuffer(8 + (1 << 16));
    const flag = new Int32Array(reply, 0, 2);
    worker.postMessage({ t: "init", reply });
    const started = performance.now();
    while (Atomics.load(flag, 0) === 0) {
      if (performance.now() - started > ANSWER_TIMEOUT_MS)
        throw new WebGpuError(`WEBGPU: the device's worker gave no answer in ${ANSWER_TIMEOUT_MS / 1000} s`);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    return WebGpuDevice.opened(worker, reply);
  }

  private static opened(worker: GpuWorker, reply: SharedArrayBuffer): WebGpuDevice {
    const answer = replyOf(reply).json as { info?: WebGpuInfo; error?: string };
    if (!answer.info) {
      worker.terminate();
      throw new WebGpuError(`WEBGPU: ${answer.error}`);
    }
    return new WebGpuDevice(worker, answer.info);
  }

  /** Posts `message` with a reply buffer of `bytes` and blocks until the worker answers; the answer's JSON. */
  private call(message: Record<string, unknown>, bytes = 1 << 16): unknown {
    return this.callRaw(message, bytes).json;
  }

  private callRaw(message: Record<string, unknown>, bytes: number): Reply {
    const reply = new SharedArrayBuffer(8 + bytes);
    const flag = new Int32Array(reply, 0, 2);
    this.worker.postMessage({ ...message, reply });
    if (Atomics.wait(flag, 0, 0, ANSWER_TIMEOUT_MS) === "timed-out")
      throw new WebGpuError(
        `WEBGPU: the device's worker gave no answer to ${message.t} in ${ANSWER_TIMEOUT_MS / 1000} s`,
      );
    return replyOf(reply);
  }

  allocate(bytes: number): WebGpuBuffer {
    if (bytes > this.info.maxBufferSize)
      throw new WebGpuError(
        `WEBGPU: a ${bytes}-byte buffer is over the device's ${this.info.maxBufferSize}-byte limit`,
      );
    const id = this.nextId++;
    this.worker.postMessage({ t: "alloc", id, bytes });
    return { id, bytes };
  }

  free(buffer: WebGpuBuffer): void {
    this.worker.postMessage({ t: "free", id: buffer.id });
  }

  copyin(buffer: WebGpuBuffer, data: Uint8Array): void {
    this.worker.postMessage({ t: "write", id: buffer.id, data: data.slice() });
  }

  copyout(buffer: WebGpuBuffer, bytes: number): Uint8Array {
    if (bytes === 0) return new Uint8Array(0);
    const answer = this.callRaw({ t: "read", id: buffer.id, bytes }, Math.max(bytes, 1 << 12));
    if (answer.bytes) return answer.bytes;
    throw new WebGpuError(`WEBGPU: ${(answer.json as { error: string }).error}`);
  }

  /** A compute pipeline for WGSL `code` (entry `main`, `bindingCount` storage buffers, the first writable). */
  compile(code: string, bindingCount: number, name: string): number {
    if (bindingCount > this.info.maxStorageBuffersPerShaderStage)
      throw new WebGpuError(
        `WEBGPU: kernel ${name} reads ${bindingCount} buffers, over the adapter's ${this.info.maxStorageBuffersPerShaderStage} a shader`,
      );
    const id = this.nextId++;
    const start = performance.now();
    if (debugLevel() >= 5) console.error(`tsgrad: WEBGPU compiling ${name}:\n${code}`);
    const { error } = this.call({ t: "compile", id, code, bindingCount }) as { error?: string };
    if (debugLevel() >= 2)
      console.error(`tsgrad: WEBGPU compiled ${name} in ${(performance.now() - start).toFixed(1)} ms`);
    if (error) throw new WebGpuError(`WEBGPU: kernel ${name} did not compile:\n${error}\n${code}`);
    return id;
  }

  dispatch(pipeline: number, buffers: readonly WebGpuBuffer[], groups: readonly [number, number]): void {
    this.worker.postMessage({ t: "run", pipeline, ids: buffers.map((b) => b.id), groups });
  }

  /** Waits for all queued work; throws the first error it met. */
  synchronize(): void {
    const { error } = this.call({ t: "sync" }) as { error: string | null };
    if (error) throw new WebGpuError(`WEBGPU: ${error}`);
  }
}

let device: WebGpuDevice | null | undefined;
let failure = "";

/**
 * The device (one: `WEBGPU`), started on first use in Node; in a browser, the one `initWebGpu()` started. Null where
 * WebGPU does not work here (`webGpuFailure` says why).
 */
export function webGpuDevice(): WebGpuDevice | null {
  if (device !== undefined) return device;
  if (!hasFileSystem()) {
    failure = "in a browser, WEBGPU starts with `await initWebGpu()` (from a Web Worker), before its first use";
    return null; // not kept: initWebGpu may start it later
  }
  const module = webgpuModule();
  if (!module) {
    failure = "the optional `webgpu` package is not installed (npm install webgpu)";
    return (device = null);
  }
  try {
    return (device = WebGpuDevice.openBlocking(module));
  } catch (error) {
    failure = (error as Error).message;
    return (device = null);
  }
}

/**
 * Starts WEBGPU without blocking; true once it answers, false where it cannot (`webGpuFailure` says why). A page's
 * worker calls it before using `DEVICE=WEBGPU`; in Node the device also starts by itself on first use.
 */
export async function initWebGpu(): Promise<boolean> {
  if (device) return true;
  if (hasFileSystem()) return webGpuDevice() !== null;
  try {
    device = await WebGpuDevice.open();
    return true;
  } catch (error) {
    failure = (error as Error).message;
    return false;
  }
}

/** Why WEBGPU is not available ("" when it is, or was not tried). */
export const webGpuFailure = (): string => failure;

/** Whether a WebGPU adapter answers (starts the device's worker the first time). */
export const webGpuAvailable = (): boolean => webGpuDevice() !== null;
