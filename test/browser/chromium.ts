// Opens a page in Debian's headless Chromium and reports what a person would see: a PNG of the whole page, the
// console errors and failed loads, and the page's width against the window's. Chromium is driven over the
// DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages ended by a NUL byte on fds 3 and 4), so no
// npm package and no browser download is needed; test/setup/ensure-chromium.sh installs the browser.
//
//   node --import tsx test/browser/chromium.ts PAGE.html OUT.png [--width 1280] [--height 900]
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

/** What loading a page showed. */
export interface PageView {
  /** The whole page, `width` CSS pixels wide, as PNG bytes. */
  png: Uint8Array;
  /** Console errors, uncaught exceptions and error log entries (a failed load, a blocked resource). */
  errors: string[];
  /** The page's laid-out width (document scrollWidth) and the window's: wider means sideways scrolling. */
  pageWidth: number;
  windowWidth: number;
  /** Elements whose content is wider than they are and that scroll or cut it (not an ellipsis), as `tag.class`. */
  sidewaysScrolling: string[];
}

/** The installed Chromium's command, or null where none is installed. */
export function findChromium(): string | null {
  for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
    if (spawnSync(name, ["--version"], { stdio: "ignore" }).status === 0) return name;
  }
  return null;
}

interface Message {
  id?: number;
  method?: string;
  params?: Record<string, unknown>;
  result?: Record<string, unknown>;
  error?: { message: string };
  sessionId?: string;
}

/** One DevTools protocol connection over Chromium's pipe. */
class DevTools {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (r: Message["result"]) => void; reject: (e: Error) => void }>();
  private readonly listeners: ((message: Message) => void)[] = [];
  private buffer = "";

  constructor(
    private readonly input: Writable,
    output: Readable,
  ) {
    output.setEncoding("utf8");
    output.on("data", (chunk: string) => {
      this.buffer += chunk;
      for (let end = this.buffer.indexOf("\0"); end >= 0; end = this.buffer.indexOf("\0")) {
        const message = JSON.parse(this.buffer.slice(0, end)) as Message;
        this.buffer = this.buffer.slice(end + 1);
        this.dispatch(message);
      }
    });
  }

  private dispatch(message: Message): void {
    const waiting = message.id === undefined ? undefined : this.pending.get(message.id);
    if (waiting === undefined) {
      for (const listener of this.listeners) listener(message);
      return;
    }
    this.pending.delete(message.id!);
    if (message.error) waiting.reject(new Error(`DevTools: ${message.error.message}`));
    else waiting.resolve(message.result);
  }

  send(method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<Record<string, unknown>> {
    const id = this.nextId++;
    this.input.write(`${JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) })}\0`);
    return new Promise((resolve, reject) =>
      this.pending.set(id, { resolve: (result) => resolve(result ?? {}), reject }),
    );
  }

  /** The next event named `method` (of `sessionId`). */
  once(method: string, sessionId: string): Promise<Message["params"]> {
    return new Promise((resolve) => {
      const listener = (message: Message) => {
        if (message.method !== method || message.sessionId !== sessionId) return;
        this.listeners.splice(this.listeners.indexOf(listener), 1);
        resolve(message.params);
      };
      this.listeners.push(listener);
    });
  }

  on(listener: (message: Message) => void): void {
    this.listeners.push(listener);
  }
}

/** The parts of the DevTools events that carry errors. */
interface ErrorEventParams {
  type?: string;
  args?: { value?: unknown; description?: string }[];
  exceptionDetails?: { text: string; exception?: { description?: string } };
  entry?: { level: string; source: string; text: string; url?: string };
}

