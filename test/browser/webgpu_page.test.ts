// tsgrad in a browser: examples/browser's page, bundled and served cross-origin isolated, opened in Debian's headless
// Chromium. With WebGPU (SwiftShader) its worker trains on WEBGPU; with the GPU off it falls back to the JS device
// and trains the same model to the same loss. Neither may log a console error.
// Chromium comes from test/setup/ensure-chromium.sh (run here if it is missing); without it these tests skip.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { bundleBrowserDemo } from "../../examples/browser/bundle.ts";
import { serveIsolated } from "../../examples/browser/serve.ts";
import { scratchDir } from "../scratch.ts";
import { findChromium, launchChromium } from "./chromium.ts";

function chromium(): string | null {
  if (findChromium() === null)
    spawnSync("sh", [fileURLToPath(new URL("../setup/ensure-chromium.sh", import.meta.url))], { stdio: "inherit" });
  return findChromium();
}

const installed = chromium();
const skip =
  installed === null ? "chromium is not installed and could not be (test/setup/ensure-chromium.sh says why)" : false;

interface Result {
  kind: string;
  device: string;
  loss: number;
  accuracy: number;
  message?: string;
}

let site: { url: string; close: () => void } | undefined;
before(async () => {
  if (skip) return;
  const dir = scratchDir("browser-webgpu-");
  await bundleBrowserDemo(dir);
  site = await serveIsolated(dir);
});
after(() => site?.close());

async function trainInPage(webgpu: boolean): Promise<{ result: Result; errors: string[] }> {
  const browser = launchChromium({ chromium: installed!, webgpu, timeoutMs: 180_000 });
  try {
    const { value, errors } = await browser.run(site!.url, {
      until: "window.tsgradResult",
      read: "window.tsgradResult",
    });
    return { result: value as Result, errors };
  } finally {
    await browser.close();
  }
}

let webgpuLoss: number | undefined;

test("the page trains on WEBGPU in Chromium: the loss falls below 0.1, no console error", { skip }, async (t) => {
  const { result, errors } = await trainInPage(true);
  t.diagnostic(JSON.stringify(result));
  assert.equal(result.kind, "done", result.message);
  assert.equal(result.device, "WEBGPU");
  assert.ok(result.loss < 0.1 && result.accuracy > 0.9, `loss ${result.loss}, accuracy ${result.accuracy}`);
  assert.deepEqual(errors, []);
  webgpuLoss = result.loss;
});

test("without WebGPU the page falls back to the JS device and trains to the same loss", { skip }, async (t) => {
  const { result, errors } = await trainInPage(false);
  t.diagnostic(JSON.stringify(result));
  assert.equal(result.kind, "done", result.message);
  assert.equal(result.device, "JS");
  assert.ok(result.loss < 0.1, `loss ${result.loss}`);
  if (webgpuLoss !== undefined) assert.ok(Math.abs(result.loss - webgpuLoss) < 1e-4, `${result.loss} vs ${webgpuLoss}`);
  assert.deepEqual(errors, []);
});
