// downloadToFile against local servers: plain, Range-capable, connection-dropping, failing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { readFile, readdir, writeFile } from "node:fs/promises";
import http from "node:http";
import { join } from "node:path";
import { downloadToFile, DownloadError, UnreachableError } from "../../mlperf/bert/data/http.ts";
import { sendBytes, startServer } from "./httpFixtureServer.ts";
import { scratchDir } from "../scratch.ts";

const FILE = new Uint8Array(randomBytes(300_000));
const noSleep = async () => {};

const tempDir = () => scratchDir("http-");

test("downloads a file and leaves no .part behind", async (t) => {
  const server = await startServer((req, res) => sendBytes(req, res, FILE));
  t.after(() => server.close());
  const dest = join(tempDir(), "file.bin");
  await downloadToFile(`${server.origin}/file.bin`, dest);
  assert.deepEqual(new Uint8Array(await readFile(dest)), FILE);
  assert.equal(existsSync(`${dest}.part`), false);
});

test("follows redirects, relative and absolute, to the file", async (t) => {
  const server = await startServer((req, res) => {
    if (req.url === "/start") res.writeHead(302, { Location: "/middle" }).end();
    else if (req.url === "/middle") res.writeHead(301, { Location: `http://${req.headers.host}/file` }).end();
    else sendBytes(req, res, FILE);
  });
  t.after(() => server.close());
  const dest = join(tempDir(), "file.bin");
  await downloadToFile(`${server.origin}/start`, dest);
  assert.deepEqual(new Uint8Array(await readFile(dest)), FILE);
  assert.deepEqual(
    server.requests.map((r) => r.url),
    ["/start", "/middle", "/file"],
  );
});

test("resumes a leftover .part with a Range request", async (t) => {
  const server = await startServer((req, res) => sendBytes(req, res, FILE, { ranges: true }));
  t.after(() => server.close());
  const dest = join(tempDir(), "file.bin");
  await writeFile(`${dest}.part`, FILE.subarray(0, 123_456));
  await downloadToFile(`${server.origin}/file.bin`, dest);
  assert.equal(server.requests[0]!.headers.range, "bytes=123456-");
  assert.deepEqual(new Uint8Array(await readFile(dest)), FILE);
});

test("starts over when the server ignores Range and sends the whole file", async (t) => {
  const server = await startServer((req, res) => sendBytes(req, res, FILE));
  t.after(() => server.close());
  const dest = join(tempDir(), "file.bin");
  await writeFile(`${dest}.part`, Buffer.from("stale bytes from another run"));
  await downloadToFile(`${server.origin}/file.bin`, dest);
  assert.deepEqual(new Uint8Array(await readFile(dest)), FILE);
});

test("completes the file after the connection drops mid-body", async (t) => {
  const cut = 100_000;
  const server = await startServer((req, res, index) => {
    if (index > 0) return sendBytes(req, res, FILE, { ranges: true });
    res.writeHead(200, { "Content-Length": FILE.length });
    // End the socket gracefully (FIN, not RST) so every byte written reaches the client
    // before the body falls short of its Content-Length: the resume point is then exact.
    res.write(FILE.subarray(0, cut), () => res.socket!.end());
  });
  t.after(() => server.close());
  const dest = join(tempDir(), "file.bin");
  const retried: string[] = [];
  await downloadToFile(`${server.origin}/file.bin`, dest, { sleep: noSleep, onRetry: (e) => retried.push(e.message) });
  assert.deepEqual(new Uint8Array(await readFile(dest)), FILE);
  assert.equal(server.requests.length, 2);
  assert.equal(server.requests[1]!.headers.range, `bytes=${cut}-`);
  assert.equal(retried.length, 1);
});

test("a body of unknown length cut short is retried, not kept as the whole file", async (t) => {
  const server = await startServer((req, res, index) => {
    if (index > 0) return sendBytes(req, res, FILE, { ranges: true });
    res.writeHead(200); // chunked: no Content-Length to compare against
    res.write(FILE.subarray(0, 50_000), () => res.socket!.end());
  });
  t.after(() => server.close());
  const dest = join(tempDir(), "file.bin");
  await downloadToFile(`${server.origin}/file.bin`, dest, { sleep: noSleep });
  assert.deepEqual(new Uint8Array(await readFile(dest)), FILE);
  assert.equal(server.requests.length, 2);
});

test("retries 500s with exponentially growing delays, then succeeds", async (t) => {
  const server = await startServer((req, res, index) =>
    index < 3 ? res.writeHead(500).end() : sendBytes(req, res, FILE),
  );
  t.after(() => server.close());
  const dest = join(tempDir(), "file.bin");
  const delays: number[] = [];
  await downloadToFile(`${server.origin}/file.bin`, dest, { backoffMs: 5, sleep: async (ms) => void delays.push(ms) });
  assert.deepEqual(delays, [5, 10, 20]);
  assert.deepEqual(new Uint8Array(await readFile(dest)), FILE);
});

test("caps the backoff delay at maxBackoffMs", async (t) => {
  const server = await startServer((req, res, index) =>
    index < 4 ? res.writeHead(503).end() : sendBytes(req, res, FILE),
  );
  t.after(() => server.close());
  const delays: number[] = [];
  const sleep = async (ms: number) => void delays.push(ms);
  await downloadToFile(`${server.origin}/f`, join(tempDir(), "f"), { backoffMs: 5, maxBackoffMs: 12, sleep });
  assert.deepEqual(delays, [5, 10, 12, 12]);
});