/** The text of an error-level event, or null for other events. */
function errorOf(message: Message): string | null {
  const params = (message.params ?? {}) as ErrorEventParams;
  if (message.method === "Runtime.consoleAPICalled" && params.type === "error")
    return `console.error: ${(params.args ?? []).map((a) => a.value ?? a.description).join(" ")}`;
  if (message.method === "Runtime.exceptionThrown" && params.exceptionDetails)
    return `exception: ${params.exceptionDetails.exception?.description ?? params.exceptionDetails.text}`;
  if (message.method === "Log.entryAdded" && params.entry?.level === "error")
    return `${params.entry.source}: ${params.entry.text}${params.entry.url ? ` (${params.entry.url})` : ""}`;
  return null;
}

/** A headless Chromium that shows pages one after another; close() ends it. */
export interface Browser {
  /** Loads `file` in a `width` x `height` window and returns what it showed. */
  view(file: string, options?: { width?: number; height?: number }): Promise<PageView>;
  /**
   * Loads `url`, waits until the page's `until` expression is true (polled), then returns the value of `read`
   * (an expression giving JSON-able data) and the errors the page logged.
   */
  run(url: string, options: { until: string; read: string }): Promise<{ value: unknown; errors: string[] }>;
  close(): Promise<void>;
}

/**
 * Starts headless Chromium (`chromium`, else the one found); each view gives up after `timeoutMs`. With `webgpu`,
 * pages get WebGPU on SwiftShader (Chromium's own Vulkan on the CPU) instead of no GPU at all.
 */
