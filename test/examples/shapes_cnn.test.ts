// The shape-classifying CNN example (examples/shapes_cnn.ts): its images, and that it learns them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { CLASSES, SIZE, drawShapes, trainShapes } from "../../examples/shapes_cnn.ts";
import { seededRandom } from "../../examples/training.ts";

test("the drawn images hold one shape each, every class in turn, pixels in [0, 1]", () => {
  const { images, labels } = drawShapes(6, seededRandom(3));
  assert.deepEqual(Array.from(labels), [0, 1, 2, 0, 1, 2]);
  assert.equal(images.length, 6 * SIZE * SIZE);
  assert.ok(images.every((v) => v >= 0 && v <= 1));
  // a filled square holds more ink than a hollow one of the same draw would: the classes differ in the picture
  const ink = (n: number) => images.subarray(n * SIZE * SIZE, (n + 1) * SIZE * SIZE).filter((v) => v >= 0.6).length;
  for (let n = 0; n < 6; n++) assert.ok(ink(n) >= 9, `image ${n} (${CLASSES[labels[n]!]}) has ${ink(n)} inked pixels`);
});

test("the CNN learns to tell the shapes apart: loss falls, accuracy on unseen images well above chance", () => {
  const { losses, accuracy } = trainShapes({ steps: 100, batch: 30, seed: 1 });
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  assert.ok(
    mean(losses.slice(-10)) < 0.6 * mean(losses.slice(0, 10)),
    `losses ${mean(losses.slice(0, 10)).toFixed(3)} -> ${mean(losses.slice(-10)).toFixed(3)}`,
  );
  assert.ok(accuracy >= 0.9, `accuracy ${accuracy} on unseen images (chance 0.33)`);
});
