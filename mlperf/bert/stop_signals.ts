// How the trainer stops on request: Ctrl-C (SIGINT), a scheduler's SIGTERM, or SIGUSR1 (which mpirun passes on
// to every rank; its own SIGINT/SIGTERM kill the job). The first such signal asks for a stop after the current
// step, with a checkpoint; the same request again, a second or more later, quits at once. Copies that arrive
// together are one request: a terminal's Ctrl-C reaches the whole process group, and wrappers (npx tsx,
// npm run) pass their copy on too.
import { constants } from "node:os";

/** Signals that stop training after the current step, with a checkpoint. */
export const STOP_SIGNALS: readonly NodeJS.Signals[] = ["SIGINT", "SIGTERM", "SIGUSR1"];

/** Copies of a signal closer together than this are one request. */
export const REPEAT_WINDOW_MS = 1000;

export interface StopSignalsOptions {
  /** Ends the process (process.exit by default). */
  exit?: (code: number) => void;
  /** Milliseconds now (performance.now by default). */
  now?: () => number;
  /** Where the acknowledgement goes (stderr by default). */
  say?: (line: string) => void;
}

export class StopSignals {
  /** The number of the first stop signal received, 0 while none. */
  signal = 0;
  private firstAt = 0;
  private readonly handlers: [NodeJS.Signals, () => void][];

  constructor({
    exit = (code) => process.exit(code),
    now = () => performance.now(),
    say = (line) => process.stderr.write(`${line}\n`),
  }: StopSignalsOptions = {}) {
    this.handlers = STOP_SIGNALS.map((name) => [
      name,
      () => {
        const number = constants.signals[name];
        if (this.signal === 0) {
          this.signal = number;
          this.firstAt = now();
          say(`\n${name}: saving a checkpoint after this step (${name} again to quit at once)`);
        } else if (now() - this.firstAt >= REPEAT_WINDOW_MS) {
          say(`${name} again: quitting without a checkpoint`);
          exit(128 + number);
        }
      },
    ]);
  }

  /** Starts listening (the signals' default actions are off until `uninstall`). */
  install(): this {
    for (const [name, handler] of this.handlers) process.on(name, handler);
    return this;
  }

  uninstall(): void {
    for (const [name, handler] of this.handlers) process.off(name, handler);
  }
}
