import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { withTempDir } from "./tempDir.ts";
import {
  formatEvalLine,
  formatStepLine,
  olympicMeanMinutes,
  parseEvalLine,
  parseRunLog,
  parseStepLine,
  renderRunReport,
  ReportError,
  timeToTrainMinutes,
  writeRunReport,
  yRange,
  type RunLog,
  type StepStats,
} from "../../mlperf/bert/report.ts";

const fixtures = fileURLToPath(new URL("../fixtures/mllog/", import.meta.url));
const projectRoot = fileURLToPath(new URL("../../", import.meta.url));
const v41Path = path.join(fixtures, "tinycorp_v4.1_tinybox_green_result_0.txt");
const v50Path = path.join(fixtures, "tinycorp_v5.0_tinybox_green_result_0.txt");
/** `npm run demo`'s console log: an init phase of 5 warm-up steps and a fake-data eval, then a run of 150 steps. */
const demoPath = fileURLToPath(new URL("../fixtures/report/bert_demo_12345_console.txt", import.meta.url));

const exampleStep: StepStats = {
  step: 12,
  samples: 792,
  totalMs: 345.6,
  hostMs: 1.2,
  dataMs: 0.4,
  deviceMs: 344.0,
  loss: 7.1234,
  learningRate: 1.2e-4,
  memoryGB: 0.52,
  gflops: 123.4,
};

/** A console log of `steps` steps of a fake run, with eval lines every `evalEvery` steps. */
function consoleLog(steps: number, evalEvery = 0): string {
  const lines = [`HParam: "BS": 66`, `HParam: "SEED": 7`];
  for (let step = 1; step <= steps; step++) {
    lines.push(
      `\r[####    ] ` +
        formatStepLine({ ...exampleStep, step, samples: step * 66, totalMs: 300 + (step % 7), loss: 10 / step }),
    );
    if (evalEvery > 0 && step % evalEvery === 0) {
      lines.push(
        formatEvalLine({ step, samples: step * 66, maskedLmAccuracy: 0.1 * (step / evalEvery), loss: 2, seconds: 3 }),
      );
    }
  }
  return `${lines.join("\n")}\n`;
}