export function launchChromium({
  chromium = findChromium() ?? "chromium",
  timeoutMs = 15_000,
  webgpu = false,
}: {
  chromium?: string;
  timeoutMs?: number;
  webgpu?: boolean;
} = {}): Browser {
  const profile = mkdtempSync(path.join(tmpdir(), "tsgrad-chromium-"));
  const browser = spawn(
    chromium,
    [
      "--headless=new",
      "--no-sandbox",
      ...(webgpu ? ["--enable-unsafe-webgpu", "--use-angle=swiftshader"] : ["--disable-gpu"]),
      "--no-first-run",
      "--no-default-browser-check",
      "--hide-scrollbars",
      `--user-data-dir=${profile}`,
      "--remote-debugging-pipe",
      "about:blank",
    ],
    { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] },
  );
  let stderr = "";
  browser.stderr!.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const closed = new Promise<void>((resolve) => browser.on("exit", () => resolve()));
  const exited = closed.then(() => {
    throw new Error(
      `chromium exited (${browser.signalCode ?? browser.exitCode}) before the page was read:\n${stderr.slice(-2000)}`,
    );
  });
  exited.catch(() => {}); // seen by the views that race it
  const devtools = new DevTools(browser.stdio[3] as Writable, browser.stdio[4] as Readable);
  return {
    async view(file, { width = 1280, height = 900 } = {}) {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`chromium took more than ${timeoutMs} ms on ${file}`)), timeoutMs);
      });
      try {
        return await Promise.race([showPage(devtools, file, width, height), exited, timedOut]);
      } finally {
        clearTimeout(timer);
      }
    },
    async run(url, { until, read }) {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${url} did not get to ${until} in ${timeoutMs} ms`)), timeoutMs);
      });
      try {
        return await Promise.race([runPage(devtools, url, until, read), exited, timedOut]);
      } finally {
        clearTimeout(timer);
      }
    },
    async close() {
      browser.kill();
      await closed; // its profile is written until it is gone
      // its helper processes (the GPU's, crash reporting) may still write a moment after it exits: retried, and a
      // profile they keep writing is left in the temporary folder rather than failing the test
      try {
        rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
      } catch {
        // left in tmpdir()
      }
    },
  };
}

/** A new blank tab, attached, its page, runtime and log events on, and the errors it logs collected from now. */
async function openTab(devtools: DevTools): Promise<{ targetId: unknown; sessionId: string; errors: string[] }> {
  const { targetId } = await devtools.send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = (await devtools.send("Target.attachToTarget", { targetId, flatten: true })) as {
    sessionId: string;
  };
  const errors: string[] = [];
  devtools.on((message) => {
    const error = message.sessionId === sessionId ? errorOf(message) : null;
    if (error !== null) errors.push(error);
  });
  for (const domain of ["Page", "Runtime", "Log"]) await devtools.send(`${domain}.enable`, {}, sessionId);
  return { targetId, sessionId, errors };
}

/** `url` in a new tab until `until` holds; then `read`'s value and the errors logged. */
async function runPage(
  devtools: DevTools,
  url: string,
  until: string,
  read: string,
): Promise<{ value: unknown; errors: string[] }> {
  const { targetId, sessionId, errors } = await openTab(devtools);
  const navigation = await devtools.send("Page.navigate", { url }, sessionId);
  if (typeof navigation.errorText === "string") errors.push(`navigation: ${navigation.errorText}`);
  const evaluate = async (expression: string): Promise<unknown> => {
    const answer = await devtools.send("Runtime.evaluate", { expression, returnByValue: true }, sessionId);
    return (answer.result as { value?: unknown }).value;
  };
  while ((await evaluate(`Boolean(${until})`)) !== true) await new Promise((resolve) => setTimeout(resolve, 200));
  const value = await evaluate(read);
  await devtools.send("Target.closeTarget", { targetId });
  return { value, errors };
}

/** One page in a new tab: loaded, measured, and captured whole. */
async function showPage(devtools: DevTools, file: string, width: number, height: number): Promise<PageView> {
  const { targetId, sessionId, errors } = await openTab(devtools);
  await devtools.send(
    "Emulation.setDeviceMetricsOverride",
    { width, height, deviceScaleFactor: 1, mobile: false },
    sessionId,
  );
  const loaded = devtools.once("Page.loadEventFired", sessionId);
  const navigation = await devtools.send("Page.navigate", { url: pathToFileURL(file).href }, sessionId);
  if (typeof navigation.errorText === "string") errors.push(`navigation: ${navigation.errorText}`);
  await loaded;
  const evaluated = await devtools.send(
    "Runtime.evaluate",
    {
      expression: `JSON.stringify({
        pageWidth: document.documentElement.scrollWidth,
        windowWidth: window.innerWidth,
        pageHeight: document.documentElement.scrollHeight,
        sidewaysScrolling: [...document.querySelectorAll("*")]
          .filter((e) => e.scrollWidth > e.clientWidth + 1)
          .filter((e) => getComputedStyle(e).overflowX !== "visible" && getComputedStyle(e).textOverflow !== "ellipsis")
          .map((e) => e.tagName.toLowerCase() + (e.className ? "." + String(e.className).split(" ").join(".") : "")),
      })`,
      returnByValue: true,
    },
    sessionId,
  );
  const layout = JSON.parse((evaluated.result as { value: string }).value) as Omit<PageView, "png" | "errors"> & {
    pageHeight: number;
  };
  const shot = await devtools.send(
    "Page.captureScreenshot",
    {
      format: "png",
      captureBeyondViewport: true,
      clip: { x: 0, y: 0, width, height: Math.max(height, layout.pageHeight), scale: 1 },
    },
    sessionId,
  );
  await devtools.send("Target.closeTarget", { targetId });
  return {
    png: new Uint8Array(Buffer.from(shot.data as string, "base64")),
    errors,
    pageWidth: layout.pageWidth,
    windowWidth: layout.windowWidth,
    sidewaysScrolling: layout.sidewaysScrolling,
  };
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    options: { width: { type: "string", default: "1280" }, height: { type: "string", default: "900" } },
    allowPositionals: true,
  });
  const [page, out] = positionals;
  if (page === undefined || out === undefined) {
    console.error("usage: node --import tsx test/browser/chromium.ts PAGE.html OUT.png [--width 1280] [--height 900]");
    process.exit(2);
  }
  const browser = launchChromium();
  try {
    const view = await browser.view(path.resolve(page), { width: Number(values.width), height: Number(values.height) });
    writeFileSync(out, view.png);
    console.log(JSON.stringify({ ...view, png: `${out} (${view.png.length} bytes)` }, null, 2));
  } finally {
    await browser.close();
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
