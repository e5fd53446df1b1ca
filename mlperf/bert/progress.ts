// A tqdm-style count bar on stderr ("train 120/2272 [=====>    ] 5.3 it/s, ETA 6m40s"): redrawn in
// place on a terminal, a plain line every 10 s otherwise, so logs stay readable.
import { formatDuration } from "./data/byteProgress.ts";

export interface CountProgressSink {
  write(text: string): void;
  isTTY: boolean;
}

const BAR_WIDTH = 24;
const PLAIN_INTERVAL_MS = 10_000;

export class CountProgress {
  private done: number;
  private readonly startMs = performance.now();
  private lastPlainMs = -Infinity;

  /** `start`: items done before this run (a resumed run), left out of the rate. */
  constructor(
    private readonly label: string,
    private readonly total: number,
    private readonly start = 0,
    private readonly sink: CountProgressSink = {
      write: (t) => void process.stderr.write(t),
      isTTY: process.stderr.isTTY === true,
    },
  ) {
    this.done = start;
  }

  /** Counts `n` more items and redraws. */
  advance(n = 1): void {
    this.done += n;
    const now = performance.now();
    if (!this.sink.isTTY && now - this.lastPlainMs < PLAIN_INTERVAL_MS && this.done < this.total) return;
    this.lastPlainMs = now;
    this.sink.write(this.sink.isTTY ? `\r${this.line(now)}\x1b[K` : `${this.line(now)}\n`);
  }

  /** Ends the bar's line on a terminal (the next output starts on a fresh line). */
  finish(): void {
    if (this.sink.isTTY) this.sink.write("\n");
  }

  private line(now: number): string {
    const fraction = this.total > 0 ? Math.min(1, this.done / this.total) : 1;
    const filled = Math.round(fraction * BAR_WIDTH);
    const bar = "=".repeat(filled) + (filled < BAR_WIDTH ? ">" : "") + " ".repeat(Math.max(0, BAR_WIDTH - filled - 1));
    const seconds = (now - this.startMs) / 1000;
    const rate = seconds > 0 ? (this.done - this.start) / seconds : 0;
    const eta = rate > 0 ? formatDuration((this.total - this.done) / rate) : "?";
    return `${this.label} ${this.done}/${this.total} [${bar}] ${rate.toFixed(2)} it/s, ETA ${eta}`;
  }
}
