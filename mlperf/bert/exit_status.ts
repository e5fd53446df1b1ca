// The exit statuses the benchmark's commands share (train, download, preprocess, report): 0 done, 1 an internal
// error (a bug: DEBUG=1 prints its stack), 2 bad input or usage (a missing or corrupt file, a bad knob, a failing
// read), 128 + N stopped by signal N (130 Ctrl-C, 143 SIGTERM). A failure is one line on stderr that names its
// cause; the stack, and the causes' stacks, only with DEBUG=1.
import { getenv } from "../../src/index.ts";

export const EXIT_DONE = 0;
export const EXIT_INTERNAL = 1;
export const EXIT_BAD_INPUT = 2;

/** An error class a command expects of bad input (its own, and its readers'). */
export type InputErrorClass = abstract new (...args: never[]) => Error;

/** A failed system call (ENOENT, EACCES, EIO, ENOSPC, ...): the input or the machine, not the program. */
export function isSystemError(error: unknown): error is NodeJS.ErrnoException {
  const { code, syscall } = (error ?? {}) as NodeJS.ErrnoException;
  return typeof code === "string" && typeof syscall === "string";
}

/** The error's stack, then each cause's. */
function stacks(error: unknown): string {
  const lines: string[] = [];
  for (let e: unknown = error; e !== undefined; e = (e as Error).cause)
    lines.push(lines.length === 0 ? String((e as Error).stack ?? e) : `caused by: ${(e as Error).stack ?? e}`);
  return lines.join("\n");
}

/** A command line the command does not understand: exit status 2, with the usage. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** A command that stopped cleanly (its work saved) because of `cause`: it exits with the cause's status. */
export class StoppedError extends Error {
  override name = "StoppedError";
}

/**
 * The status `error` ends a command with: 2 for bad input (an `inputErrors` class or a system call's), else 1; a
 * StoppedError's is its cause's.
 */
export function exitStatusOf(error: unknown, inputErrors: readonly InputErrorClass[]): number {
  if (error instanceof StoppedError) return exitStatusOf(error.cause, inputErrors);
  const input =
    isSystemError(error) ||
    error instanceof UsageError ||
    inputErrors.some((errorClass) => error instanceof errorClass);
  return input ? EXIT_BAD_INPUT : EXIT_INTERNAL;
}

/**
 * Says what stopped `tool` in one line on stderr (`prefix` before the message: which rank, say), with the stacks
 * under DEBUG=1; returns the exit status.
 */
export function reportFailure(
  tool: string,
  error: unknown,
  inputErrors: readonly InputErrorClass[],
  prefix = "",
): number {
  const status = exitStatusOf(error, inputErrors);
  const debug = getenv("DEBUG", 0) >= 1;
  const message = error instanceof Error ? error.message : String(error);
  const internal = status === EXIT_INTERNAL ? "internal error: " : "";
  const hint = status === EXIT_INTERNAL && !debug ? " (DEBUG=1 prints the stack)" : "";
  console.error(`${tool}: ${prefix}${internal}${message}${hint}`);
  if (debug) console.error(stacks(error));
  return status;
}
