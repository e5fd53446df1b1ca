// Resumable HTTP(S) download into `<dest>.part`, renamed to `dest` only when complete: redirects
// followed, HTTP Range to continue after a dropped connection, retries with exponential
// backoff, and a hook for pages (Google Drive's confirm page) that stand in front of a file.
import { mkdir, open, rename, rm, stat } from "node:fs/promises";
import http from "node:http";
import https from "node:https";
import { dirname } from "node:path";
import { setTimeout as delay } from "node:timers/promises";

/** A download that failed; `retriable` is false when trying again cannot help. */
export class DownloadError extends Error {
  constructor(
    message: string,
    readonly url: string,
    readonly retriable: boolean,
  ) {
    super(`${url}: ${message}`);
    this.name = "DownloadError";
  }
}

/**
 * The host could not be reached at all: its name does not resolve (offline, or a wrong name), or nothing answers
 * on its port. Before any byte of a download arrived this is reported at once, not retried for a minute.
 */
export class UnreachableError extends DownloadError {
  constructor(url: string, cause: NodeJS.ErrnoException) {
    super(`cannot reach ${new URL(url).host} (${cause.message}): the network or the host is unreachable`, url, true);
    this.name = "UnreachableError";
    this.cause = cause;
  }
}

/** Failures to connect that mean no network, no name service or nothing listening, rather than a hiccup. */
const UNREACHABLE_CODES = new Set(["ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ENETUNREACH", "EHOSTUNREACH"]);

export interface DownloadOptions {
  /** Failed attempts in a row (without new bytes) tolerated before giving up. */
  retries?: number;
  /** Delay before the first retry; doubled each time, up to `maxBackoffMs`. */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** A connection with no data for this long is dropped and retried. */
  idleTimeoutMs?: number;
  /** The size the finished file must have, where it is known in advance. */
  expectedSize?: number;
  /**
   * Called with an HTML page that came instead of a file (no Content-Disposition); returns
   * the URL to request next, or throws. Without it an HTML page is saved as the file.
   */
  onHtmlPage?: (html: string, pageUrl: string) => string;
  /** Bytes in the file so far and the full size once known, on every chunk. */
  onProgress?: (done: number, total: number | undefined) => void;
  /** Where "retrying in ..." notes go. */
  onRetry?: (error: Error, delayMs: number) => void;
  sleep?: (ms: number) => Promise<void>;
}

const MAX_REDIRECTS = 10;
const MAX_HTML_PAGES = 3;
const MAX_HTML_BYTES = 4 << 20;
/** Errors of the local disk, which no retry fixes. */
const LOCAL_ERRORS = new Set(["ENOSPC", "EACCES", "EPERM", "EROFS", "EISDIR", "ENOTDIR", "EDQUOT"]);

/**
 * Downloads `url` to `dest`, continuing from `dest + ".part"` if an earlier run left one. A host that cannot be
 * reached before any byte arrived is an UnreachableError at once; once bytes came, it is retried like a dropped link.
 */
export async function downloadToFile(url: string, dest: string, options: DownloadOptions = {}): Promise<void> {
  const { retries = 6, backoffMs = 1000, maxBackoffMs = 60_000, sleep = (ms: number) => delay(ms) } = options;
  const part = `${dest}.part`;
  await mkdir(dirname(dest), { recursive: true });
  let failures = 0;
  let received = false;
  for (;;) {
    const before = await sizeOf(part);
    try {
      await attempt(url, part, options);
      break;
    } catch (error) {
      if (!isRetriable(error)) throw error;
      // Bytes arrived: the link, not the server, is failing; keep going from where it stopped.
      if ((await sizeOf(part)) > before) {
        failures = 0;
        received = true;
      }
      if (error instanceof UnreachableError && !received) throw error;
      if (failures >= retries) {
        throw new DownloadError(
          `gave up after ${failures + 1} failed attempts: ${(error as Error).message}`,
          url,
          false,
        );
      }
      const wait = Math.min(maxBackoffMs, backoffMs * 2 ** failures);
      options.onRetry?.(error as Error, wait);
      await sleep(wait);
      failures++;
    }
  }
  const size = await sizeOf(part);
  if (options.expectedSize !== undefined && size !== options.expectedSize) {
    await rm(part, { force: true });
    throw new DownloadError(`got ${size} bytes, expected ${options.expectedSize}`, url, false);
  }
  await rename(part, dest);
}

/** How far the file writes may lag the network before the body is paused. */
const MAX_QUEUED_BYTES = 16 << 20;

