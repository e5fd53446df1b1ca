// The byte progress display: what a log file sees, what a terminal sees.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ByteProgress, formatBytes, formatDuration } from "../../mlperf/bert/data/byteProgress.ts";

function sink(isTTY: boolean, columns = 100) {
  const writes: string[] = [];
  return { writes, isTTY, columns, write: (text: string) => writes.push(text) };
}

test("formatBytes uses powers of 1000 with one decimal", () => {
  assert.deepEqual([0, 999, 571.43, 1500, 231_508, 4_034_713_312].map(formatBytes), [
    "0 B",
    "999 B",
    "571 B",
    "1.5 KB",
    "231.5 KB",
    "4.0 GB",
  ]);
});

test("formatDuration reads as h/m/s", () => {
  assert.deepEqual([7, 65, 3725, Infinity].map(formatDuration), ["7s", "1m05s", "1h02m05s", "?"]);
});

test("off a terminal it writes a plain line every lineMs with percent, rate and ETA", () => {
  let now = 0;
  const out = sink(false);
  const bar = new ByteProgress("vocab.txt", 10_000_000, out, 0, { lineMs: 10_000, now: () => now });
  now = 5_000;
  bar.update(1_000_000); // too soon for a line
  now = 10_000;
  bar.update(2_000_000);
  now = 12_000;
  bar.update(2_400_000);
  bar.finish();
  assert.deepEqual(out.writes, [
    "vocab.txt   20.0% 2.0 MB/10.0 MB  200.0 KB/s  ETA 40s\n",
    "vocab.txt   24.0% 2.4 MB/10.0 MB  200.0 KB/s  ETA 38s\n",
  ]);
});

test("the rate of a resumed download counts only the bytes of this run", () => {
  let now = 0;
  const out = sink(false);
  const bar = new ByteProgress("ckpt", 4_000_000_000, out, 3_000_000_000, { now: () => now });
  now = 10_000;
  bar.update(3_010_000_000);
  assert.deepEqual(out.writes, ["ckpt   75.3% 3.0 GB/4.0 GB  1.0 MB/s  ETA 16m30s\n"]);
});

test("on a terminal it redraws one line with a bar that fits the width", () => {
  let now = 0;
  const out = sink(true, 80);
  const bar = new ByteProgress("f", 1000, out, 0, { redrawMs: 100, now: () => now });
  now = 1000;
  bar.update(500);
  now = 1050;
  bar.update(600); // within redrawMs: not drawn
  bar.finish();
  assert.equal(out.writes.length, 3);
  assert.ok(out.writes[0]!.startsWith("\rf   50.0% 500 B/1.0 KB  500 B/s  ETA 1s  [####"));
  assert.ok(out.writes[0]!.endsWith("-]\x1b[K"));
  assert.ok(
    out.writes.slice(0, 2).every((w) => w.length - "\r\x1b[K".length <= 79),
    "each redraw fits in 79 columns",
  );
  assert.equal(out.writes[2], "\n");
});

test("an unknown size shows bytes and rate only", () => {
  let now = 0;
  const out = sink(false);
  const bar = new ByteProgress("page", undefined, out, 0, { now: () => now });
  now = 2_000;
  bar.update(3000);
  bar.finish();
  assert.deepEqual(out.writes, ["page  3.0 KB  1.5 KB/s\n"]);
});
