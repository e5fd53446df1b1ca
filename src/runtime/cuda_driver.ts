// The CUDA driver API (libcuda) through koffi: the few calls the CUDA device needs, each checked, so that
// a failure throws CudaError with the CUDA error name, the call and (for launches) the kernel. Loaded on
// first use; `loadCudaDriver()` gives null where libcuda is missing or has no device, and never throws.
import koffi from "koffi";
import { TsgradError } from "../helpers.ts";

export class CudaError extends TsgradError {
  override name = "CudaError";
}

type Fn = (...args: unknown[]) => number;

/** Device attributes used here (CUdevice_attribute values). */
export const ATTRIBUTE = {
  computeCapabilityMajor: 75,
  computeCapabilityMinor: 76,
  multiprocessorCount: 16,
  maxSharedMemoryPerMultiprocessor: 81,
} as const;

const SIGNATURES = [
  "int cuInit(unsigned int flags)",
  "int cuDriverGetVersion(_Out_ int *version)",
  "int cuDeviceGetCount(_Out_ int *count)",
  "int cuDeviceGet(_Out_ int *device, int ordinal)",
  "int cuDeviceGetAttribute(_Out_ int *value, int attribute, int device)",
  "int cuDeviceGetName(_Out_ char *name, int length, int device)",
  "int cuDeviceCanAccessPeer(_Out_ int *canAccess, int device, int peer)",
  "int cuDevicePrimaryCtxRetain(_Out_ void **context, int device)",
  "int cuCtxSetCurrent(void *context)",
  "int cuCtxSynchronize()",
  "int cuCtxEnablePeerAccess(void *peer, unsigned int flags)",
  "int cuMemAlloc_v2(_Out_ uint64_t *pointer, size_t bytes)",
  "int cuMemFree_v2(uint64_t pointer)",
  "int cuMemGetInfo_v2(_Out_ size_t *free, _Out_ size_t *total)",
  "int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t bytes)",
  "int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t bytes)",
  "int cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, void *stream)",
  "int cuMemcpyPeerAsync(uint64_t dst, void *dstContext, uint64_t src, void *srcContext, size_t bytes, void *stream)",
  "int cuModuleLoadData(_Out_ void **module, const void *image)",
  "int cuModuleGetFunction(_Out_ void **function, void *module, const char *name)",
  "int cuFuncSetAttribute(void *function, int attribute, int value)",
  "int cuLaunchKernel(void *function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz, unsigned int sharedBytes, void *stream, void **params, void **extra)",
  "int cuEventCreate(_Out_ void **event, unsigned int flags)",
  "int cuEventRecord(void *event, void *stream)",
  "int cuEventSynchronize(void *event)",
  "int cuEventElapsedTime(_Out_ float *milliseconds, void *start, void *end)",
  "int cuEventDestroy_v2(void *event)",
  "int cuGetErrorName(int error, _Out_ const char **name)",
  "int cuStreamCreate(_Out_ void **stream, unsigned int flags)",
  "int cuStreamSynchronize(void *stream)",
  "int cuStreamWaitEvent(void *stream, void *event, unsigned int flags)",
  "int cuStreamBeginCapture_v2(void *stream, int mode)",
  "int cuStreamEndCapture(void *stream, _Out_ void **graph)",
  "int cuGraphInstantiateWithFlags(_Out_ void **exec, void *graph, unsigned long long flags)",
  "int cuGraphLaunch(void *exec, void *stream)",
] as const;

type Name<S extends string> = S extends `int ${infer N}(${string}` ? N : never;
export type CudaDriver = { readonly [S in (typeof SIGNATURES)[number] as Name<S>]: Fn } & {
  /** Throws CudaError naming the call, the error and `what` (a kernel, a size) unless `result` is CUDA_SUCCESS. */
  check(call: string, result: number, what?: string): void;
};

/** `TSGRAD_LIBCUDA` (a path, for tests and odd installs), else the driver's soname. */
const libraryName = (): string => process.env.TSGRAD_LIBCUDA || "libcuda.so.1";

let driver: CudaDriver | null | undefined;

/** The driver, initialised; null when it cannot be loaded or initialised (probed once). */
export function loadCudaDriver(): CudaDriver | null {
  if (driver !== undefined) return driver;
  let lib: ReturnType<typeof koffi.load>;
  try {
    lib = koffi.load(libraryName());
  } catch {
    return (driver = null);
  }
  const fns: Record<string, Fn> = {};
  for (const signature of SIGNATURES) {
    const name = signature.slice(4, signature.indexOf("("));
    try {
      fns[name] = lib.func(signature) as Fn;
    } catch {
      // an old driver without the call (peer copies): the call throws when used
      fns[name] = () => {
        throw new CudaError(`${libraryName()} has no ${name}`);
      };
    }
  }
  const check = (call: string, result: number, what?: string): void => {
    if (result === 0) return;
    const name: unknown[] = [null];
    const known = fns.cuGetErrorName!(result, name) === 0;
    throw new CudaError(`${call}${what ? ` (${what})` : ""} failed: ${known ? name[0] : "unknown error"} (${result})`);
  };
  const loaded = { ...fns, check } as unknown as CudaDriver;
  try {
    if (loaded.cuInit(0) !== 0) return (driver = null);
    const count: unknown[] = [0];
    if (loaded.cuDeviceGetCount(count) !== 0 || (count[0] as number) < 1) return (driver = null);
  } catch {
    return (driver = null);
  }
  return (driver = loaded);
}

/** The driver, or a clear error where there is none. */
export function cudaDriver(): CudaDriver {
  const d = loadCudaDriver();
  if (!d) throw new CudaError(`CUDA: no usable driver (${libraryName()} missing, or no GPU answered cuInit)`);
  return d;
}

/** Calls a driver function that fills one output value, checking the result. */
export function out<T>(d: CudaDriver, call: keyof CudaDriver & string, ...args: unknown[]): T {
  const slot: unknown[] = [null];
  d.check(call, (d[call] as Fn)(slot, ...args));
  return slot[0] as T;
}
