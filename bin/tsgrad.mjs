#!/usr/bin/env node
// `npx tsgrad <command>` in this repository: the benchmark's command line (mlperf/bert/cli.ts), run straight from
// its TypeScript through tsx's loader, so no build step is needed. The trainer runs as a child process of this one,
// which passes the stop signals on (mlperf/bert/cli/child.ts): Ctrl-C still ends in a checkpoint.
import { existsSync } from "node:fs";

const cli = new URL("../mlperf/bert/cli.ts", import.meta.url);
// the published package holds the library (dist/) only: the benchmark and tsx live in the repository
if (!existsSync(cli)) {
  console.error("tsgrad: the command runs in a checkout of the tsgrad repository (after npm ci there)");
  process.exit(2);
}
const { register } = await import("tsx/esm/api");
register();
const { main } = await import(cli.href);
process.exitCode = await main(process.argv.slice(2));
