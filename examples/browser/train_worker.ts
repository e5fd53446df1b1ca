// The page's training, in a Web Worker (WebGPU's read-backs need the worker's blocking wait, which a page's main
// thread may not do): a two-layer MLP learns three interleaved spirals with AdamW, on WEBGPU where the browser has
// it, else on the JS device. Posts {kind: "start", device}, then {kind: "step", step, loss} and at the end
// {kind: "done", device, steps, loss, accuracy, seconds}, or {kind: "error", message}.
import { Device, Tensor, initWebGpu, nn } from "../../src/index.ts";
import { trainClassifier } from "../training.ts";

/** The worker's postMessage (the project type-checks against Node's types, which have no Web Worker globals). */
const postMessage = (message: Record<string, unknown>): void =>
  (globalThis as unknown as { postMessage(message: unknown): void }).postMessage(message);

const STEPS = 150;
const POINTS = 100; // a class

/** Three spirals of POINTS points each in the plane, deterministic (no noise: the page shows the same run). */
function spirals(): { x: Float32Array; y: Int32Array } {
  const x = new Float32Array(3 * POINTS * 2);
  const y = new Int32Array(3 * POINTS);
  for (let c = 0; c < 3; c++)
    for (let i = 0; i < POINTS; i++) {
      const r = i / POINTS;
      const angle = c * ((2 * Math.PI) / 3) + r * 4;
      const n = c * POINTS + i;
      x[2 * n] = r * Math.cos(angle);
      x[2 * n + 1] = r * Math.sin(angle);
      y[n] = c;
    }
  return { x, y };
}

class Mlp {
  readonly l1 = new nn.Linear(2, 64);
  readonly l2 = new nn.Linear(64, 64);
  readonly l3 = new nn.Linear(64, 3);
  forward(x: Tensor): Tensor {
    return this.l3.forward(this.l2.forward(this.l1.forward(x).relu()).relu());
  }
}

async function train(): Promise<void> {
  const device = (await initWebGpu()) ? "WEBGPU" : "JS";
  Device.DEFAULT = device;
  postMessage({ kind: "start", device });
  Tensor.manualSeed(1);
  const model = new Mlp();
  const data = spirals();
  const x = new Tensor(data.x).reshape([3 * POINTS, 2]).realize();
  const y = new Tensor(data.y).realize();
  const start = performance.now();
  const losses = trainClassifier(model, {
    steps: STEPS,
    lr: 0.02,
    weightDecay: 0,
    nextBatch: () => ({ x, y }),
    onStep: (step, loss) => postMessage({ kind: "step", step, loss }),
  });
  const loss = losses.at(-1)!;
  const predicted = model.forward(x).argmax({ axis: -1 }).toArray() as Int32Array;
  const correct = predicted.reduce((n, p, i) => n + (p === data.y[i] ? 1 : 0), 0);
  postMessage({
    kind: "done",
    device,
    steps: STEPS,
    loss,
    accuracy: correct / data.y.length,
    seconds: (performance.now() - start) / 1000,
  });
}

train().catch((error: Error) => postMessage({ kind: "error", message: String(error?.stack ?? error) }));
