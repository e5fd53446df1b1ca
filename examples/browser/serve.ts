// The browser demo: bundles tsgrad with the page (bundle.ts) and serves it on localhost, cross-origin isolated
// (the headers SharedArrayBuffer needs, which WEBGPU's blocking read-backs use). Open the URL it prints.
//
//   npm run browser-demo [-- --port 8080]
import { createServer } from "node:http";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { extname, join, normalize } from "node:path";
import { parseArgs } from "node:util";
import { bundleBrowserDemo } from "./bundle.ts";

const TYPES: Record<string, string> = { ".html": "text/html", ".js": "text/javascript", ".map": "application/json" };

/** Serves `dir` on `port` (0: any free one) with the isolation headers; resolves with the URL. */
export function serveIsolated(dir: string, port = 0): Promise<{ url: string; close: () => void }> {
  const server = createServer((request, response) => {
    const path = normalize(decodeURIComponent(new URL(request.url ?? "/", "http://x").pathname));
    const file = join(dir, path === "/" ? "index.html" : path);
    try {
      if (!file.startsWith(dir)) throw new Error("outside");
      const body = readFileSync(file);
      response.writeHead(200, {
        "content-type": TYPES[extname(file)] ?? "application/octet-stream",
        "cross-origin-opener-policy": "same-origin",
        "cross-origin-embedder-policy": "require-corp",
      });
      response.end(body);
    } catch {
      response.writeHead(404);
      response.end();
    }
  });
  return new Promise((resolve) =>
    server.listen(port, "127.0.0.1", () => {
      const address = server.address() as { port: number };
      resolve({ url: `http://127.0.0.1:${address.port}/`, close: () => server.close() });
    }),
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { port: { type: "string", default: "8080" } } });
  const dir = join(tmpdir(), "tsgrad-browser-demo");
  await bundleBrowserDemo(dir);
  const { url } = await serveIsolated(dir, Number(values.port));
  console.log(`tsgrad browser demo: ${url} (Ctrl-C stops it)`);
}
