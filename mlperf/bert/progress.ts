// A tqdm-style count bar on stderr ("train 120/2272 [=====>    ] 5.3 it/s, ETA 6m40s"): redrawn in
// place on a terminal (cut to its width, so a redraw never wraps), a plain line every 10 s otherwise, so
// logs stay readable. The rate counts from the first item on: the first step compiles, and would make every
// estimate hours long.
import { formatDuration } from "./data/byteProgress.ts";

export interface CountProgressSink {
  write(text: string): void;
  isTTY: boolean;
  /** The terminal's width, where known (0 when it says none). */
  columns?: number;
}

export interface CountProgressOptions {
  /** Items done before this run (a resumed run). */
  start?: number;
  sink?: CountProgressSink;
  /**
   * What follows the rate, given the items done and the rate (items/s, 0 while unknown): by default `ETA <time to
   * total>`; a phase that may stop before its total says so here.
   */
  eta?: (done: number, rate: number) => string;
  /** Erases the bar when done (a short phase inside a longer one, an evaluation) instead of keeping its line. */
  transient?: boolean;
}

const BAR_WIDTH = 24;
const PLAIN_INTERVAL_MS = 10_000;

const stderrSink = (): CountProgressSink => ({
  write: (t) => void process.stderr.write(t),
  isTTY: process.stderr.isTTY === true,
  columns: process.stderr.columns,
});

/** The time `remaining` items take at `rate` items/s: "4m20s", or "?" while the rate is unknown. */
export const timeAtRate = (remaining: number, rate: number): string =>
  rate > 0 ? formatDuration(remaining / rate) : "?";

export class CountProgress {
  private done: number;
  private readonly sink: CountProgressSink;
  private readonly eta: (done: number, rate: number) => string;
  private readonly transient: boolean;
  /** When the first item was done, and the count then: the rate leaves the first item out (it compiles). */
  private first: { ms: number; done: number } | undefined;
  private lastPlainMs = -Infinity;
  /** Whether the bar is drawn on the terminal's current line. */
  private drawn = false;

  constructor(
    private readonly label: string,
    private readonly total: number,
    { start = 0, sink = stderrSink(), eta, transient = false }: CountProgressOptions = {},
  ) {
    this.done = start;
    this.sink = sink;
    this.eta = eta ?? ((done, rate) => `ETA ${timeAtRate(this.total - done, rate)}`);
    this.transient = transient;
  }

  /** Counts `n` more items and redraws. */
  advance(n = 1): void {
    this.done += n;
    const now = performance.now();
    this.first ??= { ms: now, done: this.done };
    if (!this.sink.isTTY && now - this.lastPlainMs < PLAIN_INTERVAL_MS && this.done < this.total) return;
    this.lastPlainMs = now;
    if (!this.sink.isTTY) this.sink.write(`${this.line(now)}\n`);
    else {
      this.sink.write(`\r${this.line(now).slice(0, Math.max(20, (this.sink.columns || 200) - 1))}\x1b[K`);
      this.drawn = true;
    }
  }

  /** Ends the bar's line on a terminal (the next output starts on a fresh line), or erases it if transient. */
  finish(): void {
    if (this.drawn) this.sink.write(this.transient ? "\r\x1b[K" : "\n");
    this.drawn = false;
  }

  private line(now: number): string {
    const fraction = this.total > 0 ? Math.min(1, this.done / this.total) : 1;
    const filled = Math.round(fraction * BAR_WIDTH);
    const bar = "=".repeat(filled) + (filled < BAR_WIDTH ? ">" : "") + " ".repeat(Math.max(0, BAR_WIDTH - filled - 1));
    const seconds = (now - this.first!.ms) / 1000;
    const rate = seconds > 0 ? (this.done - this.first!.done) / seconds : 0;
    return `${this.label} ${this.done}/${this.total} [${bar}] ${rate.toFixed(2)} it/s, ${this.eta(this.done, rate)}`;
  }
}
