// Data-parallel BERT training across processes (issue 34's acceptance): `mpirun -np 2` of the real trainer
// command against one process with the same global batch, a rank killed mid-run, and its checkpoint resumed
// on another rank count. Needs Open MPI (`npm test` installs it first: test/setup/ensure-mpi.sh).
import { test } from "node:test";
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { demoEnvironment, prepareDemoData } from "../../mlperf/bert/demo.ts";
import { parseKnobs } from "../../mlperf/bert/knobs.ts";
import { parseStepLine } from "../../mlperf/bert/report.ts";
import { trainBert } from "../../mlperf/bert/train.ts";
import { io } from "../../src/index.ts";
import { assertClose } from "../close.ts";
import { TINY, skewedCorpus } from "../trainer/tiny_data.ts";

const root = join(import.meta.dirname, "..", "..");
const dir = mkdtempSync(join(tmpdir(), "tsgrad-dist-train-"));
test.after(() => rmSync(dir, { recursive: true, force: true }));

const data = prepareDemoData(join(dir, "data"), TINY, skewedCorpus(60));
/** Six steps of BERT with one 16-wide layer on the JS device, dropout off (ranks draw their own masks). */
const BASE: Record<string, string> = {
  ...demoEnvironment(dir, data, TINY, 7),
  DEVICE: "JS",
  BEAM: "0",
  RUNMLPERF: "1",
  LOGMLPERF: "0",
  DISABLE_DROPOUT: "1",
  TRAIN_STEPS: "6",
  EVAL_STEP_FREQ: "3",
  TARGET: "1",
  CKPT: "1",
  SAVE_CKPT_FREQ: "6",
  KEEP_CKPT_AMOUNT: "10",
};

interface Run {
  /** Rank 0's loss per step, as printed. */
  losses: number[];
  /** Rank 0's eval accuracies. */
  accuracies: number[];
  /** The output of every rank, by rank. */
  outputs: Map<number, string>;
  status: number | null;
  signal: NodeJS.Signals | null;
  seconds: number;
}

/** `mpirun -np ranks` of the trainer command (train.ts) with `env`; `onLine` sees each tagged output line. */
function mpirunTrainer(
  ranks: number,
  env: Record<string, string>,
  onLine: (rank: number, line: string, child: ChildProcess) => void = () => {},
): Promise<Run> {
  const start = performance.now();
  const child = spawn(
    "mpirun",
    [
      "--allow-run-as-root",
      "--oversubscribe",
      "--tag-output",
      "-np",
      String(ranks),
      "node",
      "--import",
      "tsx",
      "mlperf/bert/train.ts",
    ],
    { cwd: root, env: { ...process.env, ...BASE, ...env }, stdio: ["ignore", "pipe", "pipe"] },
  );
  const run: Run = { losses: [], accuracies: [], outputs: new Map(), status: null, signal: null, seconds: 0 };
  let pending = "";
  const take = (chunk: Buffer) => {
    pending += chunk.toString();
    const lines = pending.split("\n");
    pending = lines.pop()!;
    for (const tagged of lines) {
      const match = /^\[\d+,(\d+)\]<(?:stdout|stderr)>:(.*)$/.exec(tagged);
      const rank = match ? Number(match[1]) : -1;
      const line = match ? match[2]! : tagged;
      run.outputs.set(rank, `${run.outputs.get(rank) ?? ""}${line}\n`);
      const step = rank === 0 ? parseStepLine(line) : null;
      if (step) run.losses.push(step.loss);
      const accuracy = rank === 0 ? /masked-LM accuracy ([\d.]+)/.exec(line) : null;
      if (accuracy) run.accuracies.push(Number(accuracy[1]));
      onLine(rank, line, child);
    }
  };
  child.stdout.on("data", take);
  child.stderr.on("data", take);
  return new Promise((resolve, reject) => {
    child.on("error", (error) =>
      reject(new Error(`mpirun could not run (${error.message}): install Open MPI (apt-get install openmpi-bin)`)),
    );
    child.on("close", (status, signal) => {
      Object.assign(run, { status, signal, seconds: (performance.now() - start) / 1000 });
      resolve(run);
    });
  });
}

