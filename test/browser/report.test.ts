// The run report as a person sees it: rendered from the demo's log, opened in Debian's headless Chromium at
// 1280 x 900, it must draw its curves, log no console error, and fit the window's width (no sideways scrolling).
// Chromium comes from test/setup/ensure-chromium.sh (run here if it is missing); without it these tests skip.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { writeRunReport } from "../../mlperf/bert/report.ts";
import { scratchDir } from "../scratch.ts";
import { findChromium, launchChromium } from "./chromium.ts";
import { countColor, decodePng, distinctColors } from "./png.ts";

const fixture = (name: string) => fileURLToPath(new URL(`../fixtures/${name}`, import.meta.url));
const demoLog = fixture("report/bert_demo_12345_console.txt");
/** The first run's colour (#4e79a7) as its lines show: drawn at opacity 0.9 over the plot's #fbfcfd. */
const FIRST_RUN_LINE = "#5f86b0";

/** The installed Chromium, installing it first where ensure-chromium.sh can (root with apt-get). */
function chromium(): string | null {
  const found = findChromium();
  if (found !== null) return found;
  spawnSync("sh", [fixture("../setup/ensure-chromium.sh")], { stdio: "inherit" });
  return findChromium();
}

const installed = chromium();
const skip =
  installed === null ? "chromium is not installed and could not be (test/setup/ensure-chromium.sh says why)" : false;
// one browser for the tests of this file: starting it is most of a page's time
const browser = installed === null ? null : launchChromium({ chromium: installed });
after(() => browser?.close());

test("the demo's report draws its curves in Chromium, with no console error, within 1280 px", { skip }, async () => {
  const dir = scratchDir("browser-report-");
  const report = path.join(dir, "report.html");
  writeRunReport([demoLog], report, { title: "tsgrad BERT demo" });
  const view = await browser!.view(report, { width: 1280, height: 900 });
  writeFileSync(path.join(dir, "report.png"), view.png);
  assert.deepEqual(view.errors, []);
  assert.equal(view.pageWidth, view.windowWidth);
  assert.deepEqual(view.sidewaysScrolling, []);
  const image = decodePng(view.png);
  assert.equal(image.width, 1280);
  assert.ok(image.height >= 900, `${image.height} px high`);
  assert.ok(distinctColors(image) > 200, `${distinctColors(image)} colours`);
  // the run's lines: six charts of 150 steps (about 12,000 pixels; a legend swatch alone is 144)
  const linePixels = countColor(image, FIRST_RUN_LINE);
  assert.ok(linePixels > 5000, `${linePixels} pixels of the run's lines`);
});

test("a report of four runs with long names still fits 1280 px without sideways scrolling", { skip }, async () => {
  const dir = scratchDir("browser-report-");
  const report = path.join(dir, "report.html");
  writeRunReport(
    [
      demoLog,
      fixture("mllog/tinycorp_v4.1_tinybox_green_result_0.txt"),
      fixture("mllog/tinycorp_v5.0_tinybox_green_result_0.txt"),
      demoLog,
    ],
    report,
  );
  const view = await browser!.view(report, { width: 1280, height: 900 });
  assert.deepEqual(view.errors, []);
  assert.equal(view.pageWidth, view.windowWidth);
  assert.deepEqual(view.sidewaysScrolling, []);
});

test("the browser check sees a console error and a page too wide for the window", { skip }, async () => {
  const page = path.join(scratchDir("browser-report-"), "bad.html");
  writeFileSync(
    page,
    `<!DOCTYPE html><body><div style="width:2000px">wide</div><script>console.error("boom")</script>`,
  );
  const view = await browser!.view(page, { width: 1280, height: 900 });
  assert.deepEqual(view.errors, ["console.error: boom"]);
  assert.ok(view.pageWidth > view.windowWidth, `${view.pageWidth} px in a ${view.windowWidth} px window`);
});
