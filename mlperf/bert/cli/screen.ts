// What a person sees of a trainer's console output: the log files get every line (steps, hyperparameters, the
// MLPerf log's JSON), the screen the phases, the evaluations and what went wrong; a progress bar on stderr stands
// for the step lines. `--verbose` shows everything.
import { existsSync, readFileSync } from "node:fs";
import { checkCompliance } from "../compliance.ts";
import { parseEvalLine, parseStepLine } from "../report.ts";

/** The last evaluation and whether the run reached its target, as the console lines told them. */
export interface RunOutcome {
  lastEval: { step: number; samples: number; accuracy: number } | null;
  /** The "Reference Convergence point reached" line's time, in seconds; null while not reached. */
  convergedSeconds: number | null;
  /** The trainer's "interrupted at step N; continue with RESUME=..." line. */
  interrupted: string | null;
  /** TARGET, from the hyperparameter lines. */
  target: number | null;
}

/** Lines only the log files need. */
const LOG_ONLY = [
  /^:::MLLOG /,
  /^HParam: /,
  /^training with global batch size /,
  /^Estimated training time: /,
  /^saved checkpoint /,
  /^removing old checkpoint /,
  /^ \*\*\* Model saved to /,
  /^MLPerf log: /,
];

/** Lines worth seeing once even when every phase prints them. */
const ONCE = [/^training on /, /^model: /];

const CONVERGED = /^Reference Convergence point reached after \d+ datasamples and (\d+)h(\d+)m([\d.]+)s\.$/;

export class ConsoleView {
  readonly outcome: RunOutcome = { lastEval: null, convergedSeconds: null, interrupted: null, target: null };
  private readonly seen = new Set<string>();
  /** Set by the line that announces an eval on fake data: the next eval line is that one. */
  private fakeEval = false;

  constructor(private readonly verbose = false) {}

  /** The text to show for one console line of the trainer, or null to show nothing. */
  show(line: string): string | null {
    const shown = this.filter(line);
    return this.verbose ? line : shown;
  }

  private filter(line: string): string | null {
    if (/^(warm-up )?eval on fake data /.test(line)) {
      this.fakeEval = true;
      return null;
    }
    const evaluation = parseEvalLine(line);
    if (evaluation !== null) {
      const accuracy = evaluation.maskedLmAccuracy.toFixed(3);
      if (this.fakeEval) {
        this.fakeEval = false;
        return `  eval on fake data: masked-LM accuracy ${accuracy} (random batches: a check of the eval step, no result)`;
      }
      this.outcome.lastEval = {
        step: evaluation.step,
        samples: evaluation.samples,
        accuracy: evaluation.maskedLmAccuracy,
      };
      return `  eval at step ${evaluation.step}: masked-LM accuracy ${accuracy}, loss ${evaluation.loss.toFixed(4)}`;
    }
    const converged = CONVERGED.exec(line);
    if (converged) {
      const [hours, minutes, seconds] = converged.slice(1).map(Number) as [number, number, number];
      this.outcome.convergedSeconds = hours * 3600 + minutes * 60 + seconds;
      return null;
    }
    if (line.startsWith("interrupted at step ")) this.outcome.interrupted = line;
    const target = /^HParam: "TARGET": ([\d.]+)$/.exec(line);
    if (target) this.outcome.target = Number(target[1]);
    if (parseStepLine(line) !== null || LOG_ONLY.some((pattern) => pattern.test(line))) return null;
    const once = ONCE.find((pattern) => pattern.test(line));
    if (once !== undefined) {
      if (this.seen.has(once.source)) return null;
      this.seen.add(once.source);
    }
    return line;
  }
}

/** Feeds a stream's text to `onLine` a whole line at a time. */
export function lineSplitter(onLine: (line: string) => void): { write(text: string): void; end(): void } {
  let pending = "";
  return {
    write(text) {
      pending += text;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      for (const line of lines) onLine(line);
    },
    end() {
      if (pending !== "") onLine(pending);
      pending = "";
    },
  };
}

/** Where a run's files are, for the summary. */
export interface RunFiles {
  runDir: string;
  consoleLog: string;
  /** The MLPerf log and what the compliance checker said of it. */
  mlperfLog: { path: string; verdict: string } | null;
  report: string | null;
  checkpoints: string;
}

/**
 * The end of a run in a few lines: its result, then where its logs, report and checkpoints are. `status`: the
 * trainer's exit status (a failure's own line, on stderr, says what went wrong).
 */
export function summaryLines(outcome: RunOutcome, files: RunFiles, status = 0): string[] {
  const { lastEval, convergedSeconds, interrupted, target } = outcome;
  const at =
    lastEval &&
    `masked-LM accuracy ${lastEval.accuracy.toFixed(3)} at step ${lastEval.step} (${lastEval.samples} samples)`;
  const result = interrupted
    ? interrupted
    : status !== 0
      ? `stopped by an error (exit status ${status}), said above`
      : lastEval === null
        ? "no evaluation ran"
        : convergedSeconds !== null
          ? `${at}: target ${target} reached after ${convergedSeconds.toFixed(1)} s of training`
          : `target ${target ?? "?"} not reached: ${at}`;
  const lines = [
    `result:      ${result}`,
    `run folder:  ${files.runDir}`,
    `console log: ${files.consoleLog} (every step, the hyperparameters, the MLPerf lines)`,
  ];
  if (files.mlperfLog) lines.push(`MLPerf log:  ${files.mlperfLog.path} (${files.mlperfLog.verdict})`);
  if (files.report) lines.push(`report:      ${files.report}`);
  lines.push(`checkpoints: ${files.checkpoints}`);
  return lines;
}

/** An MLPerf log with what the compliance checker says of it; null when there is no such file. */
export function checkedMlperfLog(path: string): { path: string; verdict: string } | null {
  if (!existsSync(path)) return null;
  const { errors } = checkCompliance(readFileSync(path, "latin1"));
  if (errors.length === 0) return { path, verdict: "compliant" };
  const more = errors.length > 1 ? ` (and ${errors.length - 1} more)` : "";
  return { path, verdict: `NOT compliant: ${errors[0]!.message}${more}` };
}
