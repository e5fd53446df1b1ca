import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { TableChecksumError } from "../../src/io/leveldb_table.ts";
import { assertClose } from "../close.ts";
import {
  listTfCheckpoint,
  readTfCheckpoint,
  readTfCheckpointIndex,
  tfCheckpointListingJson,
  TfChecksumError,
  TfCheckpointError,
} from "../../src/io/tf_checkpoint.ts";
import { writeTfBundle } from "./tf_bundle_writer.ts";

const FIXTURES = fileURLToPath(new URL("../fixtures/tf-checkpoint/", import.meta.url));
const T2T = join(FIXTURES, "tf1-t2t-transformer/model.ckpt-1");
const HALF_PLUS_TWO = join(FIXTURES, "tf1-serving-half-plus-two-mkl/variables");
const RUST_TF2 = join(FIXTURES, "tf2-rust-regression-savedmodel/variables");
const BERT = join(FIXTURES, "bert-uncased_L-8_H-512_A-8/bert_model.ckpt");
const BERT_SNAPPY = join(FIXTURES, "bert-index-snappy/bert_model.ckpt");

interface ReferenceEntry {
  name: string;
  dtype: string;
  dtype_enum: number;
  shape: number[];
  shard_id: number;
  offset: number;
  size: number;
  crc32c_masked: string;
  first_values?: (number | { len: number; md5: string })[];
  sum?: number;
}
interface ReferenceListing {
  header: unknown;
  table: unknown;
  entries: ReferenceEntry[];
}
const referenceListing = (prefix: string) =>
  JSON.parse(readFileSync(`${prefix}.index.listing.json`, "utf8")) as ReferenceListing;
const LISTED_FIELDS = ["name", "dtype", "dtype_enum", "shape", "shard_id", "offset", "size", "crc32c_masked"] as const;
const pickListed = (entry: object) =>
  Object.fromEntries(LISTED_FIELDS.map((field) => [field, (entry as Record<string, unknown>)[field]]));