/** The same run in this process, printing into `losses`. */
async function inProcess(env: Record<string, string>, splitStep: boolean): Promise<{ losses: number[] }> {
  const losses: number[] = [];
  await trainBert(parseKnobs([], { ...BASE, ...env })!, {
    splitStep,
    print: (line) => {
      const step = parseStepLine(line);
      if (step) losses.push(step.loss);
    },
  });
  return { losses };
}

const checkpoint = (folder: string, step: number) => join(folder, `step_${String(step).padStart(7, "0")}.safe`);
const everything = (run: Run) => [...run.outputs.entries()].map(([rank, text]) => `[rank ${rank}]\n${text}`).join("\n");

test("mpirun -np 2 trains bit for bit as 2 devices in one process, and as 1 device to float32 rounding", {
  timeout: 300_000,
}, async () => {
  const ranks = await mpirunTrainer(2, { GPUS: "1", SAVE_CKPT_DIR: join(dir, "ranks") });
  assert.equal(ranks.status, 0, everything(ranks));
  assert.equal(ranks.losses.length, 6, everything(ranks));
  assert.equal(ranks.accuracies.length, 2, everything(ranks));
  // rank 0 alone speaks and writes: the other rank prints no step line and no checkpoint message
  assert.doesNotMatch(ranks.outputs.get(1) ?? "", /^step \d|saved checkpoint/m);
  assert.match(ranks.outputs.get(0)!, /training on 2 ranks \(mpi, launched by openmpi\)/);
  assert.match(ranks.outputs.get(0)!, /global batch size 8 \(4 a rank\)/);
  // the step line says how long the gradient all-reduce took, and reads back
  const stepLine = ranks.outputs
    .get(0)!
    .split("\n")
    .find((line) => line.startsWith("step 3 "))!;
  assert.match(stepLine, /\| all-reduce \d+\.\d ms$/);
  assert.ok(parseStepLine(stepLine)!.reduceMs! >= 0);
  assert.deepEqual(readdirSync(join(dir, "ranks")), ["step_0000006.safe"]);

  // one process, the batch sharded over 2 devices, the same split step: the same additions in the same order
  const devices = await inProcess({ GPUS: "2", SAVE_CKPT_DIR: join(dir, "devices") }, true);
  assert.deepEqual(
    readFileSync(checkpoint(join(dir, "ranks"), 6)),
    readFileSync(checkpoint(join(dir, "devices"), 6)),
    "weights and optimizer state after 6 steps: 2 ranks vs 2 devices in one process",
  );
  assert.deepEqual(ranks.losses, devices.losses);

  // one process, one device, the usual fused step: the whole batch's sums in another order
  const single = await inProcess({ GPUS: "1", SAVE_CKPT_DIR: join(dir, "single") }, false);
  assertClose(ranks.losses, single.losses, { atol: 1e-4, rtol: 0, what: "losses, 2 ranks vs 1 process" });
  const a = io.readSafetensorsFile(checkpoint(join(dir, "ranks"), 6));
  const b = io.readSafetensorsFile(checkpoint(join(dir, "single"), 6));
  for (const name of Object.keys(a.tensors).filter((n) => !n.startsWith("optimizer.")))
    assertClose(a.tensors[name]!.data as Float32Array, b.tensors[name]!.data as Float32Array, {
      atol: 1e-5,
      rtol: 1e-4,
      what: `${name} after 6 steps, 2 ranks vs 1 process`,
    });
});

test("2 ranks x 2 in-process devices train as 4 devices in one process", { timeout: 300_000 }, async () => {
  const ranks = await mpirunTrainer(2, { GPUS: "2", SAVE_CKPT_DIR: join(dir, "ranks2x2") });
  assert.equal(ranks.status, 0, everything(ranks));
  assert.match(ranks.outputs.get(0)!, /training on 2 ranks .* x JS, JS:1/);
  const devices = await inProcess({ GPUS: "4", SAVE_CKPT_DIR: join(dir, "devices4") }, true);
  assert.equal(ranks.losses.length, 6);
  // the in-process all-reduce adds four gradients in a row, the ranks add two pairs: float32 rounding apart
  assertClose(ranks.losses, devices.losses, { atol: 1e-5, rtol: 0, what: "losses, 2x2 vs 4 devices" });
  const a = io.readSafetensorsFile(checkpoint(join(dir, "ranks2x2"), 6));
  const b = io.readSafetensorsFile(checkpoint(join(dir, "devices4"), 6));
  for (const name of Object.keys(a.tensors))
    assertClose(a.tensors[name]!.data as Float32Array, b.tensors[name]!.data as Float32Array, {
      atol: 1e-6,
      rtol: 1e-4,
      what: `${name}, 2x2 vs 4 devices`,
    });
});

