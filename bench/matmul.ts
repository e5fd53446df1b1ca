// float32 matmul GFLOP/s on the CPU device (BEAM=0 and BEAM=2, 1 and 2 threads) beside numpy's OpenBLAS
// sgemm on the same shapes in the same run. Prints JSON on stdout, progress on stderr. Medians of --reps runs;
// tsgrad figures are kernel time (what DEBUG=2 reports) and, as `_wall`, the whole call's (the graph, its
// schedule, memory and kernels), numpy's the time of np.matmul. Each (BEAM, THREADS) runs in its own process:
// kernels are chosen once per process, as in a real run.
import { spawnSync } from "node:child_process";
import { argsWithUsage } from "./args.ts";
import { GlobalCounters, Tensor, tidy } from "../src/index.ts";
import { jit } from "../src/tensor/index.ts";
import { waitForFinalBuilds } from "../src/runtime/compile_tiers.ts";

interface Shape {
  readonly name: string;
  readonly batch: number;
  readonly m: number;
  readonly k: number;
  readonly n: number;
  /** How the operands are stored: "nt" keeps b as [n, k] (a linear layer's weight), "tn" keeps a as [k, m]. */
  readonly layout?: "nt" | "tn";
}

const SHAPES: readonly Shape[] = [
  { name: "512^3", batch: 1, m: 512, k: 512, n: 512 },
  { name: "1024^3", batch: 1, m: 1024, k: 1024, n: 1024 },
  { name: "2048^3", batch: 1, m: 2048, k: 2048, n: 2048 },
  { name: "bert_ffn_in 1024x768x3072", batch: 1, m: 1024, k: 768, n: 3072 },
  { name: "bert_ffn_out 1024x3072x768", batch: 1, m: 1024, k: 3072, n: 768 },
  { name: "bert_proj 1024x768x768", batch: 1, m: 1024, k: 768, n: 768 },
  // a linear layer's forward, x @ W^T with W stored [out, in]
  { name: "bert_linear_nt 1024x768x3072", batch: 1, m: 1024, k: 768, n: 3072, layout: "nt" },
  // BERT-large's linear layers: W's rows 4 KB (1024 floats) or 16 KB apart, a stride that aliases in L1
  { name: "large_ffn_in_nt 1024x1024x4096", batch: 1, m: 1024, k: 1024, n: 4096, layout: "nt" },
  { name: "large_ffn_out_nt 1024x4096x1024", batch: 1, m: 1024, k: 4096, n: 1024, layout: "nt" },
  // BERT-mini's FFN (hidden 256): a short sum (256) with a wide output, and the reverse
  { name: "mini_ffn_in_nt 1024x256x1024", batch: 1, m: 1024, k: 256, n: 1024, layout: "nt" },
  { name: "mini_ffn_out_nt 1024x1024x256", batch: 1, m: 1024, k: 1024, n: 256, layout: "nt" },
  { name: "bert_attention 96x(128x64@64x128)", batch: 96, m: 128, k: 64, n: 128 },
  // BERT-tiny's masked-LM head (160 masked positions, hidden 128, 30522 words): logits h @ W^T, the tied
  // weight's gradient g^T @ h, the hidden state's gradient g @ W (a reduce 30522 long)
  { name: "mlm_logits 160x128x30522", batch: 1, m: 160, k: 128, n: 30522, layout: "nt" },
  { name: "mlm_weight_grad 30522x160x128", batch: 1, m: 30522, k: 160, n: 128, layout: "tn" },
  // BERT-base's (hidden 768): g (19.5 MB) beyond a last-level cache's share, h (480 KB) beyond a core's
  { name: "base_mlm_weight_grad 30522x160x768", batch: 1, m: 30522, k: 160, n: 768, layout: "tn" },
  // an output width 16 (the tile's lanes) does not divide
  { name: "ragged_nn 1024x768x1000", batch: 1, m: 1024, k: 768, n: 1000 },
  { name: "ragged_nt 1024x768x1000", batch: 1, m: 1024, k: 768, n: 1000, layout: "nt" },
  { name: "mlm_hidden_grad 160x30522x128", batch: 1, m: 160, k: 30522, n: 128 },
  // BERT-large's logits: the tied weight's rows 4 KB apart (aliasing lanes) over a vocabulary 16 does not divide
  { name: "large_mlm_logits 160x1024x30522", batch: 1, m: 160, k: 1024, n: 30522, layout: "nt" },
  // bench/bert-step.ts's BERT-large step (batch 1): 76 masked positions, 16 does not divide them
  { name: "large_b1_mlm_logits 76x1024x30522", batch: 1, m: 76, k: 1024, n: 30522, layout: "nt" },
];

