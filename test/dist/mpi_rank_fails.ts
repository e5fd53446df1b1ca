// A rank that throws while the other waits in a collective (run by test/dist/mpi.test.ts under mpirun).
import { dist } from "../../src/index.ts";

const comm = dist.init();
if (comm.rank === 1) throw new Error("rank 1 fails on purpose");
comm.allReduce(new Float32Array(10));
console.log("rank 0 finished a collective that rank 1 never joined");
