// The IR's index division and modulo are floor operations; C's are truncating. Where a dividend can be
// negative, the C renderer must use the floor forms (the simplifier may move a multiple of the divisor
// out of a sum, leaving a negative partial sum inside). Registered where the CPU device works (a C compiler
// answers), as every CPU test is: elsewhere no C is ever rendered.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device } from "../../src/index.ts";
import { C_PRELUDE, cIndex } from "../../src/renderer/c.ts";
import { iadd, iconst, idiv, imod, imul, ivar } from "../../src/shape/symbolic.ts";

if (Device.isAvailable("CPU"))
  test("index division and modulo with a possibly negative dividend compute floor semantics in C", () => {
    const i = ivar("i", 8);
    const shifted = iadd(imul(i, -1), iconst(2)); // 2 - i: negative for i > 2
    const exprs = [idiv(shifted, 3), imod(shifted, 3)];
    const dir = mkdtempSync(join(tmpdir(), "tsgrad-floor-"));
    try {
      const body = exprs.map((e) => `printf("%lld ", (long long)(${cIndex(e)}));`).join(" ");
      writeFileSync(
        join(dir, "k.c"),
        `#include <stdio.h>\n${C_PRELUDE}\nint main(void) { for (int64_t i = 0; i < 8; i++) { ${body} } return 0; }\n`,
      );
      const cc = spawnSync("cc", ["-O1", "-o", join(dir, "k"), join(dir, "k.c"), "-lm"], { encoding: "utf8" });
      assert.equal(cc.status, 0, cc.stderr);
      const got = spawnSync(join(dir, "k"), { encoding: "utf8" }).stdout.trim().split(" ").map(Number);
      const expected = Array.from({ length: 8 }, (_, v) => [Math.floor((2 - v) / 3), (((2 - v) % 3) + 3) % 3]).flat();
      assert.deepEqual(got, expected);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
