// A small convolutional network that learns to tell three kinds of drawn shapes apart (a filled square, a
// hollow square, a plus sign), at random places, sizes and brightness, on noise: nn.Conv2d, nn.BatchNorm,
// max pooling and nn.Linear, a jitted AdamW step, accuracy on images it never saw. The images are drawn
// here, so it needs no download.
//
//   npx tsx examples/shapes_cnn.ts [--steps 150] [--batch 30] [--seed 1]
import { parseArgs } from "node:util";
import { Tensor, TsgradError, dtypes, nn } from "../src/index.ts";
import { runExample, seededRandom, trainClassifier } from "./training.ts";

export const SIZE = 16;
export const CLASSES = ["filled square", "hollow square", "plus"] as const;

/** `count` images [count, 1, SIZE, SIZE] with their labels (0, 1, 2 in turn, so every batch holds each). */
export function drawShapes(count: number, random: () => number): { images: Float32Array; labels: Int32Array } {
  const images = new Float32Array(count * SIZE * SIZE),
    labels = new Int32Array(count);
  for (let n = 0; n < count; n++) {
    const label = n % CLASSES.length;
    labels[n] = label;
    const side = 5 + Math.floor(random() * 6); // 5..10 pixels
    const [top, left] = [Math.floor(random() * (SIZE - side + 1)), Math.floor(random() * (SIZE - side + 1))];
    const ink = 0.6 + 0.4 * random();
    const image = images.subarray(n * SIZE * SIZE, (n + 1) * SIZE * SIZE);
    for (let i = 0; i < image.length; i++) image[i] = 0.3 * random();
    const middle = Math.floor(side / 2);
    for (let y = 0; y < side; y++) {
      for (let x = 0; x < side; x++) {
        const edge = y === 0 || x === 0 || y === side - 1 || x === side - 1;
        const on = label === 0 ? true : label === 1 ? edge : y === middle || x === middle;
        if (on) image[(top + y) * SIZE + left + x] = ink;
      }
    }
  }
  return { images, labels };
}

/**
 * conv 3x3 (1 -> 8) -> relu -> max pool 2 -> conv 3x3 (8 -> 16) -> batch norm -> relu -> max pool 2 -> linear (16*4*4
 * -> 3).
 */
export class ShapesNet {
  readonly conv1: nn.Conv2d;
  readonly conv2: nn.Conv2d;
  readonly norm: nn.BatchNorm;
  readonly classify: nn.Linear;
  constructor() {
    [this.conv1, this.conv2, this.norm, this.classify] = nn.initialisedTogether(
      () =>
        [
          new nn.Conv2d(1, 8, 3, { padding: 1 }),
          new nn.Conv2d(8, 16, 3, { padding: 1, bias: false }),
          new nn.BatchNorm(16),
          new nn.Linear(16 * (SIZE / 4) ** 2, CLASSES.length),
        ] as const,
    );
  }
  /** images [batch, 1, SIZE, SIZE] -> logits [batch, classes] (batch statistics while `Tensor.training`) */
  forward(images: Tensor): Tensor {
    const h = this.conv1.forward(images).relu().maxPool2d({ kernel: 2 });
    const g = this.norm.forward(this.conv2.forward(h)).relu().maxPool2d({ kernel: 2 });
    return this.classify.forward(g.flatten(1));
  }
}

const batchOf = (images: Float32Array, labels: Int32Array) => ({
  x: new Tensor(images, { dtype: dtypes.float32 }).reshape([labels.length, 1, SIZE, SIZE]),
  y: new Tensor(labels, { dtype: dtypes.int32 }),
});

/** Trains on freshly drawn batches; returns the losses and the accuracy on `testCount` images never trained on. */
export function trainShapes({
  steps,
  batch,
  seed,
  testCount = 300,
  onStep,
}: {
  steps: number;
  batch: number;
  seed: number;
  testCount?: number;
  onStep?: (step: number, loss: number) => void;
}) {
  if (batch % CLASSES.length !== 0)
    throw new TsgradError(`--batch ${batch}: a multiple of ${CLASSES.length} (each batch holds every class)`);
  Tensor.manualSeed(seed);
  const model = new ShapesNet();
  const random = seededRandom(seed);
  const nextBatch = () => {
    const { images, labels } = drawShapes(batch, random);
    return batchOf(images, labels);
  };
  const losses = trainClassifier(model, { steps, lr: 3e-3, weightDecay: 1e-4, nextBatch, onStep });
  // images from another stream of the generator: never seen in training
  const test = drawShapes(testCount, seededRandom(seed + 1_000_003));
  const { x } = batchOf(test.images, test.labels);
  const predicted = model.forward(x).argmax({ axis: -1 }).toArray() as Int32Array;
  const accuracy = test.labels.reduce((right, label, i) => right + (predicted[i] === label ? 1 : 0), 0) / testCount;
  return { losses, accuracy, model };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      steps: { type: "string", default: "150" },
      batch: { type: "string", default: "30" },
      seed: { type: "string", default: "1" },
      help: { type: "boolean" },
    },
  });
  if (values.help) {
    console.log("usage: npx tsx examples/shapes_cnn.ts [--steps 150] [--batch 30] [--seed 1]");
    return;
  }
  const number = (name: "steps" | "batch" | "seed"): number => {
    const n = Number(values[name]);
    if (!Number.isInteger(n) || n < (name === "seed" ? 0 : 1))
      throw new TsgradError(`--${name} ${values[name]}: expected a whole number${name === "seed" ? "" : " above 0"}`);
    return n;
  };
  const steps = number("steps");
  const started = performance.now();
  const { accuracy } = trainShapes({
    steps,
    batch: number("batch"),
    seed: number("seed"),
    onStep: (i, loss) => {
      if (i === 1 || i % 25 === 0 || i === steps)
        console.log(
          `step ${i}/${steps}  loss ${loss.toFixed(4)}  ${((performance.now() - started) / i).toFixed(1)} ms/step`,
        );
    },
  });
  console.log(
    `accuracy on 300 new images: ${(accuracy * 100).toFixed(1)}% (chance: ${(100 / CLASSES.length).toFixed(1)}%)`,
  );
}

await runExample(import.meta.url, "shapes_cnn", main);
