// Local stand-ins for the download tests: an HTTP server on 127.0.0.1 (port 0) that records
// every request, Range-aware answers, and the page Google Drive puts before big files.
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

/** The shape of Drive's "can't scan this file for viruses" page (2024-). */
export function virusScanPage(action: string, fileId: string, uuid: string): string {
  return `<!DOCTYPE html><html><head><title>Google Drive - Virus scan warning</title></head><body>
<div class="uc-main"><div id="uc-text"><p class="uc-warning-caption">Google Drive can't scan this file for viruses.</p>
<p class="uc-warning-subcaption"><span class="uc-name-size"><a href="/open?id=${fileId}">results_text.tar.gz</a> (4.2G)</span>
is too large for Google to scan for viruses. Would you still like to download this file?</p>
<form id="download-form" action="${action}" method="get"><input type="submit" id="uc-download-link" value="Download anyway"/>
<input type="hidden" name="id" value="${fileId}"><input type="hidden" name="export" value="download">
<input type="hidden" name="confirm" value="t"><input type="hidden" name="uuid" value="${uuid}"></form></div></div></body></html>`;
}
