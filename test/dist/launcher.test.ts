// worldFromEnv: each launcher's variables give rank, world size and local rank; inconsistent ones an error
// naming the variable and its value.
import { test } from "node:test";
import assert from "node:assert/strict";
import { worldFromEnv } from "../../src/dist/launcher.ts";
import { TsgradError } from "../../src/helpers.ts";

test("no launcher's variables: one process, rank 0", () => {
  assert.deepEqual(worldFromEnv({ PATH: "/usr/bin" }), { launcher: "none", rank: 0, size: 1, localRank: 0 });
});

test("Open MPI's mpirun: OMPI_COMM_WORLD_RANK, _SIZE and _LOCAL_RANK", () => {
  const env = { OMPI_COMM_WORLD_RANK: "3", OMPI_COMM_WORLD_SIZE: "4", OMPI_COMM_WORLD_LOCAL_RANK: "1" };
  assert.deepEqual(worldFromEnv(env), { launcher: "openmpi", rank: 3, size: 4, localRank: 1 });
});

test("MPICH's Hydra: PMI_RANK, PMI_SIZE and MPI_LOCALRANKID", () => {
  const env = { PMI_RANK: "5", PMI_SIZE: "8", MPI_LOCALRANKID: "1" };
  assert.deepEqual(worldFromEnv(env), { launcher: "mpich", rank: 5, size: 8, localRank: 1 });
});

test("a PMI launcher without MPI_LOCALRANKID: the local rank is the rank (one machine)", () => {
  assert.deepEqual(worldFromEnv({ PMI_RANK: "1", PMI_SIZE: "2" }), {
    launcher: "mpich",
    rank: 1,
    size: 2,
    localRank: 1,
  });
});

test("Slurm's srun: SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID", () => {
  const env = { SLURM_PROCID: "6", SLURM_NTASKS: "16", SLURM_LOCALID: "2" };
  assert.deepEqual(worldFromEnv(env), { launcher: "slurm", rank: 6, size: 16, localRank: 2 });
});

test("torchrun: RANK, WORLD_SIZE and LOCAL_RANK", () => {
  const env = { RANK: "2", WORLD_SIZE: "4", LOCAL_RANK: "0", MASTER_ADDR: "node0", MASTER_PORT: "29500" };
  assert.deepEqual(worldFromEnv(env), { launcher: "torchrun", rank: 2, size: 4, localRank: 0 });
});

test("mpirun inside a Slurm job: the launcher that started the process wins over the allocation's", () => {
  const env = {
    SLURM_PROCID: "0",
    SLURM_NTASKS: "1",
    SLURM_LOCALID: "0",
    OMPI_COMM_WORLD_RANK: "1",
    OMPI_COMM_WORLD_SIZE: "2",
    OMPI_COMM_WORLD_LOCAL_RANK: "1",
  };
  assert.deepEqual(worldFromEnv(env), { launcher: "openmpi", rank: 1, size: 2, localRank: 1 });
});

test("a shell inside an allocation (the size alone, no rank) is one process", () => {
  assert.deepEqual(worldFromEnv({ SLURM_NTASKS: "4" }), { launcher: "none", rank: 0, size: 1, localRank: 0 });
});

/** Asserts that `env` is refused with a TsgradError whose message holds every one of `words`. */
function refused(env: Record<string, string>, ...words: string[]): void {
  assert.throws(
    () => worldFromEnv(env),
    (error: Error) => {
      assert.ok(error instanceof TsgradError, `not a TsgradError: ${error}`);
      for (const word of words) assert.ok(error.message.includes(word), `"${error.message}" lacks "${word}"`);
      return true;
    },
  );
}

test("a rank or local rank not less than the world size is refused, naming both", () => {
  refused({ RANK: "2", WORLD_SIZE: "2", LOCAL_RANK: "0" }, "RANK=2", "WORLD_SIZE=2");
  refused({ SLURM_PROCID: "0", SLURM_NTASKS: "2", SLURM_LOCALID: "2" }, "SLURM_LOCALID=2", "SLURM_NTASKS=2");
});

test("a value that is not a non-negative integer is refused, naming the variable and value", () => {
  refused({ PMI_RANK: "one", PMI_SIZE: "2" }, 'PMI_RANK="one"');
  refused({ OMPI_COMM_WORLD_RANK: "0", OMPI_COMM_WORLD_SIZE: "2.5", OMPI_COMM_WORLD_LOCAL_RANK: "0" }, '"2.5"');
  refused({ RANK: "-1", WORLD_SIZE: "2", LOCAL_RANK: "0" }, 'RANK="-1"');
  refused({ RANK: "0", WORLD_SIZE: "0", LOCAL_RANK: "0" }, "WORLD_SIZE=0");
});

test("a partial set is refused, naming the missing variable and those set", () => {
  refused({ OMPI_COMM_WORLD_RANK: "0", OMPI_COMM_WORLD_LOCAL_RANK: "0" }, "OMPI_COMM_WORLD_SIZE is not set");
  refused({ RANK: "0", WORLD_SIZE: "2" }, "LOCAL_RANK is not set", "RANK=0", "WORLD_SIZE=2");
  refused({ LOCAL_RANK: "0" }, "RANK is not set");
});
