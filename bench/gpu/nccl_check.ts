// NCCL on a real GPU, one rank (NCCL refuses two ranks on one GPU): the library found where PyTorch's
// nvidia-nccl wheel puts it (or TSGRAD_LIBNCCL), a world of one joined through a file rendezvous, and
// all-reduces of a CUDA tensor queued on tsgrad's stream between the kernel that wrote it and the one that
// reads it: the values must come back unchanged (sum, max and mean over one rank). Prints one JSON object.
// Usage: node nccl_check.mjs
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, Tensor, dist } from "../../src/index.ts";
import { buffersOf } from "../../src/tensor/index.ts";
import { argsWithUsage } from "../args.ts";

argsWithUsage(
  "Usage: node nccl_check.mjs   (no options; all-reduces of a CUDA tensor through NCCL in a world of one rank,\n" +
    "the library from TSGRAD_LIBNCCL or PyTorch's nvidia-nccl wheel; prints one JSON object)",
  {},
);

const dir = mkdtempSync(join(tmpdir(), "nccl-check-"));
const result: Record<string, unknown> = {};
try {
  const native = Device.allocator("CUDA").native!;
  const nccl = dist.NcclCommunicator.open(0, 1, native, { kind: "file", path: join(dir, "id") });
  result.library = nccl.library;
  const n = 1 << 20;
  for (const op of ["sum", "max", "mean"] as const) {
    // written by a kernel on the stream, reduced by NCCL on it, read by the next kernel
    const t = Tensor.arange(n, undefined, 1, { device: "CUDA" }).mul(0.5).contiguous().realize();
    const buffer = buffersOf(t)![0]!;
    nccl.allReduce([{ pointer: native.pointer(buffer.handle), count: n, type: "float32" }], op);
    buffer.version++;
    const back = t.add(1).toArray() as Float32Array;
    result[op] = back.every((v, i) => v === i * 0.5 + 1);
  }
  nccl.close();
  result.ok = ["sum", "max", "mean"].every((op) => result[op] === true);
} catch (error) {
  result.ok = false;
  result.error = String(error);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(JSON.stringify(result));
