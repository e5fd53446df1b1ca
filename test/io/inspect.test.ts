import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { InspectError, inspectFile } from "../../src/io/inspect.ts";
import { writeSafetensorsFile } from "../../src/io/safetensors.ts";
import { writeTfBundle } from "./tf_bundle_writer.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const FIXTURES = fileURLToPath(new URL("../fixtures/tf-checkpoint/", import.meta.url));
const HALF_PLUS_TWO = join(FIXTURES, "tf1-serving-half-plus-two-mkl/variables");
const T2T = join(FIXTURES, "tf1-t2t-transformer/model.ckpt-1");
const BERT_INDEX_ONLY = join(FIXTURES, "bert-uncased_L-8_H-512_A-8/bert_model.ckpt");

interface ReferenceEntry {
  name: string;
  dtype: string;
  shape: number[];
  shard_id: number;
  offset: number;
  size: number;
}
const referenceEntries = (prefix: string) =>
  (JSON.parse(readFileSync(`${prefix}.index.listing.json`, "utf8")) as { entries: ReferenceEntry[] }).entries;

const scratch = mkdtempSync(join(tmpdir(), "tsgrad-inspect-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

function inspectCli(...args: string[]) {
  const run = spawnSync(process.execPath, ["--import", "tsx", "src/io/inspect.ts", ...args], {
    cwd: ROOT,
    encoding: "utf8",
  });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

/** A small safetensors file: an F32 [2, 3] and an I32 [4], with known bytes. */
const SMALL_TENSORS = {
  "encoder/weight": { dtype: "F32" as const, shape: [2, 3], data: Float32Array.of(1, 2, 3, 4, 5, 6) },
  "encoder/step": { dtype: "I32" as const, shape: [4], data: Int32Array.of(-1, 0, 7, 2 ** 30) },
};
function writeSmallSafetensors(name: string): string {
  const path = join(scratch, name);
  writeSafetensorsFile(path, SMALL_TENSORS);
  return path;
}

/** A copy of a fixture checkpoint (index and data shards) in the scratch folder. */
function copyCheckpoint(prefix: string, name: string): string {
  const folder = join(scratch, name);
  mkdirSync(folder);
  const base = prefix.slice(prefix.lastIndexOf("/") + 1);
  for (const file of readdirSync(join(prefix, ".."))) {
    if (file.startsWith(`${base}.`) && !file.endsWith(".json"))
      copyFileSync(join(prefix, "..", file), join(folder, file));
  }
  return join(folder, base);
}

test("lists a checkpoint with data as its reference listing, every crc checked ok", async () => {
  const inspection = await inspectFile(HALF_PLUS_TWO);
  assert.equal(inspection.format, "tf-checkpoint");
  const reference = referenceEntries(HALF_PLUS_TWO);
  assert.deepEqual(
    inspection.tensors.map(({ name, dtype, shape, offset, size }) => ({ name, dtype, shape, offset, size })),
    reference.map(({ name, dtype, shape, offset, size }) => ({ name, dtype, shape, offset, size })),
  );
  assert.deepEqual(new Set(inspection.tensors.map((tensor) => tensor.check)), new Set(["ok"]));
});

test("lists a two-shard checkpoint given its .index file, naming each tensor's shard", async () => {
  const inspection = await inspectFile(`${T2T}.index`);
  const reference = referenceEntries(T2T);
  assert.equal(inspection.tensors.length, 250);
  assert.deepEqual(
    inspection.tensors.map(({ name, file }) => ({ name, file })),
    reference.map(({ name, shard_id }) => ({ name, file: `${T2T}.data-0000${shard_id}-of-00002` })),
  );
  assert.equal(inspection.tensors.filter((tensor) => tensor.check === "ok").length, 250);
});

test("lists a checkpoint whose data file is absent, every tensor marked without data, and exits 0", async () => {
  const inspection = await inspectFile(BERT_INDEX_ONLY);
  assert.deepEqual(
    inspection.tensors.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
    referenceEntries(BERT_INDEX_ONLY).map(({ name, dtype, shape }) => ({ name, dtype, shape })),
  );
  assert.deepEqual(new Set(inspection.tensors.map((tensor) => tensor.check)), new Set(["absent"]));
  const run = inspectCli(BERT_INDEX_ONLY);
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /^bert\/embeddings\/word_embeddings\tDT_FLOAT\t\[30522, 512\]\tdata absent$/m);
  assert.match(run.stderr, /0 ok, 0 mismatched, 0 unreadable, 142 without data/);
});

test("lists a safetensors file with the byte offset and size of each tensor's data", async () => {
  const path = writeSmallSafetensors("small.safetensors");
  const inspection = await inspectFile(path);
  assert.equal(inspection.format, "safetensors");
  assert.deepEqual(
    inspection.tensors.map(({ name, dtype, shape, size }) => ({ name, dtype, shape, size })),
    [
      { name: "encoder/weight", dtype: "F32", shape: [2, 3], size: 24 },
      { name: "encoder/step", dtype: "I32", shape: [4], size: 16 },
    ],
  );
  const bytes = readFileSync(path);
  for (const { name, offset, size } of inspection.tensors) {
    const data = SMALL_TENSORS[name as keyof typeof SMALL_TENSORS].data;
    assert.deepEqual(bytes.subarray(offset, offset + size), Buffer.from(data.buffer), name);
  }
});

test("the CLI prints one tab-separated line per safetensors tensor", () => {
  const run = inspectCli(writeSmallSafetensors("cli.safetensors"));
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stdout, "encoder/weight\tF32\t[2, 3]\tcrc ok\nencoder/step\tI32\t[4]\tcrc ok\n");
});

test("a flipped byte in a safetensors file's data is a mismatch for that tensor alone, exit status 1", async () => {
  const path = writeSmallSafetensors("flipped.safetensors");
  const inspection = await inspectFile(path);
  const step = inspection.tensors.find((tensor) => tensor.name === "encoder/step")!;
  const bytes = readFileSync(path);
  bytes[step.offset + 2]! ^= 0x01;
  writeFileSync(path, bytes);
  const verdicts = (await inspectFile(path)).tensors.map(({ name, check }) => [name, check]);
  assert.deepEqual(verdicts, [
    ["encoder/weight", "ok"],
    ["encoder/step", "mismatch"],
  ]);
  const run = inspectCli(path);
  assert.equal(run.status, 1);
  assert.match(run.stderr, /1 ok, 1 mismatched/);
  assert.match(run.stderr, new RegExp(`${path}: tensor "encoder/step", byte offset ${step.offset}: the CRC-32C`));
  assert.deepEqual(
    (await inspectFile(path, { verify: false })).tensors.map(({ check }) => check),
    [undefined, undefined],
  );
});

test("the CLI's --json gives each safetensors tensor's byte offset and size", () => {
  const path = writeSmallSafetensors("json.safetensors");
  const run = inspectCli(path, "--json");
  assert.equal(run.status, 0, run.stderr);
  const listing = JSON.parse(run.stdout) as {
    format: string;
    entries: { name: string; offset: number; size: number }[];
  };
  assert.equal(listing.format, "safetensors");
  const dataStart = 8 + Number(readFileSync(path).readBigUInt64LE(0));
  assert.deepEqual(
    listing.entries.map(({ name, offset, size }) => ({ name, offset, size })),
    [
      { name: "encoder/weight", offset: dataStart, size: 24 },
      { name: "encoder/step", offset: dataStart + 24, size: 16 },
    ],
  );
});

test("the CLI's --json gives each checkpoint tensor's shard, byte offset, size and crc verdict", () => {
  const run = inspectCli(`${HALF_PLUS_TWO}.index`, "--json");
  assert.equal(run.status, 0, run.stderr);
  const listing = JSON.parse(run.stdout) as { format: string; entries: (ReferenceEntry & { crc_check: string })[] };
  assert.equal(listing.format, "tf-checkpoint");
  assert.deepEqual(
    listing.entries.map(({ name, shard_id, offset, size, crc_check }) => ({ name, shard_id, offset, size, crc_check })),
    referenceEntries(HALF_PLUS_TWO).map(({ name, shard_id, offset, size }) => ({
      name,
      shard_id,
      offset,
      size,
      crc_check: "ok",
    })),
  );
});

test("a flipped data byte fails the CLI, naming the file, tensor and byte offset", () => {
  const prefix = copyCheckpoint(HALF_PLUS_TWO, "corrupt");
  const dataFile = `${prefix}.data-00000-of-00001`;
  const victim = referenceEntries(HALF_PLUS_TWO).find((entry) => entry.name === "conv2d/kernel")!;
  const bytes = readFileSync(dataFile);
  bytes[victim.offset + 1]! ^= 0x10;
  writeFileSync(dataFile, bytes);
  const run = inspectCli(prefix);
  assert.equal(run.status, 1);
  assert.match(run.stdout, /^conv2d\/kernel\tDT_FLOAT\t\[1, 1, 1, 1\]\tcrc MISMATCH$/m);
  assert.match(run.stdout, /^conv2d\/bias\tDT_FLOAT\t\[1\]\tcrc ok$/m);
  assert.ok(
    run.stderr.includes(`${dataFile}: tensor "conv2d/kernel" at byte ${victim.offset}: masked crc32c stored`),
    run.stderr,
  );
  assert.match(run.stderr, /8 ok, 1 mismatched/);
});

test("a tensor whose bytes cannot be decoded is reported unreadable while the others are still checked", async () => {
  const folder = join(scratch, "garbled-strings");
  mkdirSync(folder);
  const prefix = join(folder, "model.ckpt");
  writeTfBundle(prefix, [
    { name: "a/weights", dtypeEnum: 1, shape: [2], data: Float32Array.of(0.5, -2) },
    // DT_STRING whose one length varint never ends
    { name: "b/vocab", dtypeEnum: 7, shape: [1], data: Uint8Array.of(0xff) },
    { name: "c/bias", dtypeEnum: 1, shape: [1], data: Float32Array.of(3) },
  ]);
  const inspection = await inspectFile(prefix);
  assert.deepEqual(
    inspection.tensors.map(({ name, check }) => ({ name, check })),
    [
      { name: "a/weights", check: "ok" },
      { name: "b/vocab", check: "unreadable" },
      { name: "c/bias", check: "ok" },
    ],
  );
  assert.match(
    inspection.tensors[1]!.problem!,
    /model\.ckpt\.data-00000-of-00001: tensor "b\/vocab" at byte 8: string length 0: varint runs past the end/,
  );
  const run = inspectCli(prefix);
  assert.equal(run.status, 1);
  assert.match(run.stderr, /2 ok, 0 mismatched, 1 unreadable/);
});

test("a file that is neither format is refused with an error naming it", async () => {
  const path = join(scratch, "notes.index");
  writeFileSync(path, "not weights, whatever the name says\n");
  await assert.rejects(inspectFile(path), (error: unknown) => {
    assert.ok(error instanceof InspectError);
    assert.match(error.message, /notes\.index: neither a safetensors file .* nor a TensorFlow checkpoint index/);
    return true;
  });
  const run = inspectCli(path);
  assert.equal(run.status, 1);
  assert.match(run.stderr, /notes\.index: neither a safetensors file/);
});

test("the format is told by content, not by the file's name", async () => {
  const path = writeSmallSafetensors("weights.index");
  const inspection = await inspectFile(path);
  assert.equal(inspection.format, "safetensors");
  assert.equal(inspection.tensors.length, 2);
});

test("a path that names no file, nor PATH.index, is refused", async () => {
  await assert.rejects(inspectFile(join(scratch, "missing")), /missing: no such file \(nor .*missing\.index\)/);
});

test("--help prints the usage and exits 0", () => {
  const run = inspectCli("--help");
  assert.equal(run.status, 0);
  assert.match(run.stdout, /^usage: npx tsx src\/io\/inspect\.ts FILE \[--json\]/);
});
