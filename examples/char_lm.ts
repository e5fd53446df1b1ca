// tsgrad as a library, outside the BERT benchmark: a small GPT (a decoder-only transformer) that learns to
// write like a text, one character at a time. Everything a training script of one's own needs is here:
// layers from `nn`, a causal attention mask, a jitted train step (the kernels are captured on the second
// call and replayed after), AdamW, a checkpoint in safetensors, and sampling from the model.
//
//   npx tsx examples/char_lm.ts                       # learns from this repository's README
//   npx tsx examples/char_lm.ts --text FILE --steps 2000 --save lm.safe
//   npx tsx examples/char_lm.ts --load lm.safe --prompt "Once " --sample 500
//   DEVICE=JS npx tsx examples/char_lm.ts --steps 50  # any device; DEBUG=2 shows the kernels
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Tensor, TsgradError, dtypes, jit, nn } from "../src/index.ts";
import { runExample, seededRandom, trainClassifier } from "./training.ts";

/** The characters of a text (or a list of them, in order: a saved model's), each an id. */
export class CharVocab {
  readonly chars: string[];
  private readonly ids: Map<string, number>;
  constructor(source: string | readonly string[]) {
    this.chars = typeof source === "string" ? [...new Set(source)].sort() : [...source];
    this.ids = new Map(this.chars.map((c, i) => [c, i]));
  }
  get size(): number {
    return this.chars.length;
  }
  encode(text: string): Int32Array {
    return Int32Array.from(text, (c) => {
      const id = this.ids.get(c);
      if (id === undefined) throw new TsgradError(`character ${JSON.stringify(c)} is not in the vocabulary`);
      return id;
    });
  }
  decode(ids: Iterable<number>): string {
    return Array.from(ids, (i) => this.chars[i]!).join("");
  }
}

export interface CharLmConfig {
  vocab: number;
  /** Characters the model sees at once. */
  context: number;
  dim: number;
  heads: number;
  layers: number;
}

/** Pre-norm transformer block: causal self-attention, then a GELU MLP, each added to the residual stream. */
class Block {
  readonly attnNorm: nn.LayerNorm;
  readonly qkv: nn.Linear;
  readonly proj: nn.Linear;
  readonly mlpNorm: nn.LayerNorm;
  readonly up: nn.Linear;
  readonly down: nn.Linear;
  constructor(
    readonly dim: number,
    readonly heads: number,
  ) {
    this.attnNorm = new nn.LayerNorm(dim);
    this.qkv = new nn.Linear(dim, 3 * dim);
    this.proj = new nn.Linear(dim, dim);
    this.mlpNorm = new nn.LayerNorm(dim);
    this.up = new nn.Linear(dim, 4 * dim);
    this.down = new nn.Linear(4 * dim, dim);
  }
  forward(x: Tensor, causal: Tensor): Tensor {
    const [batch, time] = x.shape as [number, number, number];
    // [batch, time, 3 * dim] -> q, k, v as [batch, heads, time, dim / heads]
    const qkv = this.qkv
      .forward(this.attnNorm.forward(x))
      .reshape([batch, time, 3, this.heads, this.dim / this.heads])
      .permute([2, 0, 3, 1, 4]);
    const [q, k, v] = [0, 1, 2].map((i) => qkv.index(i)) as [Tensor, Tensor, Tensor];
    const attended = q
      .scaledDotProductAttention(k, v, { mask: causal })
      .permute([0, 2, 1, 3])
      .reshape([batch, time, this.dim]);
    const h = x.add(this.proj.forward(attended));
    return h.add(this.down.forward(this.up.forward(this.mlpNorm.forward(h)).gelu()));
  }
}

