// What the examples share: a seeded generator for their data, the jitted classification step and the loop
// around it, and a command line that reports a bad flag or a missing file by its message.
import { Tensor, TsgradError, jit, nn } from "../src/index.ts";

/** A small deterministic generator (mulberry32): batches and samples repeat run to run. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * `steps` AdamW steps of `model` on the cross-entropy of its logits against integer labels, one batch from
 * `nextBatch` each, in training mode (dropout, batch statistics), as one jitted step (captured on the second
 * call, replayed after). Returns each step's loss.
 */
export function trainClassifier(
  model: { forward(x: Tensor): Tensor },
  {
    steps,
    lr,
    weightDecay,
    nextBatch,
    onStep,
  }: {
    steps: number;
    lr: number;
    weightDecay: number;
    nextBatch: () => { x: Tensor; y: Tensor };
    onStep?: (step: number, loss: number) => void;
  },
): number[] {
  const optimizer = new nn.AdamW(nn.getParameters(model), { lr, weightDecay });
  const step = jit((x: Tensor, y: Tensor): Tensor => {
    optimizer.zeroGrad();
    const loss = model.forward(x).sparseCategoricalCrossentropy(y);
    loss.backward();
    Tensor.realizeAll([loss, ...optimizer.scheduleStep()]);
    return loss;
  });
  const losses: number[] = [];
  Tensor.training = true;
  try {
    for (let i = 1; i <= steps; i++) {
      const { x, y } = nextBatch();
      losses.push(step(x, y).item());
      onStep?.(i, losses[losses.length - 1]!);
    }
  } finally {
    Tensor.training = false;
  }
  return losses;
}

/**
 * Runs an example's `main` when its file is the script run: a bad flag or a missing file prints its message (exit 2),
 * not a stack trace.
 */
export async function runExample(url: string, name: string, main: () => Promise<void>): Promise<void> {
  if (process.argv[1] !== new URL(url).pathname) return;
  try {
    await main();
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? "";
    if (!(e instanceof TsgradError) && code !== "ENOENT" && !code.startsWith("ERR_PARSE_ARGS")) throw e;
    console.error(`${name}: ${(e as Error).message}`);
    process.exitCode = 2;
  }
}
