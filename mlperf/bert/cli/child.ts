// Running one of the benchmark's scripts as a child process: node with tsx's loader (not the tsx command, whose
// signal relay gives a busy child 60 ms, so Ctrl-C would leave the trainer no time to checkpoint), the stop
// signals passed on, and the child's exit status as ours.
import { spawn, type ChildProcess } from "node:child_process";
import { constants } from "node:os";
import { STOP_SIGNALS } from "../stop_signals.ts";

const TSX_LOADER = import.meta.resolve("tsx");

/** The node command line that runs TypeScript file `script` with `args`, node itself given `nodeFlags`. */
export function nodeScriptCommand(
  script: string,
  args: readonly string[] = [],
  nodeFlags: readonly string[] = [],
): [string, string[]] {
  return [process.execPath, [...nodeFlags, "--import", TSX_LOADER, script, ...args]];
}

/**
 * While `child` runs, keeps this process alive through the stop signals and passes each on. A terminal's Ctrl-C
 * reaches the child through its process group as well; the trainer takes copies that arrive together as one
 * request (stop_signals.ts).
 */
export function relayStopSignals(child: ChildProcess): void {
  const relay = (signal: NodeJS.Signals) => void child.kill(signal);
  for (const signal of STOP_SIGNALS) process.on(signal, relay);
  child.on("close", () => {
    for (const signal of STOP_SIGNALS) process.off(signal, relay);
  });
}

/** A child's exit status as a shell gives it: its code, or 128 + the signal that killed it. */
export function childStatus(code: number | null, signal: NodeJS.Signals | null): number {
  return code ?? 128 + (signal === null ? 0 : constants.signals[signal]);
}

/** Runs TypeScript file `script` with `args`, its output on ours; resolves with its exit status. */
export function runScript(
  script: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
  nodeFlags: readonly string[] = [],
): Promise<number> {
  return new Promise((resolve, reject) => {
    const [command, commandArgs] = nodeScriptCommand(script, args, nodeFlags);
    const child = spawn(command, commandArgs, { env: { ...process.env, ...env }, stdio: "inherit" });
    relayStopSignals(child);
    child.on("error", reject);
    child.on("close", (code, signal) => resolve(childStatus(code, signal)));
  });
}