/** Checks tags nest and close, attributes are quoted, and text holds no raw '<' or bare '&'. */
function assertWellFormedXml(text: string): void {
  const stack: string[] = [];
  const tag = /<(\/?)([a-zA-Z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>/g;
  let last = 0;
  for (let m = tag.exec(text); m !== null; m = tag.exec(text)) {
    const between = text.slice(last, m.index);
    assert.ok(
      !/[<]|&(?!(amp|lt|gt|quot|#39);)/.test(between),
      `bad text before offset ${m.index}: ${between.slice(0, 80)}`,
    );
    last = m.index + m[0].length;
    if (m[4] === "/") continue;
    if (m[1] === "/") assert.equal(stack.pop(), m[2], `closing </${m[2]}> at offset ${m.index}`);
    else stack.push(m[2]!);
  }
  assert.ok(!/[<]/.test(text.slice(last)), "text after the last tag");
  assert.deepEqual(stack, []);
}

const svgsOf = (html: string) => html.match(/<svg[\s\S]*?<\/svg>/g) ?? [];

test("formatStepLine prints the documented console line", () => {
  assert.equal(
    formatStepLine(exampleStep),
    "step 12 | 792 samples | 345.6 ms (host 1.2 ms, data 0.4 ms, device 344.0 ms) | loss 7.1234 | lr 1.20e-4 | 0.52 GB | 123.4 GFLOP/s",
  );
});

test("parseStepLine reads back what formatStepLine prints, after any prefix", () => {
  assert.deepEqual(parseStepLine(`2026-11-30 12:00:01 \r[###   ] ${formatStepLine(exampleStep)}`), exampleStep);
});

test("parseStepLine keeps a NaN loss", () => {
  assert.ok(Number.isNaN(parseStepLine(formatStepLine({ ...exampleStep, loss: NaN }))!.loss));
});

test("parseStepLine ignores other lines", () => {
  assert.equal(parseStepLine("eval step 12 | 792 samples | masked-LM accuracy 0.500000 | loss 2.0000 | 3.0 s"), null);
  assert.equal(parseStepLine("step 12 | loss 7.1"), null);
});

test("parseEvalLine reads back what formatEvalLine prints", () => {
  const evaluation = { step: 2272, samples: 149952, maskedLmAccuracy: 0.720385, loss: 1.4567, seconds: 9.6 };
  assert.equal(
    formatEvalLine(evaluation),
    "eval step 2272 | 149952 samples | masked-LM accuracy 0.720385 | loss 1.4567 | 9.6 s",
  );
  assert.deepEqual(parseEvalLine(formatEvalLine(evaluation)), evaluation);
});

test("parseRunLog reads a real MLPerf log: evals, run start and stop, status and hyper-parameters", () => {
  const run = parseRunLog(readFileSync(v41Path, "latin1"), "v4.1");
  assert.equal(run.evals.length, 19);
  assert.deepEqual(run.evals[run.evals.length - 1], { samples: 2849088, maskedLmAccuracy: 0.7208575420416825 });
  assert.equal(run.status, "success");
  assert.equal(timeToTrainMinutes(run), (1728538316186 - 1728518110874) / 60e3);
  assert.equal(run.mlperfParameters.get("global_batch_size"), "66");
  assert.equal(run.mlperfParameters.get("submission_platform"), "tinybox_green");
  assert.equal(run.mlperfParameters.get("seed"), "6505");
  assert.equal(run.steps.length, 0);
});

test("parseRunLog reads step lines, eval lines and HParam knobs from a console log", () => {
  const run = parseRunLog(consoleLog(20, 10), "console");
  assert.equal(run.steps.length, 20);
  assert.deepEqual(
    run.evals.map((e) => e.samples),
    [660, 1320],
  );
  assert.deepEqual(
    [...run.knobs],
    [
      ["BS", "66"],
      ["SEED", "7"],
    ],
  );
});

test("parseRunLog takes evaluations from MLLOG records over console eval lines", () => {
  const mllog = `:::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "eval_accuracy", "value": 0.5, "metadata": {"epoch_num": 660}}\n`;
  assert.deepEqual(parseRunLog(consoleLog(20, 10) + mllog, "both").evals, [{ samples: 660, maskedLmAccuracy: 0.5 }]);
});

test("parseRunLog skips and counts MLLOG lines it cannot read", () => {
  const run = parseRunLog(
    `:::MLLOG {"key": "run_start", "time_ms": \n:::MLLOG {"key": "run_start", "value": null}\n`,
    "broken",
  );
  assert.equal(run.unreadableRecords, 2);
  assert.equal(run.runStartMs, null);
  assert.match(renderRunReport([run]), /broken: 2 unreadable MLLOG line\(s\) skipped/);
});

function fakeRun(minutes: number, status: string | null): RunLog {
  const run = parseRunLog("", "fake");
  return { ...run, runStartMs: 0, runStopMs: status === null ? null : minutes * 60e3, status };
}

test("olympicMeanMinutes drops the fastest and slowest run, a failed run counting as slowest", () => {
  const runs = [...[300, 310, 320, 330, 340, 350, 360, 370, 380].map((m) => fakeRun(m, "success")), fakeRun(0, null)];
  assert.equal(olympicMeanMinutes(runs), (310 + 320 + 330 + 340 + 350 + 360 + 370 + 380) / 8);
});

test("olympicMeanMinutes leaves a set with two failed runs unscored", () => {
  const runs = [
    ...[300, 310, 320, 330, 340, 350, 360, 370].map((m) => fakeRun(m, "success")),
    fakeRun(0, null),
    fakeRun(500, "aborted"),
  ];
  assert.equal(olympicMeanMinutes(runs), null);
});

test("the report is well-formed, self-contained HTML with inline SVG", () => {
  const html = renderRunReport([
    parseRunLog(consoleLog(50, 10), "console"),
    parseRunLog(readFileSync(v41Path, "latin1"), "v4.1"),
  ]);
  assertWellFormedXml(html.replace("<!DOCTYPE html>", ""));
  assert.ok(!/<script|<link|@import|url\(http/i.test(html));
  assert.deepEqual(html.match(/https?:\/\/[^"]+/g)?.filter((u) => u !== "http://www.w3.org/2000/svg") ?? [], []);
  assert.equal(svgsOf(html).length, 6);
});

test("several logs overlay: one line per run in a chart and one legend entry per run", () => {
  const runs = [
    parseRunLog(readFileSync(v41Path, "latin1"), "v4.1"),
    parseRunLog(readFileSync(v50Path, "latin1"), "v5.0"),
  ];
  const html = renderRunReport(runs);
  const accuracyChart = svgsOf(html).find((svg) => svg.includes("Eval masked-LM accuracy"))!;
  assert.equal(accuracyChart.match(/<polyline/g)!.length, 2);
  assert.equal(accuracyChart.match(/<circle/g)!.length, 19 + 22);
  assert.match(html, /<ul class="legend"><li>.*v4\.1<\/li><li>.*v5\.0<\/li><\/ul>/);
});

test("the accuracy chart draws the 0.72 target line", () => {
  const html = renderRunReport([parseRunLog(readFileSync(v41Path, "latin1"), "v4.1")]);
  const accuracyChart = svgsOf(html).find((svg) => svg.includes("Eval masked-LM accuracy"))!;
  assert.match(accuracyChart, /<line class="target" [^>]*\/><text class="target-label"[^>]*>target 0\.720<\/text>/);
});

test("the report shows time to train and the hyper-parameters", () => {
  const html = renderRunReport([parseRunLog(readFileSync(v41Path, "latin1"), "v4.1")]);
  assert.match(html, /336\.76 min/);
  assert.match(html, /<th class="key">opt_base_learning_rate<\/th><td class="num" colspan="1">0\.0001<\/td>/);
});

test("charts without data collapse into a note", () => {
  const html = renderRunReport([parseRunLog(readFileSync(v41Path, "latin1"), "v4.1")]);
  assert.equal(svgsOf(html).length, 1);
  assert.match(
    html,
    /Not drawn, no step lines in these logs [^:]*: training loss, learning rate, step time, throughput, compute rate\./,
  );
});

test("a long run is thinned to at most 600 points per line", () => {
  const html = renderRunReport([parseRunLog(consoleLog(5000), "long")]);
  const lossChart = svgsOf(html).find((svg) => svg.includes("Training loss"))!;
  const points = /<polyline [^>]*points="([^"]*)"/.exec(lossChart)![1]!.split(" ");
  assert.ok(points.length <= 600 && points.length >= 500, `${points.length} points`);
});

test("run names from the logs are escaped", () => {
  const html = renderRunReport([parseRunLog(consoleLog(3), `<b>&"run"`)]);
  assert.ok(html.includes("&lt;b&gt;&amp;&quot;run&quot;"));
  assert.ok(!html.includes(`<b>&"run"`));
});

test("writeRunReport writes the file by rename, leaving no temp file", () => {
  withTempDir((dir) => {
    const out = path.join(dir, "report.html");
    writeRunReport([v41Path, v50Path], out);
    assert.match(readFileSync(out, "utf8"), /^<!DOCTYPE html>/);
    assert.deepEqual(readdirSync(dir), ["report.html"]);
  });
});

test("writeRunReport names a log it cannot read, and writes nothing", () => {
  withTempDir((dir) => {
    const out = path.join(dir, "report.html");
    assert.throws(
      () => writeRunReport([path.join(dir, "missing.log")], out),
      (e: unknown) => e instanceof ReportError && /cannot read .*missing\.log/.test(e.message),
    );
    assert.equal(existsSync(out), false);
  });
});

test("writeRunReport refuses a file that is not a trainer or MLPerf log", () => {
  withTempDir((dir) => {
    const notALog = path.join(dir, "notes.txt");
    writeFileSync(notALog, "hello\n");
    assert.throws(
      () => writeRunReport([notALog], path.join(dir, "r.html")),
      /notes\.txt holds no :::MLLOG records, step lines or eval lines/,
    );
  });
});

test("the CLI writes the report given with -o", () => {
  withTempDir((dir) => {
    const out = path.join(dir, "set.html");
    const stderr = execFileSync(
      process.execPath,
      ["--import", "tsx", "mlperf/bert/report.ts", v41Path, v50Path, "-o", out],
      {
        cwd: projectRoot,
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    assert.equal(stderr, "");
    assert.ok(readFileSync(out, "utf8").includes("BERT run report: 2 runs"));
  });
});

test("parseRunLog keeps the init phase's warm-up steps and fake-data eval apart from the run", () => {
  const run = parseRunLog(readFileSync(demoPath, "latin1"), "demo");
  assert.deepEqual(
    run.warmUp.steps.map((s) => s.totalMs),
    [8279.8, 279.8, 631.1, 10.2, 13.8],
  );
  assert.deepEqual(
    run.warmUp.evals.map((e) => e.maskedLmAccuracy),
    [0.714445],
  );
  assert.equal(run.steps.length, 150);
  assert.deepEqual(
    run.steps.slice(0, 2).map((s) => [s.step, s.samples]),
    [
      [1, 32],
      [2, 64],
    ],
  );
  assert.deepEqual(
    run.evals.map((e) => e.samples),
    [1600, 3200, 4800],
  );
});

test("without MLLOG eval records, the warm-up's fake-data eval still stays out of the run's evals", () => {
  const text = readFileSync(demoPath, "latin1")
    .split("\n")
    .filter((line) => !line.includes('"key": "eval_accuracy"'))
    .join("\n");
  const run = parseRunLog(text, "demo");
  assert.equal(run.warmUp.evals.length, 1);
  assert.ok(!run.evals.some((e) => e.maskedLmAccuracy === 0.714445), JSON.stringify(run.evals));
});

test("the curves draw the run's steps only; the warm-up has its own section, marked untimed fake data", () => {
  const html = renderRunReport([parseRunLog(readFileSync(demoPath, "latin1"), "demo")]);
  const lossChart = svgsOf(html).find((svg) => svg.includes("Training loss"))!;
  assert.equal(/<polyline [^>]*points="([^"]*)"/.exec(lossChart)![1]!.split(" ").length, 150);
  const warmUp = html.slice(
    html.indexOf("<h2>Init phase: warm-up on fake data</h2>"),
    html.indexOf("<h2>Hyper-parameters"),
  );
  assert.match(warmUp, /not part of the run and not in its curves/);
  assert.match(warmUp, /<td class="num">5<\/td><td class="num">8279\.8<\/td>/);
  assert.match(warmUp, /8279\.8, 279\.8, 631\.1, 10\.2, 13\.8/);
  assert.match(warmUp, /0\.7144 in 3\.3 s/);
  assert.ok(html.indexOf("<h2>Curves of the run</h2>") < html.indexOf("<h2>Init phase"));
});

test("a log without an init phase has no warm-up section", () => {
  assert.ok(!renderRunReport([parseRunLog(consoleLog(20), "console")]).includes("Init phase"));
});

test("yRange with robust: a few spikes stay off the axis, steady noise stays on it", () => {
  const steady = Array.from({ length: 100 }, (_, i) => 10 + (i % 5));
  // quartiles 11 and 13: the far-out fence 13 + 3 * 2 is nearer than the median (12) allows, so 13 + 12
  assert.deepEqual(yRange([...steady, 611, 8279], true), { low: 10, high: 25 });
  assert.deepEqual(yRange([...steady, 611, 8279], false), { low: 10, high: 8279 });
  assert.deepEqual(yRange(steady, true), { low: 10, high: 14 });
});

test("the step-time chart marks each off-axis step at the top edge and says how many and how far", () => {
  const html = renderRunReport([parseRunLog(readFileSync(demoPath, "latin1"), "demo")]);
  const stepChart = svgsOf(html).find((svg) => svg.includes("Step time"))!;
  const markers = stepChart.match(/<path class="off-axis" [^>]*><title>[^<]*<\/title><\/path>/g) ?? [];
  const note = /<text class="off-axis-note"[^>]*>▲ (\d+) above ([\d.]+), up to 611\.3<\/text>/.exec(stepChart);
  assert.ok(note !== null, "no off-axis note");
  assert.equal(markers.length, Number(note[1]));
  assert.ok(markers.some((m) => m.includes("<title>32 samples: 611.3 (off the axis)</title>")));
  // the axis stays near the bulk of the steps (about 10 ms), not at the 611 ms compile
  const ticks = [...stepChart.matchAll(/<text class="tick" [^>]*text-anchor="end">([\d.]+)<\/text>/g)].map((m) =>
    Number(m[1]),
  );
  assert.ok(Math.max(...ticks) < 50, `y ticks ${ticks}`);
});

test("the loss chart is not clipped: a real loss spike stays on the axis", () => {
  const html = renderRunReport([parseRunLog(readFileSync(demoPath, "latin1"), "demo")]);
  const lossChart = svgsOf(html).find((svg) => svg.includes("Training loss"))!;
  assert.ok(!lossChart.includes("off-axis"));
});

test("without MLLOG records (LOGMLPERF=0), the trainer's phase lines tell the warm-up from the run", () => {
  const warmUp = consoleLog(3, 3).replace(/^/, "warm-up (init phase, untimed): 3 steps and an eval on fake data\n");
  const training = `training (run phase): at most 1500 steps of 66 samples\n${consoleLog(20, 10)}`;
  const run = parseRunLog(warmUp + training, "console");
  assert.equal(run.warmUp.steps.length, 3);
  assert.equal(run.warmUp.evals.length, 1);
  assert.equal(run.steps.length, 20);
  assert.deepEqual(
    run.evals.map((e) => e.samples),
    [660, 1320],
  );
});
