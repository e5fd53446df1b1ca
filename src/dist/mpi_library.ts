// The system's MPI library (libmpi) through koffi: the few calls the MPI communicator needs, and the
// predefined objects (communicator, datatypes, ops) they name. Each call's error code becomes an MpiError
// worded by MPI_Error_string.
import koffi from "koffi";
import { TsgradError } from "../helpers.ts";

export class MpiError extends TsgradError {
  override name = "MpiError";
}

/** A predefined MPI object: an address in Open MPI, an integer constant in MPICH. */
export type Handle = bigint | number;

/** The predefined objects, as one MPI implementation spells them. */
export interface MpiHandles {
  implementation: string;
  /** The C type of a handle in the signatures below. */
  cType: string;
  commWorld: Handle;
  errorsReturn: Handle;
  /** MPI_IN_PLACE: a marker address, never dereferenced. */
  inPlace: bigint;
  float32: Handle;
  float64: Handle;
  int32: Handle;
  byte: Handle;
  sum: Handle;
  max: Handle;
}

const SIGNATURES = [
  "int MPI_Init(void *argc, void *argv)",
  "int MPI_Initialized(_Out_ int *flag)",
  "int MPI_Finalized(_Out_ int *flag)",
  "int MPI_Finalize()",
  "int MPI_Comm_rank(HANDLE comm, _Out_ int *rank)",
  "int MPI_Comm_size(HANDLE comm, _Out_ int *size)",
  "int MPI_Comm_set_errhandler(HANDLE comm, HANDLE handler)",
  "int MPI_Allreduce(void *send, void *recv, int count, HANDLE type, HANDLE op, HANDLE comm)",
  "int MPI_Bcast(void *buffer, int count, HANDLE type, int root, HANDLE comm)",
  "int MPI_Allgather(void *send, int sendCount, HANDLE sendType, void *recv, int recvCount, HANDLE recvType, HANDLE comm)",
  "int MPI_Barrier(HANDLE comm)",
  "int MPI_Error_string(int code, _Out_ char *text, _Out_ int *length)",
] as const;

type Fn = (...args: unknown[]) => number;
type Library = ReturnType<typeof koffi.load>;
type Name<S extends string> = S extends `int ${infer N}(${string}` ? N : never;
export type MpiLibrary = { readonly [S in (typeof SIGNATURES)[number] as Name<S>]: Fn } & {
  readonly path: string;
  readonly handles: MpiHandles;
  /** Throws MpiError naming the call and MPI's words for `code` unless it is MPI_SUCCESS. */
  check(call: string, code: number): void;
};

/** Open MPI's predefined objects are global variables: a handle is the variable's address. */
function openMpiHandles(lib: Library): MpiHandles | null {
  const address = (name: string): bigint => lib.symbol(`ompi_mpi_${name}`) as bigint;
  try {
    address("comm_world");
  } catch {
    return null;
  }
  return {
    implementation: "Open MPI",
    cType: "void *",
    commWorld: address("comm_world"),
    errorsReturn: address("errors_return"),
    inPlace: 1n,
    float32: address("float"),
    float64: address("double"),
    int32: address("int"),
    byte: address("byte"),
    sum: address("op_sum"),
    max: address("op_max"),
  };
}

/** The one place that knows how each implementation names its objects (MPICH's integer constants go here). */
function handlesOf(lib: Library, path: string): MpiHandles {
  const handles = openMpiHandles(lib);
  if (handles) return handles;
  throw new MpiError(
    `${path} is not Open MPI (no ompi_mpi_comm_world); other MPI implementations are not supported yet`,
  );
}

/** `TSGRAD_LIBMPI` (a path, for odd installs), else Open MPI's soname. */
export const libraryPath = (): string => process.env.TSGRAD_LIBMPI || "libmpi.so.40";

/** MPI_MAX_ERROR_STRING is 256 in Open MPI and 1024 in MPICH: room for either. */
const ERROR_STRING_BYTES = 1024;

/** Loads libmpi and binds its calls; throws MpiError saying how to install it where it is missing. */
export function loadMpi(): MpiLibrary {
  const path = libraryPath();
  let lib: Library;
  try {
    lib = koffi.load(path);
  } catch (error) {
    throw new MpiError(
      `cannot load the MPI library ${path} (${(error as Error).message}): install Open MPI ` +
        "(apt-get install openmpi-bin libopenmpi-dev) or set TSGRAD_LIBMPI to libmpi's path",
    );
  }
  const handles = handlesOf(lib, path);
  const fns: Record<string, Fn> = {};
  for (const signature of SIGNATURES) {
    const name = signature.slice(4, signature.indexOf("("));
    fns[name] = lib.func(signature.replaceAll("HANDLE", handles.cType)) as Fn;
  }
  const check = (call: string, code: number): void => {
    if (code === 0) return;
    const text = Buffer.alloc(ERROR_STRING_BYTES);
    const length: number[] = [0];
    const known = fns.MPI_Error_string!(code, text, length) === 0;
    const words = known ? text.toString("utf8", 0, length[0]) : "unknown error";
    throw new MpiError(`${call} failed: ${words} (MPI error ${code})`);
  };
  return { ...fns, path, handles, check } as unknown as MpiLibrary;
}
