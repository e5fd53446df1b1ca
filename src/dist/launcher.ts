// Which process of how many: the launcher that started this process says so in environment variables.
// Open MPI, MPICH (Hydra/PMI), Slurm's srun and torchrun each use their own names; none set is one process.
import { TsgradError } from "../helpers.ts";

export type Launcher = "openmpi" | "mpich" | "torchrun" | "slurm" | "none";

/** This process's place among the processes of one job. */
export interface World {
  launcher: Launcher;
  rank: number;
  size: number;
  /** The rank among the processes on this machine: which local GPU to use. */
  localRank: number;
}

type Env = Record<string, string | undefined>;

/** Each launcher's variables; `localOptional`: the launcher may leave the local rank unset (then it is the rank). */
const LAUNCHERS: { launcher: Launcher; rank: string; size: string; localRank: string; localOptional?: boolean }[] = [
  // innermost first: a job step inherits its allocation's variables (Slurm's last of all), so the
  // launcher that started this very process is the most specific one set
  {
    launcher: "openmpi",
    rank: "OMPI_COMM_WORLD_RANK",
    size: "OMPI_COMM_WORLD_SIZE",
    localRank: "OMPI_COMM_WORLD_LOCAL_RANK",
  },
  // Hydra sets MPI_LOCALRANKID, other PMI launchers may not
  { launcher: "mpich", rank: "PMI_RANK", size: "PMI_SIZE", localRank: "MPI_LOCALRANKID", localOptional: true },
  { launcher: "torchrun", rank: "RANK", size: "WORLD_SIZE", localRank: "LOCAL_RANK" },
  { launcher: "slurm", rank: "SLURM_PROCID", size: "SLURM_NTASKS", localRank: "SLURM_LOCALID" },
];

/** A variable's value as a non-negative integer, or an error naming it. */
function integer(env: Env, name: string): number {
  const raw = env[name]!;
  if (!/^\d+$/.test(raw.trim())) throw new TsgradError(`${name}=${JSON.stringify(raw)} is not a non-negative integer`);
  return Number(raw);
}

/**
 * Rank, world size and local rank from the launcher's environment; world size 1 where no launcher is seen.
 * A launcher is seen by its per-process variables (rank, local rank): an allocation exports only the size
 * to shells that are not ranks (salloc, a batch script).
 */
export function worldFromEnv(env: Env = process.env): World {
  const set = (name: string) => env[name] !== undefined && env[name] !== "";
  for (const names of LAUNCHERS) {
    if (!set(names.rank) && !set(names.localRank)) continue;
    for (const name of [names.rank, names.size, ...(names.localOptional ? [] : [names.localRank])])
      if (!set(name)) throw new TsgradError(`${names.launcher} launcher: ${name} is not set (${describe(env, names)})`);
    const rank = integer(env, names.rank);
    const size = integer(env, names.size);
    const localRank = set(names.localRank) ? integer(env, names.localRank) : rank;
    if (size < 1) throw new TsgradError(`${names.size}=${size}: a world has at least one process`);
    if (rank >= size) throw new TsgradError(`${names.rank}=${rank} is not less than ${names.size}=${size}`);
    if (localRank >= size)
      throw new TsgradError(`${names.localRank}=${localRank} is not less than ${names.size}=${size}`);
    return { launcher: names.launcher, rank, size, localRank };
  }
  return { launcher: "none", rank: 0, size: 1, localRank: 0 };
}

/** The launcher's variables as set, for error messages. */
function describe(env: Env, names: { rank: string; size: string; localRank: string }): string {
  return [names.rank, names.size, names.localRank].map((name) => `${name}=${env[name] ?? "(unset)"}`).join(", ");
}