const HELP = `usage: tsx bench/matmul.ts [--reps N] [--beam 0,2] [--threads 1,2] [--shapes 512^3,1024^3] [--no-numpy] [--jit] [--no-tidy]

Times float32 matmuls on the CPU device for each BEAM and THREADS value, and numpy (OpenBLAS)
on the same shapes, and prints JSON: GFLOP/s medians per shape and configuration (by kernel time,
and as \`_wall\` by the whole call's), and the ratio of each tsgrad figure to numpy's with the same
thread count. Eager by default: new input tensors every call, each call inside tidy(), which gives
its tensors' memory back when it returns (as numpy's loop frees its arrays); --no-tidy keeps every
call's tensors (nothing is freed within the synchronous loop: fresh memory every call); --jit
replays one captured product on the same buffers, as a training step does.
Shapes: ${SHAPES.map((s) => s.name.split(" ")[0]).join(", ")}`;

const median = (xs: readonly number[]): number => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

const flopsOf = (s: Shape): number => 2 * s.batch * s.m * s.k * s.n;

/** Deterministic inputs in [-1, 1). */
function data(count: number, seed: number): Float32Array {
  let state = seed >>> 0;
  return Float32Array.from({ length: count }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 31 - 1;
  });
}

/** GFLOP/s of each run, by kernel time and by the call's wall time. */
interface Runs {
  readonly kernel: number[];
  readonly wall: number[];
}

/**
 * GFLOP/s of each run. Eager: new input tensors every time, so nothing is reused from an earlier realize; each
 * call inside tidy() (its memory back to the pool after it) unless `keepAll`, where every call's tensors stay and
 * all memory is fresh. Jitted: one captured product replayed on the same buffers, as a training step runs.
 */
function timeTsgrad(shape: Shape, reps: number, jitted: boolean, keepAll: boolean): Runs {
  const dims = (r: number, c: number) => (shape.batch > 1 ? [shape.batch, r, c] : [r, c]);
  const a = data(shape.batch * shape.m * shape.k, 1);
  const b = data(shape.batch * shape.k * shape.n, 2);
  const inputs = (): [Tensor, Tensor] => {
    const x = new Tensor(a, { device: "CPU" }).reshape(
      shape.layout === "tn" ? dims(shape.k, shape.m) : dims(shape.m, shape.k),
    );
    const w = new Tensor(b, { device: "CPU" }).reshape(
      shape.layout === "nt" ? dims(shape.n, shape.k) : dims(shape.k, shape.n),
    );
    Tensor.realizeAll([x, w]);
    return [x, w];
  };
  const product = (x: Tensor, w: Tensor): Tensor =>
    (shape.layout === "tn" ? x.transpose(-1, -2) : x).matmul(shape.layout === "nt" ? w.transpose(-1, -2) : w);
  const runs: Runs = { kernel: [], wall: [] };
  const timed = (call: () => void): void => {
    GlobalCounters.reset();
    const start = performance.now();
    call();
    runs.wall.push(flopsOf(shape) / ((performance.now() - start) * 1e6));
    runs.kernel.push(flopsOf(shape) / GlobalCounters.timeSumS / 1e9);
  };
  if (jitted) {
    const [x, w] = inputs();
    const step = jit(product);
    // the first call compiles (and searches, with BEAM), the second captures: neither is timed
    for (let rep = 0; rep < 2; rep++) step(x, w).realize();
    waitForFinalBuilds(); // a cold cache's first calls run quick -O1 builds: time the -O3 ones
    for (let rep = 0; rep < reps; rep++) timed(() => step(x, w).realize());
    return runs;
  }
  // the first run compiles (and searches, with BEAM): not timed
  product(...inputs()).realize();
  waitForFinalBuilds();
  for (let rep = 0; rep < reps; rep++) {
    const call = (): void => {
      const [x, w] = inputs();
      timed(() => product(x, w).realize());
    };
    if (keepAll) call();
    else tidy(call);
  }
  return runs;
}

const NUMPY_SCRIPT = `
import json, sys, time
import numpy as np
shapes, reps = json.loads(sys.argv[1]), int(sys.argv[2])
out = {}
rng = np.random.default_rng(0)
for s in shapes:
    dims = lambda r, c: (s["batch"], r, c) if s["batch"] > 1 else (r, c)
    layout = s.get("layout")
    a = rng.standard_normal(dims(s["k"], s["m"]) if layout == "tn" else dims(s["m"], s["k"]), dtype=np.float32)
    b = rng.standard_normal(dims(s["n"], s["k"]) if layout == "nt" else dims(s["k"], s["n"]), dtype=np.float32)
    if layout == "tn": a = np.swapaxes(a, -1, -2)
    if layout == "nt": b = np.swapaxes(b, -1, -2)
    np.matmul(a, b)
    runs = []
    for _ in range(reps):
        t = time.perf_counter(); np.matmul(a, b); runs.append(time.perf_counter() - t)
    out[s["name"]] = [2 * s["batch"] * s["m"] * s["k"] * s["n"] / r / 1e9 for r in runs]
print(json.dumps(out))
`;