/** One request (after redirects and confirm pages) that appends to `part` until the end. */
async function attempt(url: string, part: string, options: DownloadOptions): Promise<void> {
  let start = await sizeOf(part);
  if (options.expectedSize !== undefined && start > options.expectedSize) {
    await rm(part);
    start = 0;
  }
  if (start > 0 && start === options.expectedSize) return;
  const { response, finalUrl } = await openFile(url, start, options);
  const status = response.statusCode ?? 0;
  if (status === 416 && start > 0) {
    response.resume();
    // The part may already hold the whole file (a crash between the last byte and the rename).
    if (contentRangeTotal(response) === start) return;
    await rm(part);
    throw new DownloadError(`range ${start}- not satisfiable; restarting from byte 0`, finalUrl, true);
  }
  if (status !== 200 && status !== 206) {
    response.resume();
    const retriable = status >= 500 || status === 408 || status === 429;
    throw new DownloadError(`HTTP ${status} ${response.statusMessage ?? ""}`.trim(), finalUrl, retriable);
  }
  const resumed = status === 206;
  if (resumed && contentRangeStart(response) !== start) {
    response.resume();
    await rm(part);
    throw new DownloadError(`server resumed at the wrong byte (wanted ${start}); restarting`, finalUrl, true);
  }
  const lengthHeader = response.headers["content-length"];
  const length = lengthHeader === undefined ? undefined : Number(lengthHeader);
  const total = resumed ? (contentRangeTotal(response) ?? (length === undefined ? undefined : start + length)) : length;
  let done = resumed ? start : 0;
  options.onProgress?.(done, total);
  // Every chunk that arrived is on disk before an aborted body's error surfaces, so the next
  // attempt resumes exactly where this one stopped. A paused or piped stream would drop the
  // chunks still buffered when the socket fails, so the body flows and writes queue up,
  // pausing only when the disk falls far behind.
  const file = await open(part, resumed ? "a" : "w");
  try {
    // the connection may have dropped while the file opened: its events are gone, and with them what it had buffered
    if (response.destroyed && !response.complete)
      throw new DownloadError("connection closed before the body was read", finalUrl, true);
    await new Promise<void>((resolve, reject) => {
      let writes = Promise.resolve();
      let queued = 0;
      let failed = false;
      const fail = (error: unknown) => {
        if (failed) return;
        failed = true;
        response.destroy();
        reject(error);
      };
      response.on("data", (chunk: Buffer) => {
        queued += chunk.length;
        if (queued > MAX_QUEUED_BYTES) response.pause();
        writes = writes.then(async () => {
          if (failed) return;
          await file.write(chunk);
          queued -= chunk.length;
          done += chunk.length;
          options.onProgress?.(done, total);
          if (queued <= MAX_QUEUED_BYTES / 2 && response.isPaused()) response.resume();
        });
        writes.catch(fail);
      });
      response.on("end", () => void writes.then(resolve, fail));
      // a body cut short without an error event still closes: incomplete is an aborted download
      response.on(
        "close",
        () =>
          void writes.then(
            () =>
              response.complete
                ? resolve()
                : fail(new DownloadError(`connection closed at byte ${done}`, finalUrl, true)),
            fail,
          ),
      );
      response.on("error", (error) => void writes.then(() => fail(error), fail));
    });
  } finally {
    await file.close();
  }
  if (total !== undefined && done !== total) {
    throw new DownloadError(`connection closed at byte ${done} of ${total}`, finalUrl, true);
  }
}

/** The response that carries the file from byte `start`: past redirects and any HTML pages. */
async function openFile(
  url: string,
  start: number,
  options: DownloadOptions,
): Promise<{ response: http.IncomingMessage; finalUrl: string }> {
  const idleTimeoutMs = options.idleTimeoutMs ?? 60_000;
  const cookies = new CookieJar();
  const headers: Record<string, string> = start > 0 ? { Range: `bytes=${start}-` } : {};
  let opened = await get(url, headers, cookies, idleTimeoutMs);
  for (let pages = 0; isHtmlPage(opened.response) && options.onHtmlPage; pages++) {
    if (pages === MAX_HTML_PAGES) {
      opened.response.destroy();
      throw new DownloadError(`still an HTML page after ${MAX_HTML_PAGES} confirmations`, opened.finalUrl, false);
    }
    const next = options.onHtmlPage(await readText(opened.response, opened.finalUrl), opened.finalUrl);
    opened = await get(next, headers, cookies, idleTimeoutMs);
  }
  return opened;
}

