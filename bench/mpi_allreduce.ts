// All-reduce (float32 sum) across processes: tsgrad's MPI communicator (which sends big arrays in slices)
// next to one raw MPI_Allreduce on the whole array, as a user would call it, on the same arrays in the same
// run. Algorithm bandwidth is bytes per rank / time; bus bandwidth scales it by 2(n-1)/n, the share of the
// array each rank sends and receives in a ring. BERT-large's gradient is 335M floats (1.34 GB per rank).
// Usage: mpirun --allow-run-as-root --oversubscribe -np 2 node --import tsx bench/mpi_allreduce.ts
//        [--numel 335000000] [--repeats 5] [--slice-mb 4]   (prints JSON on rank 0)
import { argsWithUsage } from "./args.ts";
import { dist } from "../src/index.ts";
import { DEFAULT_SLICE_MB } from "../src/dist/mpi.ts";
import { loadMpi } from "../src/dist/mpi_library.ts";

const HELP = `Usage: mpirun --allow-run-as-root --oversubscribe -np 2 node --import tsx bench/mpi_allreduce.ts [options]
  --numel N      float32 values per rank (default 335000000, BERT-large's gradient)
  --repeats N    timed calls of each kind, median reported (default 5)
  --slice-mb MB  tsgrad's slice size (TSGRAD_MPI_SLICE_MB; default ${DEFAULT_SLICE_MB})
  --help         this text`;

const { values } = argsWithUsage(HELP, {
  numel: { type: "string", default: "335000000" },
  repeats: { type: "string", default: "5" },
  "slice-mb": { type: "string", default: String(DEFAULT_SLICE_MB) },
});
const numel = Number(values.numel);
const repeats = Number(values.repeats);
process.env.TSGRAD_MPI_SLICE_MB = values["slice-mb"];

const comm = dist.init();
if (comm.size < 2) throw new Error(`run under mpirun with at least 2 ranks (world size is ${comm.size})\n${HELP}`);
const mpi = loadMpi();
const { inPlace, float32, sum, commWorld } = mpi.handles;

const data = new Float32Array(numel).fill(1);
const ways: Record<string, () => void> = {
  tsgrad: () => comm.allReduce(data, "sum"),
  raw: () => mpi.check("MPI_Allreduce", mpi.MPI_Allreduce(inPlace, data, numel, float32, sum, commWorld)),
};

/** Seconds of one call, every rank starting together; the slowest rank's time is the collective's. */
function timed(call: () => void): number {
  comm.barrier();
  const start = performance.now();
  call();
  const seconds = new Float64Array([(performance.now() - start) / 1000]);
  return comm.allReduce(seconds, "max")[0]!;
}

const times: Record<string, number[]> = { tsgrad: [], raw: [] };
for (const call of Object.values(ways)) call(); // warm: first touches, connections
for (let i = 0; i < repeats; i++) {
  // interleaved, so that both see the same machine
  for (const [name, call] of Object.entries(ways)) times[name]!.push(timed(call));
  // keep the values small and exact: every call doubles them
  data.fill(1);
}

const bytes = numel * 4;
const report = (name: string) => {
  const sorted = [...times[name]!].sort((a, b) => a - b);
  const seconds = sorted[Math.floor(sorted.length / 2)]!;
  return {
    median_s: +seconds.toFixed(4),
    min_s: +sorted[0]!.toFixed(4),
    algbw_GBps: +(bytes / seconds / 1e9).toFixed(3),
    busbw_GBps: +(((bytes / seconds) * 2 * (comm.size - 1)) / comm.size / 1e9).toFixed(3),
  };
};
if (comm.rank === 0) {
  const tsgrad = report("tsgrad");
  const raw = report("raw");
  console.log(
    JSON.stringify(
      {
        ranks: comm.size,
        numel,
        bytes_per_rank: bytes,
        slice_mb: Number(values["slice-mb"]),
        repeats,
        mpi: mpi.handles.implementation,
        tsgrad,
        raw,
        tsgrad_over_raw: +(tsgrad.algbw_GBps / raw.algbw_GBps).toFixed(3),
      },
      null,
      2,
    ),
  );
}
comm.close();
