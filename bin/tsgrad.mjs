#!/usr/bin/env node
// `npx tsgrad <command>`: the benchmark's command line (mlperf/bert/cli.ts), run straight from its TypeScript
// through tsx's loader in this process, so no build step is needed and Ctrl-C reaches the trainer itself.
import { register } from "tsx/esm/api";

register();
const { main } = await import("../mlperf/bert/cli.ts");
process.exitCode = await main(process.argv.slice(2));