export class CharLm {
  readonly tokens: nn.Embedding;
  readonly positions: nn.Embedding;
  readonly blocks: Block[];
  readonly norm: nn.LayerNorm;
  readonly head: nn.Linear;
  constructor(readonly config: CharLmConfig) {
    const { vocab, context, dim, heads, layers } = config;
    if (dim % heads !== 0) throw new TsgradError(`CharLm: dim ${dim} is not a multiple of heads ${heads}`);
    // every parameter initialised in one schedule (one compile), not one at a time
    [this.tokens, this.positions, this.blocks, this.norm, this.head] = nn.initialisedTogether(
      () =>
        [
          new nn.Embedding(vocab, dim, { init: nn.truncatedNormal(0.02) }),
          new nn.Embedding(context, dim, { init: nn.truncatedNormal(0.02) }),
          Array.from({ length: layers }, () => new Block(dim, heads)),
          new nn.LayerNorm(dim),
          new nn.Linear(dim, vocab),
        ] as const,
    );
  }
  /** ids int32 [batch, time] (time <= context) -> logits [batch, time, vocab]. */
  forward(ids: Tensor): Tensor {
    const time = ids.shape[1]!;
    if (time > this.config.context)
      throw new TsgradError(`CharLm: ${time} positions, the context holds ${this.config.context}`);
    // [time, time]: true where a position may attend (itself and earlier ones); index arithmetic, no buffer
    const causal = Tensor.ones([time, time], { dtype: dtypes.bool }).tril();
    let x = this.tokens.forward(ids).add(this.positions.weight.index([0, time]));
    for (const block of this.blocks) x = block.forward(x, causal);
    return this.head.forward(this.norm.forward(x));
  }
}

/** Writes the model's weights with its configuration and vocabulary (safetensors metadata), atomically. */
export function saveCharLm(path: string, model: CharLm, vocab: CharVocab): void {
  nn.safeSave(nn.getStateDict(model), path, {
    config: JSON.stringify(model.config),
    vocab: JSON.stringify(vocab.chars),
  });
}

/** A model saved by saveCharLm, and its vocabulary. */
export function loadCharLm(path: string): { model: CharLm; vocab: CharVocab } {
  const { state, metadata } = nn.safeLoad(path);
  if (metadata.config === undefined || metadata.vocab === undefined)
    throw new TsgradError(`${path}: no "config" and "vocab" in its metadata: not a model saved by char_lm`);
  const model = new CharLm(JSON.parse(metadata.config) as CharLmConfig);
  nn.loadStateDict(model, state, { source: path });
  return { model, vocab: new CharVocab(JSON.parse(metadata.vocab) as string[]) };
}

/** `batch` random windows of the text: inputs [batch, context] and the characters that follow each. */
export function randomWindows(
  ids: Int32Array,
  batch: number,
  context: number,
  random: () => number,
): { x: Tensor; y: Tensor } {
  if (ids.length <= context)
    throw new TsgradError(`the text has ${ids.length} characters: it needs more than the context (${context})`);
  const x = new Int32Array(batch * context),
    y = new Int32Array(batch * context);
  for (let b = 0; b < batch; b++) {
    const start = Math.floor(random() * (ids.length - context));
    x.set(ids.subarray(start, start + context), b * context);
    y.set(ids.subarray(start + 1, start + context + 1), b * context);
  }
  return {
    x: new Tensor(x, { dtype: dtypes.int32 }).reshape([batch, context]),
    y: new Tensor(y, { dtype: dtypes.int32 }).reshape([batch, context]),
  };
}

export interface TrainOptions {
  steps: number;
  batch: number;
  lr: number;
  seed: number;
  /** Called after every step with the step (1-based) and its loss. */
  onStep?: (step: number, loss: number) => void;
}

/** Trains `model` on `ids` (next-character cross-entropy, AdamW); returns each step's loss. */
export function train(model: CharLm, ids: Int32Array, { steps, batch, lr, seed, onStep }: TrainOptions): number[] {
  const random = seededRandom(seed);
  return trainClassifier(model, {
    steps,
    lr,
    weightDecay: 0.01,
    onStep,
    nextBatch: () => randomWindows(ids, batch, model.config.context, random),
  });
}

/**
 * Continues `prompt` by `length` characters, each drawn from the model's distribution at `temperature` (on the
 * device: softmax, then Tensor.multinomial; `seed` seeds tsgrad's generator).
 */
