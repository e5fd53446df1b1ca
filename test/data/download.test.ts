// downloadBertData end to end against a local stand-in for Google Drive; the reference's
// real ids and URLs cannot be reached from tests (or this machine) and are not exercised.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { readFile, readdir, writeFile } from "node:fs/promises";
import type http from "node:http";
import { join } from "node:path";
import { promisify } from "node:util";
import {
  DOWNLOAD_INPUT_ERRORS,
  OfflineError,
  downloadBertData,
  referencePlan,
  type DownloadPlan,
  type RemoteFile,
} from "../../mlperf/bert/data/download.ts";
import { ChecksumError } from "../../mlperf/bert/data/checksums.ts";
import { EXIT_BAD_INPUT, exitStatusOf } from "../../mlperf/bert/exit_status.ts";
import { sendBytes, startServer, virusScanPage, type FixtureServer } from "./httpFixtureServer.ts";
import { scratchDir } from "../scratch.ts";

const FIXTURES = new URL("../fixtures/download/", import.meta.url).pathname;
const md5 = (bytes: Uint8Array) => createHash("md5").update(bytes).digest("hex");
const quiet = { write: () => true };
const fast = { backoffMs: 1, sleep: async () => {} };

/** Files by Drive id; ids starting with "big" get the virus-scan page first, as Drive does. */
function driveStandIn(
  files: Record<string, Uint8Array>,
): (req: http.IncomingMessage, res: http.ServerResponse) => void {
  return (req, res) => {
    const url = new URL(req.url ?? "", `http://${req.headers.host}`);
    const id = url.searchParams.get("id") ?? "";
    const bytes = files[id];
    if (!bytes) return void res.writeHead(404).end();
    if (url.pathname === "/uc" && id.startsWith("big")) {
      res.writeHead(200, {
        "Content-Type": "text/html; charset=utf-8",
        "Set-Cookie": "NID=abc; Domain=127.0.0.1; Path=/",
      });
      return void res.end(virusScanPage(`http://${req.headers.host}/download`, id, "uuid-42"));
    }
    sendBytes(req, res, bytes, { ranges: true, headers: { "Content-Disposition": `attachment; filename="${id}"` } });
  };
}

const CONFIG = new TextEncoder().encode('{"hidden_size": 1024}\n');
const VOCAB = new TextEncoder().encode("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n");
const CKPT_DATA = new Uint8Array(randomBytes(200_000));

function smallPlan(origin: string): DownloadPlan {
  const file = (name: string, id: string, bytes: Uint8Array): RemoteFile => ({
    name,
    url: `${origin}/uc?id=${id}&export=download`,
    size: bytes.length,
    md5: md5(bytes),
  });
  return {
    files: [
      file("bert_config.json", "config", CONFIG),
      file("vocab.txt", "vocab", VOCAB),
      file("model.ckpt-28252.data-00000-of-00001", "bigdata", CKPT_DATA),
    ],
    checkpoint: "model.ckpt-28252",
  };
}

async function serveSmallPlan(t: { after: (fn: () => Promise<void>) => void }): Promise<FixtureServer> {
  const server = await startServer(driveStandIn({ config: CONFIG, vocab: VOCAB, bigdata: CKPT_DATA }));
  t.after(() => server.close());
  return server;
}

const tempDir = () => scratchDir("download-");

test("fetches every file of the plan into BASEDIR and writes the checkpoint state file", async (t) => {
  const server = await serveSmallPlan(t);
  const basedir = join(tempDir(), "wiki");
  await downloadBertData(smallPlan(server.origin), { basedir, verifyChecksum: true, log: quiet, http: fast });
  assert.deepEqual((await readdir(basedir)).sort(), [
    "bert_config.json",
    "checkpoint",
    "model.ckpt-28252.data-00000-of-00001",
    "vocab.txt",
  ]);
  assert.deepEqual(new Uint8Array(await readFile(join(basedir, "model.ckpt-28252.data-00000-of-00001"))), CKPT_DATA);
  assert.equal(
    await readFile(join(basedir, "checkpoint"), "utf8"),
    'model_checkpoint_path: "model.ckpt-28252"\nall_model_checkpoint_paths: "model.ckpt-28252"\n',
  );
});

