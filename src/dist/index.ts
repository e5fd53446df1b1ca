// Several processes, on one machine or many: who this process is among them, and collectives between them.
import { type Communicator, SingleProcess } from "./communicator.ts";
import { worldFromEnv } from "./launcher.ts";
import { MpiCommunicator } from "./mpi.ts";

export type { Communicator, HostArray, ReduceOp } from "./communicator.ts";
export type { Launcher, World } from "./launcher.ts";
export { worldFromEnv } from "./launcher.ts";
export { MpiError } from "./mpi_library.ts";
export { NcclCommunicator } from "./nccl.ts";
export { NcclError } from "./nccl_library.ts";
export { DEFAULT_BUCKET_MB, allReduceTensors, broadcastTensors } from "./tensors.ts";

/**
 * The communicator for this process: one process (world size 1) needs no library; a job started by a
 * launcher (mpirun, srun) talks through MPI.
 */
export function init(env: Record<string, string | undefined> = process.env): Communicator {
  const world = worldFromEnv(env);
  if (world.size === 1) return new SingleProcess(world.launcher);
  return MpiCommunicator.open(world);
}
