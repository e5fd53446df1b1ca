// The MPI communicator across real processes: test/dist/mpi_ranks.ts under `mpirun -np 2`, each rank's
// checks asserted here. Needs Open MPI (`npm test` installs it first: test/setup/ensure-mpi.sh).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { dist } from "../../src/index.ts";
import { MpiError } from "../../src/dist/index.ts";
import { loadMpi } from "../../src/dist/mpi_library.ts";

const root = join(import.meta.dirname, "..", "..");
const INSTALL = "install Open MPI (apt-get install openmpi-bin libopenmpi-dev; npm test does it as root on Debian)";

/** Runs `node --import tsx script` under mpirun; every output line is tagged with its rank. */
function mpirun(ranks: number, script: string, env: Record<string, string> = {}) {
  const run = spawnSync(
    "mpirun",
    ["--allow-run-as-root", "--oversubscribe", "--tag-output", "-np", String(ranks), "node", "--import", "tsx", script],
    { cwd: root, encoding: "utf8", timeout: 90_000, env: { ...process.env, ...env } },
  );
  if (run.error) assert.fail(`mpirun could not run (${run.error.message}): ${INSTALL}`);
  return run;
}

/** Each rank's JSON line from `--tag-output`'s `[job,rank]<stdout>:` lines. */
function resultsByRank(stdout: string): Map<number, Record<string, unknown>> {
  const results = new Map<number, Record<string, unknown>>();
  for (const match of stdout.matchAll(/^\[\d+,(\d+)\]<stdout>:(\{.*\})$/gm))
    results.set(Number(match[1]), JSON.parse(match[2]!));
  return results;
}

test("two ranks under mpirun: allReduce, broadcast, allGather and barrier give every rank the same answer", {
  timeout: 120_000,
}, () => {
  // a slice of 0.25 MB keeps the arrays that span several slices small
  const run = mpirun(2, "test/dist/mpi_ranks.ts", { TSGRAD_MPI_SLICE_MB: "0.25" });
  const failure = `mpirun exited ${run.status} (${run.signal ?? "no signal"}); both ranks' output:\n${run.stdout}\n${run.stderr}`;
  assert.equal(run.status, 0, failure);
  const results = resultsByRank(run.stdout);
  assert.deepEqual([...results.keys()].sort(), [0, 1], failure);
  for (const [rank, result] of results) {
    for (const [check, passed] of Object.entries(result)) {
      if (typeof passed === "boolean") assert.ok(passed, `rank ${rank}: ${check} failed\n${failure}`);
    }
    assert.deepEqual(
      { rank: result.rank, size: result.size, backend: result.backend, launcher: result.launcher },
      { rank, size: 2, backend: "mpi", launcher: "openmpi" },
    );
    assert.match(
      String(result.errorString),
      /^MpiError: MPI_Bcast failed: MPI_ERR_ROOT: invalid root \(MPI error \d+\)$/,
    );
  }
});

test("one process, no launcher: the single-process communicator, every collective the identity", () => {
  const comm = dist.init({});
  assert.deepEqual([comm.backend, comm.rank, comm.size, comm.localRank], ["single", 0, 1, 0]);
  const data = new Float32Array([1, -2, 3]);
  assert.equal(comm.allReduce(data, "mean"), data);
  assert.deepEqual([...comm.allReduce(data, "max")], [1, -2, 3]);
  assert.deepEqual([...comm.broadcast(data, 0)], [1, -2, 3]);
  assert.deepEqual([...comm.allGather(new Int32Array([4, 5]))], [4, 5]);
  assert.throws(() => comm.broadcast(data, 1), /root 1 is not a rank of a world of 1/);
  assert.throws(() => comm.allReduce(new Int32Array(2), "mean"), /mean of an Int32Array/);
  comm.barrier();
  comm.close();
});

test("a missing MPI library names the path tried and how to install it", () => {
  const saved = process.env.TSGRAD_LIBMPI;
  process.env.TSGRAD_LIBMPI = "/nonexistent/libmpi.so.40";
  try {
    assert.throws(loadMpi, (error: Error) => {
      assert.ok(error instanceof MpiError);
      assert.match(error.message, /\/nonexistent\/libmpi\.so\.40/);
      assert.match(error.message, /apt-get install openmpi-bin libopenmpi-dev/);
      return true;
    });
  } finally {
    if (saved === undefined) delete process.env.TSGRAD_LIBMPI;
    else process.env.TSGRAD_LIBMPI = saved;
  }
});

test("ranks started by hand (torchrun's variables, no mpirun): MPI sees one process and init says so", {
  timeout: 60_000,
}, () => {
  const script = `import("./src/index.ts").then(({ dist }) => dist.init());`;
  const run = spawnSync(process.execPath, ["--import", "tsx", "-e", script], {
    cwd: root,
    encoding: "utf8",
    timeout: 30_000,
    env: { ...process.env, RANK: "1", WORLD_SIZE: "2", LOCAL_RANK: "1" },
  });
  assert.notEqual(run.status, 0, "init() must refuse a world MPI does not see");
  assert.match(
    run.stderr,
    /MpiError: the torchrun launcher announced rank 1 of 2, MPI sees rank 0 of 1: start every rank with mpirun/,
  );
});

test("a rank that throws ends the job: the rank waiting in a collective is stopped, mpirun names the rank", {
  timeout: 120_000,
}, () => {
  const start = performance.now();
  const run = mpirun(2, "test/dist/mpi_rank_fails.ts");
  const output = `${run.stdout}\n${run.stderr}`;
  assert.notEqual(run.status, 0, `mpirun must fail:\n${output}`);
  assert.equal(run.signal, null, `mpirun hung until the timeout killed it:\n${output}`);
  assert.match(run.stderr, /rank 1 fails on purpose/);
  assert.match(run.stderr, /Process name: \[\[\d+,1\],1\]/);
  assert.doesNotMatch(run.stdout, /rank 0 finished/);
  assert.ok(performance.now() - start < 60_000, "the job took a minute to stop");
});