test("passes Drive's virus-scan page by submitting its form with confirm and uuid", async (t) => {
  const server = await serveSmallPlan(t);
  const basedir = tempDir();
  await downloadBertData(smallPlan(server.origin), { basedir, log: quiet, http: fast });
  const bigRequests = server.requests.filter((r) => r.url.includes("bigdata"));
  assert.deepEqual(
    bigRequests.map((r) => r.url),
    ["/uc?id=bigdata&export=download", "/download?id=bigdata&export=download&confirm=t&uuid=uuid-42"],
  );
  assert.equal(bigRequests[1]!.headers.cookie, "NID=abc");
});

test("skips files that are already complete", async (t) => {
  const server = await serveSmallPlan(t);
  const basedir = tempDir();
  await downloadBertData(smallPlan(server.origin), { basedir, log: quiet, http: fast });
  const before = server.requests.length;
  await downloadBertData(smallPlan(server.origin), { basedir, verifyChecksum: true, log: quiet, http: fast });
  assert.equal(server.requests.length, before);
});

test("resumes a checkpoint download from the .part an interrupted run left", async (t) => {
  const server = await serveSmallPlan(t);
  const basedir = tempDir();
  await writeFile(join(basedir, "model.ckpt-28252.data-00000-of-00001.part"), CKPT_DATA.subarray(0, 150_000));
  await downloadBertData(smallPlan(server.origin), { basedir, verifyChecksum: true, log: quiet, http: fast });
  assert.equal(server.requests.find((r) => r.url.startsWith("/download"))!.headers.range, "bytes=150000-");
  assert.deepEqual(new Uint8Array(await readFile(join(basedir, "model.ckpt-28252.data-00000-of-00001"))), CKPT_DATA);
});

test("a file of the wrong size already in BASEDIR is an error and is left alone", async (t) => {
  const server = await serveSmallPlan(t);
  const basedir = tempDir();
  await writeFile(join(basedir, "vocab.txt"), "someone else's vocab\n");
  await assert.rejects(
    downloadBertData(smallPlan(server.origin), { basedir, log: quiet, http: fast }),
    /vocab\.txt has 21 bytes, expected 35: delete it/,
  );
  assert.equal(await readFile(join(basedir, "vocab.txt"), "utf8"), "someone else's vocab\n");
});

test("VERIFY_CHECKSUM: a published md5 that does not match names the file, expected and actual", async (t) => {
  const server = await serveSmallPlan(t);
  const basedir = tempDir();
  const plan = smallPlan(server.origin);
  plan.files[1]!.md5 = "64800d5d8528ce344256daf115d4965e";
  await assert.rejects(
    downloadBertData(plan, { basedir, verifyChecksum: true, log: quiet, http: fast }),
    (error: Error) => {
      assert.ok(error instanceof ChecksumError);
      assert.equal(error.file, join(basedir, "vocab.txt"));
      assert.equal(error.expected, "64800d5d8528ce344256daf115d4965e");
      assert.equal(error.actual, md5(VOCAB));
      assert.equal(error.movedTo, join(basedir, "vocab.txt.bad-md5"));
      assert.match(error.message, /the file is now .*vocab\.txt\.bad-md5/);
      return true;
    },
  );
  // fetched twice, and the bad copy is not left under its own name for a rerun to take as done
  assert.equal(existsSync(join(basedir, "vocab.txt")), false);
  assert.deepEqual(new Uint8Array(await readFile(join(basedir, "vocab.txt.bad-md5"))), VOCAB);
});

test("VERIFY_CHECKSUM: a copy in BASEDIR whose md5 is wrong is moved aside and fetched again", async (t) => {
  const server = await serveSmallPlan(t);
  const basedir = tempDir();
  const damaged = new Uint8Array(VOCAB);
  damaged[3] ^= 0x20; // one flipped bit, same size: only the md5 can tell
  await writeFile(join(basedir, "vocab.txt"), damaged);
  // and a temp file that a killed download left behind
  const gone = spawnSync(process.execPath, ["-e", ""]).pid!;
  await writeFile(join(basedir, `.vocab.txt.${gone}.tmp`), "half");
  const lines: string[] = [];
  const log = { write: (line: string) => void lines.push(line), isTTY: false } as unknown as NodeJS.WriteStream;
  await downloadBertData(smallPlan(server.origin), { basedir, verifyChecksum: true, log, http: fast });
  assert.deepEqual(new Uint8Array(await readFile(join(basedir, "vocab.txt"))), VOCAB);
  assert.deepEqual(new Uint8Array(await readFile(join(basedir, "vocab.txt.bad-md5"))), damaged);
  assert.equal(existsSync(join(basedir, `.vocab.txt.${gone}.tmp`)), false);
  assert.ok(lines.includes(`removed .vocab.txt.${gone}.tmp, left by a download that was killed\n`), lines.join(""));
  assert.ok(
    lines.some((l) =>
      /vocab\.txt: md5 [0-9a-f]{32} is not the published [0-9a-f]{32}; moved to .*fetching again/.test(l),
    ),
    lines.join(""),
  );
});