export function sample(
  model: CharLm,
  vocab: CharVocab,
  prompt: string,
  length: number,
  { temperature = 0.8, seed = 0 } = {},
): string {
  const { context } = model.config;
  Tensor.manualSeed(seed);
  // always a full window (padded on the left with the prompt's first character): one shape, one set of kernels
  const next = jit(
    (x: Tensor): Tensor =>
      model
        .forward(x)
        .index(0, context - 1)
        .div(temperature)
        .softmax()
        .multinomial(1)
        .realize(),
  );
  let ids = Array.from(vocab.encode(prompt));
  if (ids.length === 0) throw new TsgradError("sample: the prompt is empty");
  for (let i = 0; i < length; i++) {
    const window = ids.slice(-context);
    while (window.length < context) window.unshift(window[0]!);
    ids = [...ids, next(new Tensor(Int32Array.from(window), { dtype: dtypes.int32 }).reshape([1, context])).item()];
  }
  return vocab.decode(ids);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      text: { type: "string", default: new URL("../README.md", import.meta.url).pathname },
      steps: { type: "string" },
      batch: { type: "string", default: "16" },
      context: { type: "string", default: "64" },
      dim: { type: "string", default: "128" },
      heads: { type: "string", default: "4" },
      layers: { type: "string", default: "2" },
      lr: { type: "string", default: "3e-3" },
      seed: { type: "string", default: "1" },
      sample: { type: "string", default: "300" },
      prompt: { type: "string", default: "The " },
      save: { type: "string" },
      load: { type: "string" },
      help: { type: "boolean" },
    },
  });
  if (values.help) {
    console.log(
      "usage: npx tsx examples/char_lm.ts [--text FILE] [--steps 300] [--batch 16] [--context 64] [--dim 128] [--heads 4] [--layers 2] [--lr 3e-3] [--seed 1] [--sample 300] [--prompt 'The '] [--save FILE.safe] [--load FILE.safe (then --steps defaults to 0: sample only)]",
    );
    return;
  }
  const number = (name: keyof typeof values, fallback?: string): number => {
    const given = values[name] as string | undefined;
    const n = Number(given ?? fallback);
    if (!Number.isFinite(n) || n < 0 || (n === 0 && name !== "steps"))
      throw new TsgradError(`--${name} ${given}: expected a positive number`);
    return n;
  };
  Tensor.manualSeed(number("seed"));
  const loaded = values.load ? loadCharLm(values.load) : undefined;
  const steps = number("steps", loaded ? "0" : "300");
  const text = steps > 0 || !loaded ? readFileSync(values.text!, "utf8") : "";
  const vocab = loaded?.vocab ?? new CharVocab(text);
  const model =
    loaded?.model ??
    new CharLm({
      vocab: vocab.size,
      context: number("context"),
      dim: number("dim"),
      heads: number("heads"),
      layers: number("layers"),
    });
  console.log(
    `${loaded ? `${values.load}: loaded` : `${values.text}: ${text.length} characters, ${vocab.size} distinct;`} model of ${nn.getParameters(model).reduce((n, p) => n + p.numel, 0)} parameters`,
  );
  if (steps > 0) {
    const started = performance.now();
    train(model, vocab.encode(text), {
      steps,
      batch: number("batch"),
      lr: number("lr"),
      seed: number("seed"),
      onStep: (step, loss) => {
        if (step === 1 || step % 50 === 0 || step === steps)
          console.log(
            `step ${step}/${steps}  loss ${loss.toFixed(4)}  ${((performance.now() - started) / step).toFixed(1)} ms/step`,
          );
      },
    });
  }
  if (values.save) {
    saveCharLm(values.save, model, vocab);
    console.log(`saved ${values.save}`);
  }
  console.log(`\n${sample(model, vocab, values.prompt!, number("sample"), { seed: number("seed") })}`);
}

await runExample(import.meta.url, "char_lm", main);