test("gives up after the retry budget with an error naming the URL and status", async (t) => {
  const server = await startServer((_req, res) => res.writeHead(500).end());
  t.after(() => server.close());
  const dest = join(tempDir(), "file.bin");
  await assert.rejects(
    downloadToFile(`${server.origin}/file.bin`, dest, { retries: 2, sleep: noSleep }),
    (error: Error) => {
      assert.ok(error instanceof DownloadError);
      assert.match(error.message, /\/file\.bin: gave up after 3 failed attempts: .*HTTP 500/);
      return true;
    },
  );
  assert.equal(server.requests.length, 3);
  assert.equal(existsSync(dest), false);
});

test("does not retry a 404", async (t) => {
  const server = await startServer((_req, res) => res.writeHead(404).end());
  t.after(() => server.close());
  await assert.rejects(
    downloadToFile(`${server.origin}/missing`, join(tempDir(), "x"), { sleep: noSleep }),
    /HTTP 404/,
  );
  assert.equal(server.requests.length, 1);
});

test("rejects a file of the wrong size and keeps neither it nor its .part", async (t) => {
  const server = await startServer((req, res) => sendBytes(req, res, FILE));
  t.after(() => server.close());
  const folder = tempDir();
  const dest = join(folder, "file.bin");
  await assert.rejects(
    downloadToFile(`${server.origin}/file.bin`, dest, { expectedSize: FILE.length + 1 }),
    new RegExp(`got ${FILE.length} bytes, expected ${FILE.length + 1}`),
  );
  assert.deepEqual(await readdir(folder), []);
});

test("finishes a .part that already holds the whole file when the server answers 416", async (t) => {
  const server = await startServer((req, res) => sendBytes(req, res, FILE, { ranges: true }));
  t.after(() => server.close());
  const dest = join(tempDir(), "file.bin");
  await writeFile(`${dest}.part`, FILE);
  await downloadToFile(`${server.origin}/file.bin`, dest);
  assert.equal(server.requests[0]!.headers.range, `bytes=${FILE.length}-`);
  assert.deepEqual(new Uint8Array(await readFile(dest)), FILE);
});

test("retries a connection that stalls past the idle timeout", async (t) => {
  const server = await startServer((req, res, index) => {
    if (index === 0) return res.writeHead(200, { "Content-Length": FILE.length }).flushHeaders(); // then silence
    sendBytes(req, res, FILE);
  });
  t.after(() => server.close());
  const dest = join(tempDir(), "file.bin");
  await downloadToFile(`${server.origin}/file.bin`, dest, { idleTimeoutMs: 50, sleep: noSleep });
  assert.deepEqual(new Uint8Array(await readFile(dest)), FILE);
  assert.equal(server.requests.length, 2);
});

test("reports progress up to the full size", async (t) => {
  const server = await startServer((req, res) => sendBytes(req, res, FILE));
  t.after(() => server.close());
  const seen: [number, number | undefined][] = [];
  await downloadToFile(`${server.origin}/f`, join(tempDir(), "f"), {
    onProgress: (done, total) => seen.push([done, total]),
  });
  assert.deepEqual(seen[0], [0, FILE.length]);
  assert.deepEqual(seen.at(-1), [FILE.length, FILE.length]);
});

/** A local port that nothing listens on (one just released). */
async function closedPort(): Promise<number> {
  const server = await startServer(() => {});
  await server.close();
  return Number(new URL(server.origin).port);
}

test("a host whose name does not resolve is an UnreachableError at once, not retried", async () => {
  const retried: string[] = [];
  const url = "http://tsgrad-offline-test.invalid/file.bin";
  const error = await downloadToFile(url, join(tempDir(), "file.bin"), {
    onRetry: (e) => retried.push(e.message),
  }).catch((e: unknown) => e);
  assert.ok(error instanceof UnreachableError, String(error));
  assert.match(
    error.message,
    /^http:\/\/tsgrad-offline-test\.invalid\/file\.bin: cannot reach tsgrad-offline-test\.invalid \(getaddrinfo (ENOTFOUND|EAI_AGAIN)/,
  );
  assert.deepEqual(retried, []);
});

test("a closed port before any byte is an UnreachableError at once, not retried", async () => {
  const port = await closedPort();
  const retried: string[] = [];
  const error = await downloadToFile(`http://127.0.0.1:${port}/file.bin`, join(tempDir(), "file.bin"), {
    onRetry: (e) => retried.push(e.message),
  }).catch((e: unknown) => e);
  assert.ok(error instanceof UnreachableError, String(error));
  assert.match(error.message, new RegExp(`cannot reach 127\\.0\\.0\\.1:${port} \\(connect ECONNREFUSED`));
  assert.deepEqual(retried, []);
});

test("a host that goes away after bytes arrived is retried like a dropped link", async (t) => {
  const cut = 100_000;
  const first = await startServer((_req, res) => {
    res.writeHead(200, { "Content-Length": FILE.length });
    res.write(FILE.subarray(0, cut), () => res.socket!.end());
  });
  const port = Number(new URL(first.origin).port);
  let second: http.Server | undefined;
  t.after(() => second?.close());
  const retried: string[] = [];
  const dest = join(tempDir(), "file.bin");
  await downloadToFile(first.origin, dest, {
    onRetry: (e) => retried.push(e.message),
    // the first retry finds the port closed; before the second, the server is back
    sleep: async () => {
      if (retried.length === 1) await first.close();
      if (retried.length === 2) {
        second = http.createServer((req, res) => sendBytes(req, res, FILE, { ranges: true }));
        await new Promise<void>((resolve) => second!.listen(port, "127.0.0.1", resolve));
      }
    },
  });
  assert.deepEqual(new Uint8Array(await readFile(dest)), FILE);
  assert.equal(retried.length, 2);
  assert.match(retried[1]!, /cannot reach 127\.0\.0\.1:\d+ \(connect ECONNREFUSED/);
});