/** GET following redirects; resolves once the final response's headers are in. */
async function get(
  url: string,
  headers: Record<string, string>,
  cookies: CookieJar,
  idleTimeoutMs: number,
): Promise<{ response: http.IncomingMessage; finalUrl: string }> {
  let current = new URL(url);
  for (let hops = 0; ; hops++) {
    const response = await request(current, headers, cookies, idleTimeoutMs);
    cookies.store(current, response.headers["set-cookie"]);
    const status = response.statusCode ?? 0;
    const location = response.headers.location;
    if (status < 300 || status >= 400 || status === 304 || !location) return { response, finalUrl: current.href };
    response.resume();
    if (hops === MAX_REDIRECTS) throw new DownloadError(`more than ${MAX_REDIRECTS} redirects`, url, false);
    current = new URL(location, current);
  }
}

function request(
  url: URL,
  headers: Record<string, string>,
  cookies: CookieJar,
  idleTimeoutMs: number,
): Promise<http.IncomingMessage> {
  const client = url.protocol === "https:" ? https : url.protocol === "http:" ? http : undefined;
  if (!client) return Promise.reject(new DownloadError(`unsupported protocol ${url.protocol}`, url.href, false));
  const cookie = cookies.headerFor(url);
  return new Promise((resolve, reject) => {
    const req = client.get(url, {
      headers: { "User-Agent": "tsgrad-download", ...headers, ...(cookie ? { Cookie: cookie } : {}) },
    });
    req.setTimeout(idleTimeoutMs, () =>
      req.destroy(new DownloadError(`no data for ${idleTimeoutMs} ms`, url.href, true)),
    );
    req.on("response", resolve);
    req.on("error", (error: NodeJS.ErrnoException) =>
      reject(
        error.code !== undefined && UNREACHABLE_CODES.has(error.code) ? new UnreachableError(url.href, error) : error,
      ),
    );
  });
}

function isHtmlPage(response: http.IncomingMessage): boolean {
  const type = response.headers["content-type"] ?? "";
  return (response.statusCode ?? 0) < 300 && type.startsWith("text/html") && !response.headers["content-disposition"];
}

async function readText(response: http.IncomingMessage, url: string): Promise<string> {
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of response) {
    length += (chunk as Buffer).length;
    if (length > MAX_HTML_BYTES) {
      response.destroy();
      throw new DownloadError(`HTML page larger than ${MAX_HTML_BYTES} bytes`, url, false);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** `Content-Range: bytes 100-199/1000` -> 100. */
function contentRangeStart(response: http.IncomingMessage): number | undefined {
  const match = /^bytes (\d+)-\d+\/(?:\d+|\*)$/.exec(response.headers["content-range"] ?? "");
  return match ? Number(match[1]) : undefined;
}

// `Content-Range: bytes 100-199/1000`, or `bytes */1000` on a 416 -> 1000.
function contentRangeTotal(response: http.IncomingMessage): number | undefined {
  const match = /\/(\d+)$/.exec(response.headers["content-range"] ?? "");
  return match ? Number(match[1]) : undefined;
}

function isRetriable(error: unknown): boolean {
  if (error instanceof DownloadError) return error.retriable;
  const code = (error as NodeJS.ErrnoException).code;
  if (code !== undefined && LOCAL_ERRORS.has(code)) return false;
  // Socket resets, refused connections, DNS hiccups, aborted bodies.
  return code !== undefined || (error as Error).message === "aborted";
}

async function sizeOf(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return 0;
    throw error;
  }
}

/** Cookies across the hops of one download (Drive sets some on the confirm page). */
class CookieJar {
  private readonly cookies = new Map<string, { domain: string; value: string }>();

  store(url: URL, setCookie: string[] | undefined): void {
    for (const line of setCookie ?? []) {
      const [pair = "", ...attributes] = line.split(";");
      const eq = pair.indexOf("=");
      if (eq <= 0) continue;
      const domainAttribute = attributes.map((a) => a.trim()).find((a) => /^domain=/i.test(a));
      const domain = domainAttribute ? domainAttribute.slice(7).replace(/^\./, "").toLowerCase() : url.hostname;
      this.cookies.set(pair.slice(0, eq).trim(), { domain, value: pair.slice(eq + 1).trim() });
    }
  }

  headerFor(url: URL): string {
    const host = url.hostname.toLowerCase();
    return [...this.cookies]
      .filter(([, { domain }]) => host === domain || host.endsWith(`.${domain}`))
      .map(([name, { value }]) => `${name}=${value}`)
      .join("; ");
  }
}
