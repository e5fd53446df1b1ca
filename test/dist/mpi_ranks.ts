// One rank of the MPI test (test/dist/mpi.test.ts runs it under `mpirun -np 2`): every collective on arrays
// whose values depend on the rank, checked here against what each rank must end with; prints one JSON
// line of results, one boolean per check (a check that throws ends the rank with its error on stderr).
import { dist } from "../../src/index.ts";
import { loadMpi } from "../../src/dist/mpi_library.ts";
import { sliceElements } from "../../src/dist/mpi.ts";

const comm = dist.init();
const { rank, size } = comm;
const ranks = Array.from({ length: size }, (_, r) => r);
const results: Record<string, unknown> = { rank, size, backend: comm.backend, launcher: comm.launcher };

/** Each rank's value at index i: distinct per rank and per index, exact in float32. */
const value = (r: number, i: number) => ((i * 7 + r * 3) % 1000) - 500;
const filled = <T extends Float32Array | Float64Array | Int32Array>(array: T, r: number): T => {
  for (let i = 0; i < array.length; i++) array[i] = value(r, i);
  return array;
};
const every = (length: number, expected: (i: number) => number, actual: ArrayLike<number>): boolean => {
  if (actual.length !== length) return false;
  for (let i = 0; i < length; i++) if (actual[i] !== expected(i)) return false;
  return true;
};
const sumAt = (i: number) => ranks.reduce((total, r) => total + value(r, i), 0);
const maxAt = (i: number) => Math.max(...ranks.map((r) => value(r, i)));

// small; one slice and a half plus a few (not a multiple of the slice); several whole slices and one element
const slice = sliceElements(new Float32Array(0));
for (const [label, n] of [
  ["small", 5],
  ["sliceAndAHalf", slice + (slice >> 1) + 3],
  ["threeSlicesAndOne", 3 * slice + 1],
] as const) {
  results[`sum_${label}`] = every(n, sumAt, comm.allReduce(filled(new Float32Array(n), rank), "sum"));
  results[`mean_${label}`] = every(
    n,
    (i) => Math.fround(sumAt(i) / size),
    comm.allReduce(filled(new Float32Array(n), rank), "mean"),
  );
  results[`max_${label}`] = every(n, maxAt, comm.allReduce(filled(new Float32Array(n), rank), "max"));
  results[`broadcast_${label}`] = every(
    n,
    (i) => value(size - 1, i),
    comm.broadcast(filled(new Float32Array(n), rank), size - 1),
  );
  results[`allGather_${label}`] = every(
    size * n,
    (i) => value(Math.floor(i / n), i % n),
    comm.allGather(filled(new Float32Array(n), rank)),
  );
}
results.sum_float64 = every(9, sumAt, comm.allReduce(filled(new Float64Array(9), rank)));
results.max_int32 = every(9, maxAt, comm.allReduce(filled(new Int32Array(9), rank), "max"));
results.allGather_int32 = every(
  3 * size,
  (i) => value(Math.floor(i / 3), i % 3),
  comm.allGather(filled(new Int32Array(3), rank)),
);

// barrier: rank 0 waits before it arrives; nobody may leave before that
const start = performance.now();
if (rank === 0) await new Promise((resolve) => setTimeout(resolve, 300));
comm.barrier();
results.barrierWaited = performance.now() - start >= 250;

// an MPI error comes back as an MpiError in MPI's words (the communicator checks roots itself, so ask libmpi)
const mpi = loadMpi();
try {
  mpi.check("MPI_Bcast", mpi.MPI_Bcast(new Float32Array(1), 1, mpi.handles.float32, size + 5, mpi.handles.commWorld));
  results.errorString = "no error";
} catch (error) {
  results.errorString = `${(error as Error).name}: ${(error as Error).message}`;
}

comm.close();
console.log(JSON.stringify(results));
