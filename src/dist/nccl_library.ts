// NVIDIA's collective library (libnccl) through koffi: found where CUDA and PyTorch installs put it, never
// downloaded. The calls the NCCL communicator needs, each result checked into an NcclError in NCCL's words.
// AMD's RCCL exports the same API (ncclAllReduce on HIP streams), so it loads through the same binding: for AMD
// devices the communicator asks for "rccl" (librccl.so.1 from ROCm, or TSGRAD_LIBRCCL).
import { existsSync, readdirSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import koffi from "koffi";
import { TsgradError } from "../helpers.ts";

export class NcclError extends TsgradError {
  override name = "NcclError";
}

/** ncclUniqueId: 128 opaque bytes that rank 0 makes and every rank passes to ncclCommInitRank. */
export const UNIQUE_ID_BYTES = 128;

/** ncclDataType_t values (nccl.h). */
export const NCCL_TYPES = {
  int8: 0,
  uint8: 1,
  int32: 2,
  uint32: 3,
  int64: 4,
  uint64: 5,
  float16: 6,
  float32: 7,
  float64: 8,
  bfloat16: 9,
} as const;
export type NcclType = keyof typeof NCCL_TYPES;

/** ncclRedOp_t values; avg needs NCCL 2.10. */
export const NCCL_OPS = { sum: 0, prod: 1, max: 2, min: 3, avg: 4 } as const;

/** ncclAvg's first release, as ncclGetVersion encodes it (major * 10000 + minor * 100 + patch). */
export const AVG_VERSION = 21000;

const SIGNATURES = [
  "int ncclGetVersion(_Out_ int *version)",
  "int ncclGetUniqueId(_Out_ ncclUniqueId *id)",
  "int ncclCommInitRank(_Out_ void **comm, int nranks, ncclUniqueId id, int rank)",
  "int ncclCommDestroy(void *comm)",
  "int ncclCommAbort(void *comm)",
  "int ncclCommGetAsyncError(void *comm, _Out_ int *error)",
  "int ncclAllReduce(uint64_t send, uint64_t recv, size_t count, int type, int op, void *comm, void *stream)",
  "int ncclBroadcast(uint64_t send, uint64_t recv, size_t count, int type, int root, void *comm, void *stream)",
  "int ncclAllGather(uint64_t send, uint64_t recv, size_t count, int type, void *comm, void *stream)",
  "int ncclGroupStart()",
  "int ncclGroupEnd()",
  "const char *ncclGetErrorString(int result)",
] as const;

type Fn = (...args: unknown[]) => unknown;
type Name<S extends string> = S extends `${string} ${infer N}(${string}` ? (N extends `*${infer M}` ? M : N) : never;
export type NcclLibrary = { readonly [S in (typeof SIGNATURES)[number] as Name<S>]: Fn } & {
  readonly path: string;
  /** ncclGetVersion's number, e.g. 21805 for 2.18.5. */
  readonly version: number;
  /** Throws NcclError naming the call (and `what`) in NCCL's words unless `result` is ncclSuccess. */
  check(call: string, result: unknown, what?: string): void;
};

/** Which collective library: NVIDIA's for CUDA devices, AMD's (same API) for AMD devices. */
export type CollectiveLibrary = "nccl" | "rccl";

/** Where RCCL lives when nothing says: the loader's path, then ROCm's folder. */
const rcclPaths = (env: Record<string, string | undefined>): string[] =>
  env.TSGRAD_LIBRCCL ? [env.TSGRAD_LIBRCCL] : ["librccl.so.1", "/opt/rocm/lib/librccl.so.1"];

/** Where NCCL (or RCCL) lives when nothing says: CUDA's and the distributions' folders, PyTorch's wheels. */
export function candidatePaths(
  env: Record<string, string | undefined> = process.env,
  library: CollectiveLibrary = "nccl",
): string[] {
  if (library === "rccl") return rcclPaths(env);
  const named = env.TSGRAD_LIBNCCL;
  if (named) return [named];
  const paths = ["libnccl.so.2"]; // the loader's path (LD_LIBRARY_PATH, ldconfig)
  for (const dir of ["/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/opt/nccl/lib"])
    paths.push(join(dir, "libnccl.so.2"));
  if (env.CONDA_PREFIX) paths.push(join(env.CONDA_PREFIX, "lib", "libnccl.so.2"));
  // pip's nvidia-nccl wheel (what a PyTorch GPU install brings): site-packages/nvidia/nccl/lib
  const sitePackages = [env.VIRTUAL_ENV, "/usr/local", "/usr", join(homedir(), ".local")]
    .filter((root): root is string => root !== undefined)
    .flatMap((root) => pythonFolders(join(root, "lib")));
  for (const site of sitePackages) paths.push(join(site, "nvidia", "nccl", "lib", "libnccl.so.2"));
  return paths;
}

/** lib/python3.*\/{site,dist}-packages under `lib`. */
function pythonFolders(lib: string): string[] {
  if (!existsSync(lib)) return [];
  return readdirSync(lib)
    .filter((name) => /^python3/.test(name))
    .flatMap((name) => ["site-packages", "dist-packages"].map((kind) => join(lib, name, kind)))
    .filter((dir) => existsSync(dir));
}

const loaded = new Map<CollectiveLibrary, NcclLibrary>();

/** Loads libnccl (or librccl) from the first candidate that loads; NcclError listing every place tried where none does. */
export function loadNccl(
  env: Record<string, string | undefined> = process.env,
  library: CollectiveLibrary = "nccl",
): NcclLibrary {
  const known = loaded.get(library);
  const named = library === "rccl" ? env.TSGRAD_LIBRCCL : env.TSGRAD_LIBNCCL;
  if (known && (!named || known.path === named)) return known;
  const failures: string[] = [];
  for (const path of candidatePaths(env, library)) {
    if (path.includes("/") && !existsSync(path)) {
      failures.push(`${path} (absent)`);
      continue;
    }
    let lib: ReturnType<typeof koffi.load>;
    try {
      lib = koffi.load(path);
    } catch (error) {
      failures.push(`${path} (${(error as Error).message.split("\n")[0]})`);
      continue;
    }
    const bound = bind(lib, path);
    loaded.set(library, bound);
    return bound;
  }
  if (library === "rccl")
    throw new NcclError(
      `cannot load RCCL: tried ${failures.join("; ")}. RCCL comes with ROCm (/opt/rocm/lib); set TSGRAD_LIBRCCL ` +
        "to librccl.so.1's path, or TSGRAD_NCCL=0 to all-reduce through MPI and host memory",
    );
  throw new NcclError(
    `cannot load NCCL: tried ${failures.join("; ")}. NCCL comes with CUDA installs and PyTorch's GPU wheels; ` +
      "set TSGRAD_LIBNCCL to libnccl.so.2's path, or TSGRAD_NCCL=0 to all-reduce through MPI and host memory",
  );
}

/** koffi knows a struct by name once declared: the signatures above name ncclUniqueId. */
let uniqueIdDeclared = false;

function bind(lib: ReturnType<typeof koffi.load>, path: string): NcclLibrary {
  if (!uniqueIdDeclared) {
    koffi.struct("ncclUniqueId", { internal: koffi.array("uint8_t", UNIQUE_ID_BYTES, "Typed") });
    uniqueIdDeclared = true;
  }
  const fns: Record<string, Fn> = {};
  for (const signature of SIGNATURES) {
    const name = /([A-Za-z]+)\(/.exec(signature)![1]!;
    try {
      fns[name] = lib.func(signature) as Fn;
    } catch (error) {
      throw new NcclError(`${path} lacks ${name} (${(error as Error).message}): not an NCCL library?`);
    }
  }
  const check = (call: string, result: unknown, what?: string): void => {
    if (result === 0) return;
    const words = fns.ncclGetErrorString!(result) as string;
    throw new NcclError(`${call}${what ? ` (${what})` : ""} failed: ${words} (ncclResult ${result})`);
  };
  const version: number[] = [0];
  check("ncclGetVersion", fns.ncclGetVersion!(version));
  return { ...fns, path, version: version[0]!, check } as unknown as NcclLibrary;
}

/** "2.18.5" from 21805 (2.9 and older encoded major * 1000 + minor * 100 + patch). */
export function versionString(code: number): string {
  const major = code >= 10000 ? Math.floor(code / 10000) : Math.floor(code / 1000);
  const minor = code >= 10000 ? Math.floor((code % 10000) / 100) : Math.floor((code % 1000) / 100);
  return `${major}.${minor}.${code % 100}`;
}