test("killing a rank mid-run ends the job within seconds naming it; its last checkpoint resumes on 1 rank", {
  timeout: 300_000,
}, async () => {
  const folder = join(dir, "killed");
  let killedAt = 0;
  const run = await mpirunTrainer(
    2,
    { GPUS: "1", TRAIN_STEPS: "100000", EVAL_STEP_FREQ: "100000", SAVE_CKPT_FREQ: "2", SAVE_CKPT_DIR: folder },
    (rank, line) => {
      // after the second checkpoint: find rank 1's process by its environment and kill it
      if (killedAt || rank !== 0 || !/saved checkpoint .*step_0000004/.test(line)) return;
      const pid = rankPid(1);
      assert.ok(pid, "rank 1's process");
      killedAt = performance.now();
      process.kill(pid, "SIGKILL");
    },
  );
  assert.ok(killedAt > 0, `no checkpoint at step 4 was saved:\n${everything(run)}`);
  const seconds = (performance.now() - killedAt) / 1000;
  assert.notEqual(run.status, 0, everything(run));
  assert.ok(seconds < 30, `the job took ${seconds.toFixed(1)} s to end after rank 1 died`);
  assert.match(everything(run), /process rank 1 with PID \d+ .*exited on signal 9/, everything(run));
  console.log(
    `the job ended ${seconds.toFixed(1)} s after rank 1 was killed; mpirun said:\n${everything(run)
      .split("\n")
      .filter((l) => /rank 1|signal/.test(l))
      .join("\n")}`,
  );

  const saved = readdirSync(folder)
    .filter((f) => f.endsWith(".safe"))
    .sort();
  assert.ok(saved.length > 0 && !saved.some((f) => f.endsWith(".tmp")));
  const last = join(folder, saved.at(-1)!);
  const lastStep = Number(/step_(\d+)/.exec(last)![1]);
  const resumed = await inProcess(
    { GPUS: "1", RESUME: last, TRAIN_STEPS: String(lastStep + 2), SAVE_CKPT_DIR: join(dir, "resumed") },
    false,
  );
  assert.equal(resumed.losses.length, 2, "two steps after the checkpoint, on one process");
  assert.ok(existsSync(checkpoint(join(dir, "resumed"), lastStep + 2)), "the resumed run's own checkpoint");
});

test("SIGUSR1 to mpirun stops every rank after the same step, with rank 0's checkpoint", {
  timeout: 300_000,
}, async () => {
  const folder = join(dir, "signalled");
  let signalled = false;
  const run = await mpirunTrainer(
    2,
    { GPUS: "1", TRAIN_STEPS: "100000", EVAL_STEP_FREQ: "100000", CKPT: "0", SAVE_CKPT_DIR: folder },
    (rank, line, child) => {
      if (signalled || rank !== 0 || !line.startsWith("step 3 ")) return;
      signalled = true;
      child.kill("SIGUSR1"); // mpirun passes SIGUSR1 on to the ranks
    },
  );
  const stopped = /interrupted at step (\d+); continue with RESUME=(\S+)/.exec(run.outputs.get(0) ?? "");
  assert.ok(stopped, everything(run));
  assert.ok(existsSync(stopped[2]!), "the checkpoint named");
  assert.ok(Number(stopped[1]) >= 3 && Number(stopped[1]) < 100, `stopped at step ${stopped[1]}`);
  // 128 + SIGUSR1: stopped on request, not finished
  assert.notEqual(run.status, 0);
  assert.doesNotMatch(everything(run), /exited on signal/, "no rank was killed");
});

/** The pid of the process that Open MPI started as `rank` (its environment says so), if any. */
function rankPid(rank: number): number | undefined {
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const environ = readFileSync(`/proc/${entry}/environ`, "latin1").split("\0");
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "latin1");
      if (
        environ.includes(`OMPI_COMM_WORLD_RANK=${rank}`) &&
        environ.includes(`SAVE_CKPT_DIR=${join(dir, "killed")}`) &&
        cmdline.includes("mlperf/bert/train.ts")
      )
        return Number(entry);
    } catch {
      // a process that ended or is not ours
    }
  }
  return undefined;
}