const scratch = mkdtempSync(join(tmpdir(), "tsgrad-tf-checkpoint-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** A copy of a fixture checkpoint in the scratch folder, to corrupt or truncate. */
function copyCheckpoint(prefix: string, name: string): string {
  const folder = join(scratch, name);
  mkdirSync(folder);
  const base = prefix.slice(prefix.lastIndexOf("/") + 1);
  for (const file of readdirSync(join(prefix, ".."))) {
    if (file.startsWith(`${base}.`)) copyFileSync(join(prefix, "..", file), join(folder, file));
  }
  return join(folder, base);
}

function flipByte(file: string, offset: number): void {
  const bytes = readFileSync(file);
  bytes[offset]! ^= 0x01;
  writeFileSync(file, bytes);
}

for (const [fixture, prefix] of [
  ["t2t transformer (2 shards)", T2T],
  ["serving half_plus_two", HALF_PLUS_TWO],
  ["TF2 rust regression", RUST_TF2],
  ["BERT L-8 H-512", BERT],
] as const) {
  test(`lists the ${fixture} checkpoint exactly as its reference listing`, async () => {
    const listing = tfCheckpointListingJson(await readTfCheckpointIndex(prefix)) as ReferenceListing;
    const reference = referenceListing(prefix);
    assert.deepEqual(listing.header, reference.header);
    assert.deepEqual(listing.table, reference.table);
    assert.deepEqual(listing.entries.map(pickListed), reference.entries.map(pickListed));
  });
}

test("lists the BERT index recompressed by libsnappy exactly as the uncompressed original", async () => {
  const index = await readTfCheckpointIndex(BERT_SNAPPY);
  assert.deepEqual(
    index.table.dataBlocks.map((block) => [block.compression, block.size, block.entries]),
    [["snappy", 2392, 143]],
  );
  const listing = tfCheckpointListingJson(index) as ReferenceListing;
  const reference = referenceListing(BERT);
  assert.deepEqual(listing.header, reference.header);
  assert.deepEqual(listing.entries.map(pickListed), reference.entries.map(pickListed));
});

for (const [fixture, prefix] of [
  ["t2t transformer", T2T],
  ["serving half_plus_two", HALF_PLUS_TWO],
  ["TF2 rust regression", RUST_TF2],
] as const) {
  test(`reads every ${fixture} tensor with the reference's first values and sum`, async () => {
    const tensors = await readTfCheckpoint(prefix);
    const reference = referenceListing(prefix).entries;
    assert.equal(tensors.size, reference.length);
    for (const expected of reference) {
      const { data } = tensors.get(expected.name)!;
      if (Array.isArray(data)) {
        const strings = data.map((bytes) => ({
          len: bytes.length,
          md5: createHash("md5").update(bytes).digest("hex"),
        }));
        assert.deepEqual(strings.slice(0, 8), expected.first_values, expected.name);
        continue;
      }
      const values = Array.from(data as ArrayLike<number | bigint>, Number);
      assert.deepEqual(values.slice(0, 8), expected.first_values, expected.name);
      const sum = values.reduce((total, value) => total + value, 0);
      const magnitude = values.reduce((total, value) => total + Math.abs(value), 0);
      assertClose(sum, expected.sum!, { atol: 1e-12 * magnitude, rtol: 0, what: `${expected.name}: sum` });
    }
  });
}

test("reads half_plus_two's scalars a=0.5, b=2, c=3 as Float32Arrays", async () => {
  const tensors = await readTfCheckpoint(HALF_PLUS_TWO, { filter: (name) => name.length === 1 });
  assert.deepEqual([...tensors.keys()], ["a", "b", "c"]);
  for (const [name, value] of [
    ["a", 0.5],
    ["b", 2],
    ["c", 3],
  ] as const) {
    const tensor = tensors.get(name)!;
    assert.deepEqual(tensor, { dtype: "DT_FLOAT", shape: [], data: Float32Array.of(value) });
  }
});

test("reads int64 and int32 scalars from the first of two shards", async () => {
  const tensors = await readTfCheckpoint(T2T, {
    filter: (name) => ["global_step", "train_stats/problem_0_steps"].includes(name),
  });
  assert.deepEqual(tensors.get("global_step"), { dtype: "DT_INT64", shape: [], data: BigInt64Array.of(1n) });
  assert.deepEqual(tensors.get("train_stats/problem_0_steps"), {
    dtype: "DT_INT32",
    shape: [],
    data: Int32Array.of(0),
  });
});

test("reads a transformer kernel from the second shard with its shape", async () => {
  const name = "transformer/body/encoder/layer_0/self_attention/multihead_attention/q/kernel";
  const entry = (await listTfCheckpoint(T2T)).find((candidate) => candidate.name === name)!;
  assert.deepEqual([entry.shardId, entry.dtype, entry.shape], [1, "DT_FLOAT", [16, 16]]);
  const tensor = (await readTfCheckpoint(T2T, { filter: (candidate) => candidate === name })).get(name)!;
  assert.ok(tensor.data instanceof Float32Array);
  assert.equal(tensor.data.length, 256);
});

test("decodes the TF2 object graph string and checks its length-prefixed crc32c", async () => {
  const tensor = (await readTfCheckpoint(RUST_TF2, { filter: (name) => name === "_CHECKPOINTABLE_OBJECT_GRAPH" })).get(
    "_CHECKPOINTABLE_OBJECT_GRAPH",
  )!;
  assert.equal(tensor.dtype, "DT_STRING");
  assert.ok(Array.isArray(tensor.data));
  assert.equal(tensor.data.length, 1);
  assert.equal(createHash("md5").update(tensor.data[0]!).digest("hex"), "bd9c229b44f88e74d2da66207ba5c508");
});

test("a flipped data byte fails that tensor's crc32c, naming file, tensor and offset", async () => {
  const prefix = copyCheckpoint(T2T, "flipped-data");
  const victim = (await listTfCheckpoint(prefix)).find((entry) => entry.shardId === 1 && entry.size > 100)!;
  flipByte(`${prefix}.data-00001-of-00002`, victim.offset + 10);
  await assert.rejects(readTfCheckpoint(prefix, { filter: (name) => name === victim.name }), (error: unknown) => {
    assert.ok(error instanceof TfChecksumError);
    assert.ok(
      error.message.includes(`model.ckpt-1.data-00001-of-00002: tensor "${victim.name}" at byte ${victim.offset}`),
      error.message,
    );
    return true;
  });
});

test("tensors not selected by the filter are never read, so their corruption goes unnoticed", async () => {
  const prefix = copyCheckpoint(T2T, "flipped-other");
  const entries = await listTfCheckpoint(prefix);
  const [victim, wanted] = entries.filter((entry) => entry.shardId === 1 && entry.size > 100);
  flipByte(`${prefix}.data-00001-of-00002`, victim!.offset);
  const tensors = await readTfCheckpoint(prefix, { filter: (name) => name === wanted!.name });
  assert.deepEqual([...tensors.keys()], [wanted!.name]);
});

test("a flipped index byte fails the block crc32c, naming the file and block offset", async () => {
  const prefix = copyCheckpoint(HALF_PLUS_TWO, "flipped-index");
  flipByte(`${prefix}.index`, 100);
  await assert.rejects(listTfCheckpoint(prefix), (error: unknown) => {
    assert.ok(error instanceof TableChecksumError);
    assert.match(
      error.message,
      /variables\.index: data block at byte 0 \(263 bytes\): masked crc32c stored 0x[0-9a-f]{8} but computed/,
    );
    return true;
  });
});

test("a truncated data shard names the tensor that runs past its end", async () => {
  const prefix = copyCheckpoint(HALF_PLUS_TWO, "truncated-data");
  truncateSync(`${prefix}.data-00000-of-00001`, 30);
  await assert.rejects(readTfCheckpoint(prefix), (error: unknown) => {
    assert.ok(error instanceof TfCheckpointError);
    assert.match(
      error.message,
      /variables\.data-00000-of-00001: tensor "conv2d_2\/bias" at byte 28 \(4 bytes\): runs past the end of the 30-byte file/,
    );
    return true;
  });
});

test("a truncated index file is refused for its missing footer magic", async () => {
  const prefix = copyCheckpoint(HALF_PLUS_TWO, "truncated-index");
  truncateSync(`${prefix}.index`, 300);
  await assert.rejects(listTfCheckpoint(prefix), /variables\.index: bad table magic number in the footer at byte 292/);
});

test("a missing data shard is named with the first tensor that needs it", async () => {
  await assert.rejects(
    readTfCheckpoint(BERT),
    /bert_model\.ckpt\.data-00000-of-00001: cannot open the data shard of tensor "bert\/embeddings\/LayerNorm\/beta"/,
  );
});

test("follows the index block over several snappy-compressed data blocks", async () => {
  const prefix = join(scratch, "multi-block");
  const tensors = Array.from({ length: 40 }, (_, i) => ({
    name: `layer_${String(i).padStart(2, "0")}/kernel`,
    dtypeEnum: 1,
    shape: [2, 3],
    data: Float32Array.from({ length: 6 }, (_, j) => i + j / 8),
  }));
  writeTfBundle(prefix, tensors, { keysPerBlock: 7, restartInterval: 3, compression: "snappy" });
  const index = await readTfCheckpointIndex(prefix);
  assert.equal(index.table.dataBlocks.length, 6);
  assert.ok(index.table.dataBlocks.every((block) => block.compression === "snappy"));
  const read = await readTfCheckpoint(prefix);
  assert.deepEqual(
    [...read.keys()],
    tensors.map((tensor) => tensor.name),
  );
  for (const tensor of tensors)
    assert.deepEqual(read.get(tensor.name), { dtype: "DT_FLOAT", shape: [2, 3], data: tensor.data });
});

test("returns each dtype in its typed array, 16-bit floats as raw bits", async () => {
  const prefix = join(scratch, "dtypes");
  const cases = [
    { name: "double", dtypeEnum: 2, dtype: "DT_DOUBLE", data: Float64Array.of(1.5, -2) },
    { name: "half", dtypeEnum: 19, dtype: "DT_HALF", data: Uint16Array.of(0x3c00, 0xc000) },
    { name: "bfloat16", dtypeEnum: 14, dtype: "DT_BFLOAT16", data: Uint16Array.of(0x3f80, 0xc000) },
    { name: "int64", dtypeEnum: 9, dtype: "DT_INT64", data: BigInt64Array.of(-3n, 2n ** 40n) },
    { name: "bool", dtypeEnum: 10, dtype: "DT_BOOL", data: Uint8Array.of(1, 0) },
  ];
  writeTfBundle(
    prefix,
    cases.map(({ name, dtypeEnum, data }) => ({ name, dtypeEnum, shape: [2], data })),
  );
  const read = await readTfCheckpoint(prefix);
  for (const { name, dtype, data } of cases) assert.deepEqual(read.get(name), { dtype, shape: [2], data }, name);
});

test("the CLI (inspect.ts --no-verify) prints the listing as JSON with the reference listing's fields", () => {
  const cli = fileURLToPath(new URL("../../src/io/inspect.ts", import.meta.url));
  const stdout = execFileSync(
    process.execPath,
    ["--import", "tsx", cli, `${HALF_PLUS_TWO}.index`, "--json", "--no-verify"],
    { encoding: "utf8" },
  );
  const listing = JSON.parse(stdout) as ReferenceListing;
  const reference = referenceListing(HALF_PLUS_TWO);
  assert.deepEqual(listing.entries, reference.entries.map(pickListed));
  assert.deepEqual(listing.table, reference.table);
});