/** numpy's GFLOP/s per shape with `threads` OpenBLAS threads, or undefined when numpy is missing. */
function timeNumpy(shapes: readonly Shape[], reps: number, threads: number): Record<string, number[]> | undefined {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    OPENBLAS_NUM_THREADS: String(threads),
    OMP_NUM_THREADS: String(threads),
  };
  // OpenBLAS picks its fastest kernels with these unset
  delete env.OPENBLAS_CORETYPE;
  delete env.OPENBLAS_L2_SIZE;
  const result = spawnSync("python3", ["-c", NUMPY_SCRIPT, JSON.stringify(shapes), String(reps)], {
    env,
    encoding: "utf8",
  });
  if (result.status !== 0) {
    console.error(`numpy reference unavailable: ${result.stderr.trim().split("\n").pop()}`);
    return undefined;
  }
  return JSON.parse(result.stdout) as Record<string, number[]>;
}

function main(): void {
  const { values } = argsWithUsage(HELP, {
    reps: { type: "string", default: "3" },
    beam: { type: "string", default: "0,2" },
    threads: { type: "string", default: "1,2" },
    shapes: { type: "string" },
    "no-numpy": { type: "boolean", default: false },
    jit: { type: "boolean", default: false },
    "no-tidy": { type: "boolean", default: false },
    worker: { type: "boolean", default: false },
  });
  const reps = Number(values.reps);
  const beams = values.beam!.split(",").map(Number);
  const threadCounts = values.threads!.split(",").map(Number);
  const wanted = values.shapes?.split(",");
  const shapes = wanted ? SHAPES.filter((s) => wanted.includes(s.name.split(" ")[0]!)) : SHAPES;
  if (shapes.length === 0 || !Number.isInteger(reps) || reps < 1) {
    console.error(HELP);
    process.exitCode = 2;
    return;
  }

  if (values.worker) {
    // one configuration, set by the parent through BEAM and THREADS
    console.log(
      JSON.stringify(
        Object.fromEntries(
          shapes.map((s) => {
            console.error(`tsgrad BEAM=${process.env.BEAM} THREADS=${process.env.THREADS} ${s.name}`);
            return [s.name, timeTsgrad(s, reps, values.jit === true, values["no-tidy"] === true)];
          }),
        ),
      ),
    );
    return;
  }

  const table: Record<string, Record<string, number>> = Object.fromEntries(shapes.map((s) => [s.name, {}]));
  for (const threads of threadCounts) {
    if (!values["no-numpy"]) {
      console.error(`numpy, ${threads} thread(s)`);
      const numpy = timeNumpy(shapes, reps, threads);
      if (numpy) for (const s of shapes) table[s.name]![`numpy_t${threads}`] = median(numpy[s.name]!);
    }
    for (const beam of beams) {
      const args = [
        "--import",
        "tsx",
        process.argv[1]!,
        "--worker",
        "--reps",
        String(reps),
        "--shapes",
        shapes.map((s) => s.name.split(" ")[0]).join(","),
        ...(values.jit ? ["--jit"] : []),
        ...(values["no-tidy"] ? ["--no-tidy"] : []),
      ];
      const env = { ...process.env, BEAM: String(beam), THREADS: String(threads) };
      const worker = spawnSync(process.execPath, args, { env, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
      if (worker.status !== 0) throw new Error(`BEAM=${beam} THREADS=${threads} run failed (exit ${worker.status})`);
      const runs = JSON.parse(worker.stdout) as Record<string, Runs>;
      for (const s of shapes) {
        table[s.name]![`beam${beam}_t${threads}`] = median(runs[s.name]!.kernel);
        table[s.name]![`beam${beam}_t${threads}_wall`] = median(runs[s.name]!.wall);
      }
    }
  }
  const round = (x: number) => Math.round(x * 100) / 100;
  const results = shapes.map((s) => {
    const gflops = Object.fromEntries(Object.entries(table[s.name]!).map(([k, v]) => [k, round(v)]));
    const ratioToNumpy = Object.fromEntries(
      Object.entries(table[s.name]!).flatMap(([k, v]) => {
        const numpy = table[s.name]![`numpy_${k.split("_")[1]}`];
        return k.startsWith("beam") && numpy ? [[k, round(v / numpy)]] : [];
      }),
    );
    return { shape: s.name, batch: s.batch, m: s.m, k: s.k, n: s.n, layout: s.layout ?? "nn", gflops, ratioToNumpy };
  });
  const mode = values.jit
    ? "jitted (one captured product replayed on the same buffers)"
    : values["no-tidy"]
      ? "eager, every call's tensors kept (fresh memory every call)"
      : "eager (new inputs every call, each call in tidy())";
  console.log(
    JSON.stringify(
      { note: "medians; kernel time for tsgrad, _wall the whole call's; shared machine, noisy", mode, reps, results },
      null,
      2,
    ),
  );
}

main();
