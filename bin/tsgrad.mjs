#!/usr/bin/env node
// `npx tsgrad <command>` in this repository: the benchmark's command line (mlperf/bert/cli.ts), run straight from
// its TypeScript through tsx's loader, so no build step is needed. The trainer runs as a child process of this one,
// which passes the stop signals on (mlperf/bert/cli/child.ts): Ctrl-C still ends in a checkpoint.
import { register } from "tsx/esm/api";

register();
const { main } = await import("../mlperf/bert/cli.ts");
process.exitCode = await main(process.argv.slice(2));
