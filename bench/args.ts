// Command-line options of a bench script: node's parseArgs with --help (the script's usage comment) and a
// bad option answered by the usage on stderr and exit status 2, not a stack trace.
import { readFileSync } from "node:fs";
import { type ParseArgsConfig, parseArgs } from "node:util";

/** The script's header comment: its lines up to the first import, without the comment markers. */
export function usageOf(scriptUrl: string): string {
  const lines: string[] = [];
  for (const line of readFileSync(new URL(scriptUrl), "utf8").split("\n")) {
    if (!line.startsWith("//")) break;
    lines.push(line.replace(/^\/\/ ?/, ""));
  }
  return lines.join("\n");
}

/** parseArgs(config) of process.argv, with --help printing the usage of the script at `scriptUrl`. */
export function benchArgs<T extends ParseArgsConfig["options"]>(
  scriptUrl: string,
  options: T,
  { allowPositionals = false }: { allowPositionals?: boolean } = {},
) {
  return argsWithUsage(usageOf(scriptUrl), options, { allowPositionals });
}

/** parseArgs(config) of process.argv, with --help printing `usage`: for scripts bundled for the GPU machine
 *  (bench/gpu/bundle.ts), whose source file, and so whose header comment, is not there at run time. */
export function argsWithUsage<T extends ParseArgsConfig["options"]>(
  usage: string,
  options: T,
  { allowPositionals = false }: { allowPositionals?: boolean } = {},
) {
  try {
    const parsed = parseArgs({ options: { ...options, help: { type: "boolean", default: false } }, allowPositionals });
    if ((parsed.values as { help?: boolean }).help) {
      console.log(usage);
      process.exit(0);
    }
    return parsed;
  } catch (error) {
    console.error(`${(error as Error).message}\n\n${usage}`);
    process.exit(2);
  }
}
