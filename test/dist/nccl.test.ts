// The NCCL binding without a GPU: a stand-in library with NCCL's C ABI (fake_nccl.c, built here with cc)
// takes the calls, so the signatures, the id passed by value, the enums, groups and error strings are
// exercised across two real ranks. The real NCCL on GPUs is checked by bench/gpu-check.sh.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NcclCommunicator } from "../../src/dist/nccl.ts";
import { NcclError, candidatePaths, loadNccl, versionString } from "../../src/dist/nccl_library.ts";

const root = join(import.meta.dirname, "..", "..");
const dir = mkdtempSync(join(tmpdir(), "tsgrad-nccl-"));
test.after(() => rmSync(dir, { recursive: true, force: true }));
const fake = join(dir, "libnccl.so.2");
execFileSync("cc", ["-shared", "-fPIC", "-O1", "-o", fake, join(import.meta.dirname, "fake_nccl.c")]);

test("NCCL is looked for where CUDA and PyTorch put it; a missing one names every place tried", () => {
  const paths = candidatePaths({ VIRTUAL_ENV: "/nonexistent/venv" });
  assert.equal(paths[0], "libnccl.so.2");
  assert.ok(paths.includes("/usr/local/cuda/lib64/libnccl.so.2"));
  assert.deepEqual(candidatePaths({ TSGRAD_LIBNCCL: "/x/libnccl.so.2" }), ["/x/libnccl.so.2"]);
  assert.throws(
    () => loadNccl({ TSGRAD_LIBNCCL: "/nonexistent/libnccl.so.2" }),
    (error: Error) =>
      error instanceof NcclError &&
      /tried \/nonexistent\/libnccl\.so\.2 \(absent\)/.test(error.message) &&
      /TSGRAD_LIBNCCL/.test(error.message) &&
      /TSGRAD_NCCL=0/.test(error.message),
  );
  assert.equal(versionString(21805), "2.18.5");
  assert.equal(versionString(2708), "2.7.8");
});

test("one rank through a file rendezvous: NCCL's errors come back in its words, naming the call", () => {
  process.env.TSGRAD_LIBNCCL = fake;
  process.env.FAKE_NCCL_DIR = dir;
  try {
    const nccl = NcclCommunicator.open(
      0,
      1,
      { stream: null, activate: () => {} },
      {
        kind: "file",
        path: join(dir, "single.id"),
      },
    );
    assert.deepEqual(nccl.library, { version: "2.18.5", path: fake });
    // the stand-in, as a real NCCL build may, refuses float16 sums
    assert.throws(
      () => nccl.allReduce([{ pointer: 0n, count: 4, type: "float16" }], "sum"),
      /^NcclError: ncclAllReduce \(rank 0 of 1\) failed: invalid argument .*\(ncclResult 4\)$/,
    );
    nccl.close();
    assert.throws(() => nccl.broadcast(0n, 1, "float32"), /the communicator is closed/);
  } finally {
    delete process.env.TSGRAD_LIBNCCL;
    delete process.env.FAKE_NCCL_DIR;
  }
});

test("two ranks under mpirun: NCCL's id over MPI and through a file, every collective right on each rank", {
  timeout: 120_000,
}, () => {
  const run = spawnSync(
    "mpirun",
    [
      "--allow-run-as-root",
      "--oversubscribe",
      "--tag-output",
      "-np",
      "2",
      "node",
      "--import",
      "tsx",
      "test/dist/nccl_ranks.ts",
    ],
    {
      cwd: root,
      encoding: "utf8",
      timeout: 90_000,
      env: { ...process.env, TSGRAD_LIBNCCL: fake, FAKE_NCCL_DIR: dir, NCCL_ID_FILE: join(dir, "pair.id") },
    },
  );
  const output = `${run.stdout}\n${run.stderr}`;
  assert.equal(run.status, 0, output);
  const results = [...run.stdout.matchAll(/^\[\d+,(\d+)\]<stdout>:(\{.*\})$/gm)].map((m) => JSON.parse(m[2]!));
  assert.equal(results.length, 2, output);
  for (const result of results) {
    for (const [check, passed] of Object.entries(result))
      if (typeof passed === "boolean") assert.ok(passed, `rank ${result.rank}: ${check}\n${output}`);
    assert.equal(result.host_version, "2.18.5");
    assert.equal(Object.values(result).filter((v) => v === true).length, 12, output);
  }
});
