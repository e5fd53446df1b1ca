// A throwaway HTTP server on 127.0.0.1 (port 0) for the download tests: each test gives the
// handler, the server records every request it saw.
import http from "node:http";
import type { AddressInfo } from "node:net";

export interface FixtureServer {
  /** `http://127.0.0.1:<port>` */
  origin: string;
  /** Method, path with query, and headers of each request, in arrival order. */
  requests: { url: string; headers: http.IncomingHttpHeaders }[];
  close(): Promise<void>;
}

/** `handler` gets the request's index (0 for the first) besides the request and response. */
export async function startServer(
  handler: (req: http.IncomingMessage, res: http.ServerResponse, index: number) => void,
): Promise<FixtureServer> {
  const requests: FixtureServer["requests"] = [];
  const server = http.createServer((req, res) => {
    requests.push({ url: req.url ?? "", headers: req.headers });
    handler(req, res, requests.length - 1);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Answers with `bytes`, honouring `Range: bytes=N-` when `ranges` is true (206 + Content-Range). */
export function sendBytes(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  bytes: Uint8Array,
  { ranges = false, headers = {} }: { ranges?: boolean; headers?: Record<string, string> } = {},
): void {
  const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
  if (ranges && range) {
    const start = Number(range[1]);
    if (start >= bytes.length) {
      res.writeHead(416, { "Content-Range": `bytes */${bytes.length}`, ...headers }).end();
      return;
    }
    res.writeHead(206, {
      "Content-Length": bytes.length - start,
      "Content-Range": `bytes ${start}-${bytes.length - 1}/${bytes.length}`,
      ...headers,
    });
    res.end(bytes.subarray(start));
    return;
  }
  res.writeHead(200, { "Content-Length": bytes.length, ...headers });
  res.end(bytes);
}

/** Deterministic non-repeating test bytes. */
export function patternBytes(length: number, seed = 1): Uint8Array {
  const out = new Uint8Array(length);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}
