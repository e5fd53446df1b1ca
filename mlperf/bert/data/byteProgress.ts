// A progress display over bytes (downloads, hashing, extraction): a redrawn bar with rate
// and ETA on a terminal, a plain line every few seconds when stderr goes to a file or a pipe.

/** Where progress goes: a stream, and whether it is a terminal that can redraw a line. */
export interface ProgressSink {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export interface ByteProgressOptions {
  /** Minimum milliseconds between redraws on a terminal. */
  redrawMs?: number;
  /** Milliseconds between plain lines when the sink is not a terminal. */
  lineMs?: number;
  /** Clock in milliseconds (tests pass a fake one). */
  now?: () => number;
}

const UNITS = ["B", "KB", "MB", "GB", "TB"];

/** 1536 -> "1.5 KB" (powers of 1000, as disk sizes are quoted). */
export function formatBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < UNITS.length - 1) {
    value /= 1000;
    unit++;
  }
  return unit === 0 ? `${Math.round(value)} B` : `${value.toFixed(1)} ${UNITS[unit]}`;
}

/** 3725 -> "1h02m05s". */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) return "?";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = String(s % 60).padStart(2, "0");
  if (h > 0) return `${h}h${String(m).padStart(2, "0")}m${rest}s`;
  return m > 0 ? `${m}m${rest}s` : `${s % 60}s`;
}

export class ByteProgress {
  private readonly startMs: number;
  private readonly startBytes: number;
  private lastDrawMs = -Infinity;
  private done: number;
  private readonly redrawMs: number;
  private readonly lineMs: number;
  private readonly now: () => number;

  /** `total` undefined when the size is not known; `done` starts above 0 for a resumed file. */
  constructor(
    private readonly label: string,
    private total: number | undefined,
    private readonly sink: ProgressSink,
    done = 0,
    options: ByteProgressOptions = {},
  ) {
    this.now = options.now ?? Date.now;
    this.redrawMs = options.redrawMs ?? 100;
    this.lineMs = options.lineMs ?? 10_000;
    this.startMs = this.now();
    this.done = done;
    this.startBytes = done;
    if (!sink.isTTY) this.lastDrawMs = this.startMs;
  }

  /** Learn the size once the server has said it. */
  setTotal(total: number | undefined): void {
    this.total = total;
  }

  add(bytes: number): void {
    this.update(this.done + bytes);
  }

  update(done: number): void {
    this.done = done;
    const t = this.now();
    if (t - this.lastDrawMs < (this.sink.isTTY ? this.redrawMs : this.lineMs)) return;
    this.lastDrawMs = t;
    this.draw(t);
  }

  /** Final state on its own line. */
  finish(): void {
    this.draw(this.now());
    if (this.sink.isTTY) this.sink.write("\n");
  }

  private draw(t: number): void {
    const line = this.describe(t);
    if (!this.sink.isTTY) {
      this.sink.write(`${line}\n`);
      return;
    }
    // Leave the last column free so that the terminal does not wrap; ESC[K clears leftovers.
    const width = this.sink.columns ?? 80;
    const barWidth = width - line.length - 5;
    const bar = this.total && barWidth >= 10 ? `  [${this.barOf(barWidth)}]` : "";
    this.sink.write(`\r${(line + bar).slice(0, width - 1)}\x1b[K`);
  }

  private describe(t: number): string {
    const seconds = (t - this.startMs) / 1000;
    // A restart from byte 0 (server ignored Range) would make this negative.
    const rate = seconds > 0 ? Math.max(0, this.done - this.startBytes) / seconds : 0;
    const parts = [this.label];
    if (this.total) {
      const percent = ((100 * this.done) / this.total).toFixed(1).padStart(5);
      parts.push(`${percent}% ${formatBytes(this.done)}/${formatBytes(this.total)}`);
    } else {
      parts.push(formatBytes(this.done));
    }
    parts.push(`${formatBytes(rate)}/s`);
    if (this.total && rate > 0) parts.push(`ETA ${formatDuration((this.total - this.done) / rate)}`);
    return parts.join("  ");
  }

  private barOf(width: number): string {
    const filled = Math.min(width, Math.round((width * this.done) / (this.total ?? 1)));
    return "#".repeat(filled) + "-".repeat(width - filled);
  }
}
