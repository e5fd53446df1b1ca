// The benchmark's one command line, `npx tsgrad <command>` (bin/tsgrad.mjs): each stage of the pipeline a
// subcommand, each with --help. The stages that have their own scripts run them as child processes, with the
// same options; train, eval and demo run here. Exit statuses as in exit_status.ts.
import { fileURLToPath } from "node:url";
import { PreprocessError } from "./data/preprocess.ts";
import { VocabError } from "./data/tokenizer.ts";
import { main as demoMain } from "./demo.ts";
import { EXIT_BAD_INPUT, UsageError, reportFailure } from "./exit_status.ts";
import { INPUT_ERRORS as TRAINER_INPUT_ERRORS } from "./train.ts";
import { runScript } from "./cli/child.ts";
import { evalCommand } from "./cli/eval.ts";
import { preprocessCommand } from "./cli/preprocess.ts";
import { trainCommand } from "./cli/train.ts";

const script = (path: string) => fileURLToPath(new URL(path, import.meta.url));

/** A stage that is its own script: the subcommand passes its arguments on. */
const passThrough = (path: string, what: string) => ({
  what,
  run: async (argv: readonly string[]) => {
    if (argv.includes("--help") || argv.includes("-h"))
      console.log(
        `tsgrad ${what.split(":")[0]}: the options of ${path.replace("./", "mlperf/bert/")}, which it runs:\n`,
      );
    return runScript(script(path), argv);
  },
});

interface Subcommand {
  /** One line for the list of commands. */
  what: string;
  run: (argv: readonly string[]) => Promise<number>;
}

export const SUBCOMMANDS: Record<string, Subcommand> = {
  download: passThrough("./data/download.ts", "fetch the config, vocab, init checkpoint and Wikipedia text"),
  preprocess: {
    what: "text into shards: your own (--text DIR), or Wikipedia's (pre-train, pre-eval)",
    run: preprocessCommand,
  },
  train: { what: "train BERT on a data folder (--data DIR) or BASEDIR's shards", run: trainCommand },
  eval: { what: "the masked-LM accuracy of a saved model on an eval shard", run: evalCommand },
  report: passThrough("./report.ts", "the HTML run report from console and MLPerf logs"),
  demo: { what: "the whole flow on a built-in corpus, in one run folder", run: (argv) => demoMain([...argv]) },
};

export const USAGE = `usage: npx tsgrad <command> [options]

${Object.entries(SUBCOMMANDS)
  .map(([name, { what }]) => `  ${name.padEnd(12)}${what}`)
  .join("\n")}

npx tsgrad <command> --help lists a command's options. The trainer's knobs work as environment
variables too (BS=32 npx tsgrad train ...), with the reference's names; a flag wins.`;

/** What bad input throws across the commands run here: the trainer's, and bad usage or text: exit status 2. */
const INPUT_ERRORS = [UsageError, PreprocessError, VocabError, ...TRAINER_INPUT_ERRORS];

/** `tsgrad ARGV...`; returns the exit status. */
export async function main(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    console.log(USAGE);
    return name === undefined ? EXIT_BAD_INPUT : 0;
  }
  const command = SUBCOMMANDS[name];
  if (command === undefined) {
    console.error(`tsgrad: unknown command ${JSON.stringify(name)}\n\n${USAGE}`);
    return EXIT_BAD_INPUT;
  }
  try {
    return await command.run(rest);
  } catch (error) {
    return reportFailure(`tsgrad ${name}`, error, INPUT_ERRORS);
  }
}
