// The HIP runtime API (libamdhip64, ROCm 5 and 6) through koffi: the few calls the AMD device needs, each checked,
// so that a failure throws HipError with HIP's error name, the call and (for launches) the kernel. Loaded on first
// use; `loadHipDriver()` gives null where the library is missing or no GPU answers, never throws, and keeps why
// (`hipFailure()`), so that asking for AMD says which library loaded and what it answered.
//
// Only calls whose C signatures are the same in ROCm 5 and 6 are bound: no device properties struct (its layout
// changed, hipGetDevicePropertiesR0600) and no device attribute numbers (renumbered between releases).
import koffi from "koffi";
import { TsgradError } from "../helpers.ts";

export class HipError extends TsgradError {
  override name = "HipError";
}

type Fn = (...args: unknown[]) => unknown;

const SIGNATURES = [
  "int hipInit(unsigned int flags)",
  "int hipRuntimeGetVersion(_Out_ int *version)",
  "int hipGetDeviceCount(_Out_ int *count)",
  "int hipSetDevice(int device)",
  "int hipDeviceSynchronize()",
  "int hipDeviceCanAccessPeer(_Out_ int *canAccess, int device, int peer)",
  "int hipDeviceEnablePeerAccess(int peer, unsigned int flags)",
  "int hipMalloc(_Out_ uint64_t *pointer, size_t bytes)",
  "int hipFree(uint64_t pointer)",
  "int hipMemGetInfo(_Out_ size_t *free, _Out_ size_t *total)",
  "int hipMemcpyHtoD(uint64_t dst, const void *src, size_t bytes)",
  "int hipMemcpyDtoH(void *dst, uint64_t src, size_t bytes)",
  "int hipMemcpyDtoDAsync(uint64_t dst, uint64_t src, size_t bytes, void *stream)",
  // device ordinals where CUDA's takes contexts
  "int hipMemcpyPeerAsync(uint64_t dst, int dstDevice, uint64_t src, int srcDevice, size_t bytes, void *stream)",
  "int hipModuleLoadData(_Out_ void **module, const void *image)",
  "int hipModuleGetFunction(_Out_ void **function, void *module, const char *name)",
  "int hipModuleLaunchKernel(void *function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz, unsigned int sharedBytes, void *stream, void **params, void **extra)",
  "int hipEventCreateWithFlags(_Out_ void **event, unsigned int flags)",
  "int hipEventRecord(void *event, void *stream)",
  "int hipEventSynchronize(void *event)",
  "int hipEventElapsedTime(_Out_ float *milliseconds, void *start, void *end)",
  "int hipEventDestroy(void *event)",
  // the name itself, where cuGetErrorName fills an out parameter
  "const char *hipGetErrorName(int error)",
  "int hipStreamCreate(_Out_ void **stream)",
  "int hipStreamSynchronize(void *stream)",
  "int hipStreamWaitEvent(void *stream, void *event, unsigned int flags)",
  "int hipStreamBeginCapture(void *stream, int mode)",
  "int hipStreamEndCapture(void *stream, _Out_ void **graph)",
  // five arguments (an error node and a log buffer), where CUDA's WithFlags variant takes three
  "int hipGraphInstantiate(_Out_ void **exec, void *graph, void *errorNode, void *log, size_t logBytes)",
  "int hipGraphLaunch(void *exec, void *stream)",
] as const;

type Name<S extends string> = S extends `${string} ${infer N}(${string}` ? (N extends `*${infer M}` ? M : N) : never;
export type HipDriver = { readonly [S in (typeof SIGNATURES)[number] as Name<S>]: Fn } & {
  /** The library that loaded, as named when loading it. */
  readonly library: string;
  /** Throws HipError naming the call, the error and `what` (a kernel, a size) unless `result` is hipSuccess. */
  check(call: string, result: unknown, what?: string): void;
  /** HIP's name of an error code, e.g. "hipErrorNoDevice". */
  errorName(result: unknown): string;
};

/** `TSGRAD_LIBHIP` (a path, for tests and odd installs), else the sonames ROCm installs, newest first. */
const candidates = (): string[] =>
  process.env.TSGRAD_LIBHIP
    ? [process.env.TSGRAD_LIBHIP]
    : ["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", "/opt/rocm/lib/libamdhip64.so"];

let driver: HipDriver | null | undefined;
let failure = "";

/** Why the HIP runtime is unavailable ("" when it loaded and a GPU answered, or before the first probe). */
export const hipFailure = (): string => failure;

/** The runtime, initialised; null when it cannot be loaded or no GPU answers (probed once; see `hipFailure`). */
export function loadHipDriver(): HipDriver | null {
  if (driver !== undefined) return driver;
  const tried: string[] = [];
  for (const name of candidates()) {
    let lib: ReturnType<typeof koffi.load>;
    try {
      lib = koffi.load(name);
    } catch (e) {
      tried.push(`${name}: ${(e as Error).message.split("\n")[0]}`);
      continue;
    }
    const loaded = bind(lib, name);
    const answer = firstGpu(loaded);
    if (answer !== "") {
      failure = `no AMD GPU found (${name} loaded; ${answer})`;
      return (driver = null);
    }
    return (driver = loaded);
  }
  failure =
    `the HIP runtime (libamdhip64) is not installed or does not load (tried ${tried.join("; ")}); ` +
    "install ROCm (or Debian's libamdhip64-5), or set TSGRAD_LIBHIP to libamdhip64.so's path";
  return (driver = null);
}

/** The runtime, or HipError saying why there is none. */
export function hipDriver(): HipDriver {
  const d = loadHipDriver();
  if (!d) throw new HipError(`AMD: ${failure}`);
  return d;
}

/** Calls a runtime function that fills one output value, checking the result. */
export function hipOut<T>(d: HipDriver, call: keyof HipDriver & string, ...args: unknown[]): T {
  const slot: unknown[] = [null];
  d.check(call, (d[call] as Fn)(slot, ...args));
  return slot[0] as T;
}

function bind(lib: ReturnType<typeof koffi.load>, library: string): HipDriver {
  const fns: Record<string, Fn> = {};
  for (const signature of SIGNATURES) {
    const name = /([A-Za-z]+)\(/.exec(signature)![1]!;
    try {
      fns[name] = lib.func(signature) as Fn;
    } catch {
      // an old runtime without the call (graphs): the call throws when used
      fns[name] = () => {
        throw new HipError(`${library} has no ${name}`);
      };
    }
  }
  const errorName = (result: unknown): string => {
    try {
      return (fns.hipGetErrorName!(result) as string | null) ?? "unknown error";
    } catch {
      return "unknown error";
    }
  };
  const check = (call: string, result: unknown, what?: string): void => {
    if (result === 0) return;
    throw new HipError(`${call}${what ? ` (${what})` : ""} failed: ${errorName(result)} (${result})`);
  };
  return { ...fns, library, check, errorName } as unknown as HipDriver;
}

/** "" when the runtime initialises and sees a GPU; else what hipInit and hipGetDeviceCount answered. */
function firstGpu(d: HipDriver): string {
  const name = d.errorName;
  try {
    const init = d.hipInit(0) as number;
    const count: unknown[] = [0];
    const counted = d.hipGetDeviceCount(count) as number;
    if (counted !== 0) return `${init !== 0 ? `hipInit: ${name(init)}; ` : ""}hipGetDeviceCount: ${name(counted)}`;
    if ((count[0] as number) < 1) return "hipGetDeviceCount: 0 devices";
    return init !== 0 ? `hipInit: ${name(init)}` : "";
  } catch (e) {
    return (e as Error).message;
  }
}
