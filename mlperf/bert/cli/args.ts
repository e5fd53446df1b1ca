// Command lines of the tsgrad subcommands, read by node:util's parseArgs: unknown options and missing values are
// usage errors (exit status 2, exit_status.ts) that name the option.
import { parseArgs, type ParseArgsConfig } from "node:util";
import { UsageError } from "../exit_status.ts";

export type OptionSpecs = NonNullable<ParseArgsConfig["options"]>;

/** The parsed options and positionals of `argv`; a UsageError for anything `options` does not name. */
export function parseCommand<const T extends OptionSpecs>(
  argv: readonly string[],
  options: T,
  { positionals = false }: { positionals?: boolean } = {},
) {
  try {
    return parseArgs({ args: [...argv], options, strict: true, allowPositionals: positionals });
  } catch (error) {
    const { code, message } = error as { code?: string; message: string };
    if (typeof code !== "string" || !code.startsWith("ERR_PARSE_ARGS_")) throw error;
    const option = /'([^']+)'/.exec(message)?.[1] ?? "";
    if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") throw new UsageError(`unknown option ${option} (see --help)`);
    if (code === "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL")
      throw new UsageError(`unexpected argument ${option} (see --help)`);
    if (/argument missing/.test(message)) throw new UsageError(`option ${option.split(" ")[0]} needs a value`);
    throw new UsageError(`${message.split(".")[0]} (see --help)`);
  }
}

/** A whole number at least `min`, from option `--name`'s text. */
export function integerOption(name: string, text: string, min = 0): number {
  if (!/^\d+$/.test(text) || Number(text) < min)
    throw new UsageError(`--${name} must be an integer >= ${min}, got ${JSON.stringify(text)}`);
  return Number(text);
}

/**
 * `argv` split into the options `options` names (with their values) and the rest, which go on to the trainer's
 * knob parser (`--eval-bs 6`, `--EVAL_BS=6`).
 */
export function splitOwnOptions(argv: readonly string[], options: OptionSpecs): { own: string[]; rest: string[] } {
  const own: string[] = [];
  const rest: string[] = [];
  const shorts = new Set(Object.values(options).flatMap((spec) => (spec.short ? [`-${spec.short}`] : [])));
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const name = arg.split("=")[0]!;
    const spec = name.startsWith("--") ? options[name.slice(2)] : undefined;
    if (spec === undefined && !shorts.has(name)) {
      rest.push(arg);
      continue;
    }
    own.push(arg);
    if (spec?.type === "string" && !arg.includes("=") && argv[i + 1] !== undefined) own.push(argv[++i]!);
  }
  return { own, rest };
}