async function serveText(
  t: { after: (fn: () => Promise<void>) => void },
  md5List: Uint8Array,
): Promise<{ server: FixtureServer; plan: DownloadPlan }> {
  const archive = new Uint8Array(await readFile(join(FIXTURES, "text.tar.gz")));
  const server = await startServer(driveStandIn({ sums: md5List, bigtext: archive }));
  t.after(() => server.close());
  const plan: DownloadPlan = {
    files: [],
    text: {
      md5List: { name: "bert_reference_results_text_md5.txt", url: `${server.origin}/uc?id=sums` },
      archive: { name: "results_text.tar.gz", url: `${server.origin}/uc?id=bigtext` },
      folder: "results4",
    },
  };
  return { server, plan };
}

test("WIKI_TRAIN: fetches, unpacks and verifies the text, deletes the archive, and skips it all next time", async (t) => {
  const { server, plan } = await serveText(t, await readFile(join(FIXTURES, "text.md5")));
  const basedir = tempDir();
  await downloadBertData(plan, { basedir, verifyChecksum: true, log: quiet, http: fast });
  assert.equal(
    await readFile(join(basedir, "results4", "eval.txt"), "utf8"),
    "Eval sentence one.\nEval sentence two.\n",
  );
  assert.equal(existsSync(join(basedir, "results_text.tar.gz")), false);
  const before = server.requests.length;
  await downloadBertData(plan, { basedir, verifyChecksum: true, log: quiet, http: fast });
  assert.equal(server.requests.length, before);
});

test("WIKI_TRAIN: a text part that differs from the md5 list is an error naming it, and the archive is kept", async (t) => {
  const list = (await readFile(join(FIXTURES, "text.md5"), "utf8")).replace(
    /^[0-9a-f]{32}(?= {2}\.\/eval\.txt)/m,
    "0".repeat(32),
  );
  const { plan } = await serveText(t, new TextEncoder().encode(list));
  const basedir = tempDir();
  await assert.rejects(
    downloadBertData(plan, { basedir, verifyChecksum: true, log: quiet, http: fast }),
    new RegExp(`md5 mismatch for ${join(basedir, "results4", "eval.txt")}: expected 0{32}, got [0-9a-f]{32}`),
  );
  assert.equal(existsSync(join(basedir, "results_text.tar.gz")), true);
});

test("the reference plan lays out the files as the reference's download script does", () => {
  const names = (plan: DownloadPlan) => [
    ...plan.files.map((f) => f.name),
    plan.text?.md5List.name,
    plan.text?.archive.name,
    plan.text?.folder,
  ];
  assert.deepEqual(names(referencePlan(false)), [
    "bert_config.json",
    "vocab.txt",
    "model.ckpt-28252.data-00000-of-00001",
    "model.ckpt-28252.index",
    "model.ckpt-28252.meta",
    undefined,
    undefined,
    undefined,
  ]);
  assert.deepEqual(names(referencePlan(true)).slice(5), [
    "bert_reference_results_text_md5.txt",
    "results_text.tar.gz",
    "results4",
  ]);
  assert.equal(referencePlan(true).checkpoint, "model.ckpt-28252");
});

test("the CLI prints its usage with --help", async () => {
  const script = new URL("../../mlperf/bert/data/download.ts", import.meta.url).pathname;
  const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", script, "--help"]);
  assert.match(stdout, /^usage: npx tsx mlperf\/bert\/data\/download\.ts/);
  assert.match(stdout, /VERIFY_CHECKSUM=1/);
});

