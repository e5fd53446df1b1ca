// One rank of the NCCL binding test (test/dist/nccl.test.ts runs it under `mpirun -np 2` with TSGRAD_LIBNCCL
// pointing at the fake library built from fake_nccl.c): the NCCL communicator on host memory standing in for
// device memory, its id sent over MPI and through a file; prints one JSON line of checks.
import koffi from "koffi";
import { dist } from "../../src/index.ts";
import { NcclCommunicator } from "../../src/dist/nccl.ts";

const comm = dist.init();
const { rank, size } = comm;
const device = { stream: null, activate: () => {} };
const results: Record<string, unknown> = { rank, size };

/** `n` values of a typed-array kind in memory koffi allocated: its address, and a view to fill and read. */
function buffer<T extends Float32Array | Int32Array>(make: new (b: ArrayBuffer) => T, n: number) {
  const pointer = koffi.alloc("uint8_t", n * 4);
  return {
    pointer: koffi.address(pointer) as bigint,
    view: new make(koffi.view(pointer, n * 4) as ArrayBuffer),
    keep: pointer,
  };
}
const value = (r: number, i: number) => ((i * 5 + r * 7) % 100) - 50;
const every = (actual: ArrayLike<number>, expected: (i: number) => number) =>
  Array.from(actual).every((v, i) => v === expected(i));

for (const [label, rendezvous] of [
  ["host", { kind: "host", host: comm }],
  ["file", { kind: "file", path: process.env.NCCL_ID_FILE! }],
] as const) {
  const nccl = NcclCommunicator.open(rank, size, device, rendezvous);
  results[`${label}_version`] = nccl.library.version;
  const n = 1000;
  const a = buffer(Float32Array, n);
  const b = buffer(Int32Array, 7);
  a.view.forEach((_, i) => (a.view[i] = value(rank, i)));
  b.view.forEach((_, i) => (b.view[i] = value(rank, i)));
  // two buffers of two types in one group
  nccl.allReduce(
    [
      { pointer: a.pointer, count: n, type: "float32" },
      { pointer: b.pointer, count: 7, type: "int32" },
    ],
    "sum",
  );
  const sum = (i: number) => Array.from({ length: size }, (_, r) => value(r, i)).reduce((x, y) => x + y, 0);
  results[`${label}_sum_float32`] = every(a.view, sum);
  results[`${label}_sum_int32`] = every(b.view, sum);
  a.view.forEach((_, i) => (a.view[i] = value(rank, i)));
  nccl.allReduce([{ pointer: a.pointer, count: n, type: "float32" }], "mean");
  results[`${label}_mean`] = every(a.view, (i) => Math.fround(sum(i) / size));
  a.view.forEach((_, i) => (a.view[i] = value(rank, i)));
  nccl.allReduce([{ pointer: a.pointer, count: n, type: "float32" }], "max");
  results[`${label}_max`] = every(a.view, (i) => Math.max(...Array.from({ length: size }, (_, r) => value(r, i))));
  a.view.forEach((_, i) => (a.view[i] = value(rank, i)));
  nccl.broadcast(a.pointer, n, "float32", size - 1);
  results[`${label}_broadcast`] = every(a.view, (i) => value(size - 1, i));
  const gathered = buffer(Float32Array, 3 * size);
  const mine = buffer(Float32Array, 3);
  mine.view.set([rank, rank + 0.5, -rank]);
  nccl.allGather(mine.pointer, gathered.pointer, 3, "float32");
  results[`${label}_allGather`] = every(
    gathered.view,
    (i) => [Math.floor(i / 3), Math.floor(i / 3) + 0.5, -Math.floor(i / 3)][i % 3]!,
  );
  nccl.close();
}
console.log(JSON.stringify(results));