/** Runs `downloadBertData` with the default retry settings, returning what it threw and how long it took. */
async function timedFailure(plan: DownloadPlan, basedir: string): Promise<{ error: unknown; ms: number }> {
  const started = performance.now();
  const error = await downloadBertData(plan, { basedir, log: quiet }).catch((e: unknown) => e);
  return { error, ms: performance.now() - started };
}

test("offline (a name that does not resolve): says so in under 5 s, naming the URL and the files to place by hand", async () => {
  const basedir = tempDir();
  const plan = smallPlan("http://tsgrad-offline-test.invalid");
  const { error, ms } = await timedFailure(plan, basedir);
  assert.ok(error instanceof OfflineError, String(error));
  assert.ok(ms < 5000, `${ms.toFixed(0)} ms`);
  const [first, ...guide] = error.message.split("\n");
  assert.match(
    first!,
    /^http:\/\/tsgrad-offline-test\.invalid\/uc\?id=config&export=download: cannot reach tsgrad-offline-test\.invalid \(getaddrinfo (ENOTFOUND|EAI_AGAIN) .*\): the network or the host is unreachable$/,
  );
  assert.equal(
    guide[0],
    `To place the files by hand, fetch them where there is a network and copy them into BASEDIR=${basedir}:`,
  );
  for (const file of plan.files) {
    assert.ok(guide.includes(`  ${join(basedir, file.name)} (${file.size} bytes, md5 ${file.md5})`), file.name);
    assert.ok(guide.includes(`      from ${file.url}`), file.url);
  }
  assert.match(guide.at(-1)!, /^then run this command again: files already there are skipped/);
  assert.equal(exitStatusOf(error, DOWNLOAD_INPUT_ERRORS), EXIT_BAD_INPUT);
});

test("offline (a closed port): says so in under 5 s and lists only the files not yet in BASEDIR", async () => {
  const server = await startServer(() => {});
  await server.close();
  const basedir = tempDir();
  const plan = smallPlan(server.origin);
  plan.text = referencePlan(true).text;
  await writeFile(join(basedir, "bert_config.json"), CONFIG);
  const { error, ms } = await timedFailure(plan, basedir);
  assert.ok(error instanceof OfflineError, String(error));
  assert.ok(ms < 5000, `${ms.toFixed(0)} ms`);
  assert.match(error.message, /^http:\/\/127\.0\.0\.1:\d+\/uc\?id=vocab&export=download: cannot reach .*ECONNREFUSED/);
  const placed = error.message.split("\n").filter((line) => line.startsWith(`  ${basedir}`));
  assert.deepEqual(
    placed.map((line) => line.trim().split(" ")[0]),
    [
      "vocab.txt",
      "model.ckpt-28252.data-00000-of-00001",
      "bert_reference_results_text_md5.txt",
      "results_text.tar.gz",
    ].map((name) => join(basedir, name)),
  );
  assert.match(placed.at(-1)!, /results_text\.tar\.gz \(unpacked here into results4\/\)$/);
});

test("the CLI with no network at all exits 2 in under 5 s, saying what to do", () => {
  const script = new URL("../../mlperf/bert/data/download.ts", import.meta.url).pathname;
  const node = [process.execPath, "--import", "tsx", script];
  // a network namespace of its own where one is allowed (root, user namespaces); else every name lookup fails
  const offline =
    spawnSync("unshare", ["-n", "true"]).status === 0
      ? ["unshare", "-n", ...node]
      : [process.execPath, "--import", new URL("./offline_dns.mjs", import.meta.url).pathname, ...node.slice(1)];
  const basedir = tempDir();
  const started = performance.now();
  const run = spawnSync(offline[0]!, offline.slice(1), {
    env: { ...process.env, BASEDIR: basedir, WIKI_TRAIN: "0" },
    encoding: "utf8",
  });
  assert.ok(performance.now() - started < 5000, `${(performance.now() - started).toFixed(0)} ms`);
  assert.equal(run.status, EXIT_BAD_INPUT, run.stderr);
  assert.match(run.stderr, /\ndownload: https:\/\/drive\.google\.com\/uc\?id=\S+: cannot reach drive\.google\.com /);
  assert.match(run.stderr, /copy them into BASEDIR=/);
  assert.ok(run.stderr.includes(`${join(basedir, "vocab.txt")} (231508 bytes, md5 64800d5d8528ce344256daf115d4965e)`));
});
