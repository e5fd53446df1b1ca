// Stage 1 of the MLPerf BERT pipeline: fetch the model config, vocabulary and TF1 init
// checkpoint (and with WIKI_TRAIN=1 the preprocessed Wikipedia text) into BASEDIR, the way
// the reference's download script lays them out, then check their published MD5s.
//
//   npx tsx mlperf/bert/data/download.ts [--help]
import { existsSync } from "node:fs";
import { mkdir, readFile, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { getenv, io } from "../../../src/index.ts";
import { basedirFromEnv, defaultBasedir } from "./basedir.ts";
import { ByteProgress, type ProgressSink } from "./byteProgress.ts";
import { ChecksumError, Md5ListError, parseMd5List, verifyMd5, verifyMd5List } from "./checksums.ts";
import { DriveError, confirmedDownloadUrl, driveUrl } from "./googleDrive.ts";
import { DownloadError, UnreachableError, downloadToFile, type DownloadOptions } from "./http.ts";
import { TarError, extractTarGz } from "./untar.ts";
import { UsageError, reportFailure } from "../exit_status.ts";

/** A file to fetch: its name in BASEDIR, where it comes from, and what it must be. */
export interface RemoteFile {
  name: string;
  url: string;
  md5?: string;
  size?: number;
}

/** The preprocessed Wikipedia text: a tar.gz of `folder/`, and the md5sum list of its files. */
export interface WikiText {
  archive: RemoteFile;
  md5List: RemoteFile;
  folder: string;
}

export interface DownloadPlan {
  files: RemoteFile[];
  /** Name of the TF checkpoint for which to write a `checkpoint` state file, if any. */
  checkpoint?: string;
  text?: WikiText;
}

/** The init checkpoint's name: the reference's `INIT_CKPT_DIR` holds `<name>.index` etc. */
export const INIT_CHECKPOINT = "model.ckpt-28252";

// Drive ids as in tinygrad's extra/datasets/wikipedia_download.py (from MLCommons'
// language_model/tensorflow/bert/dataset.md); sizes and MD5s from MLCommons' table.
export const REFERENCE_FILES: readonly RemoteFile[] = [
  {
    name: "bert_config.json",
    url: driveUrl("1fbGClQMi2CoMv7fwrwTC5YYPooQBdcFW"),
    size: 314,
    md5: "7f59165e21b7d566db610ff6756c926b",
  },
  {
    name: "vocab.txt",
    url: driveUrl("1USK108J6hMM_d27xCHi738qBL8_BT1u1"),
    size: 231_508,
    md5: "64800d5d8528ce344256daf115d4965e",
  },
  {
    name: `${INIT_CHECKPOINT}.data-00000-of-00001`,
    url: driveUrl("1chiTBljF0Eh1U5pKs6ureVHgSbtU8OG_"),
    size: 4_034_713_312,
    md5: "50797acd537880bfb5a7ade80d976129",
  },
  {
    name: `${INIT_CHECKPOINT}.index`,
    url: driveUrl("1Q47V3K3jFRkbJ2zGCrKkKk-n0fvMZsa0"),
    size: 17_371,
    md5: "f97de3ae180eb8d479555c939d50d048",
  },
  {
    name: `${INIT_CHECKPOINT}.meta`,
    url: driveUrl("1vAcVmXSLsLeQ1q7gvHnQUSth5W_f_pwv"),
    size: 24_740_228,
    md5: "dbd16c731e8a8113bc08eeed0326b8e7",
  },
];

/** `results_text.tar.gz` unpacks to `results4/` (500 parts, eval.txt, eval.md5). */
export const REFERENCE_TEXT: WikiText = {
  md5List: { name: "bert_reference_results_text_md5.txt", url: driveUrl("1tmMgLwoBvbEJEHXh77sqrXYw5RpqT8R_") },
  archive: { name: "results_text.tar.gz", url: driveUrl("14xV2OUGSQDG_yDBrmbSdcDC-QGeqpfs_") },
  folder: "results4",
};

/** What the reference fetches; the Wikipedia text only with `wikiTrain` (WIKI_TRAIN=1). */
export function referencePlan(wikiTrain: boolean): DownloadPlan {
  return { files: [...REFERENCE_FILES], checkpoint: INIT_CHECKPOINT, text: wikiTrain ? REFERENCE_TEXT : undefined };
}

export interface DownloadBertOptions {
  basedir: string;
  /** Check every file's MD5 (VERIFY_CHECKSUM=1), downloaded now or before. */
  verifyChecksum?: boolean;
  /** Retry and timeout settings passed to each download. */
  http?: Pick<DownloadOptions, "retries" | "backoffMs" | "maxBackoffMs" | "idleTimeoutMs" | "sleep">;
  /** Progress and notes (default stderr). */
  log?: ProgressSink;
}

/** No network to download from: says so, and which files to place in BASEDIR by hand instead. */
export class OfflineError extends Error {
  constructor(unreachable: UnreachableError, basedir: string, missing: readonly RemoteFile[], text?: WikiText) {
    super(`${unreachable.message}\n${handPlacementGuide(basedir, missing, text)}`, { cause: unreachable });
    this.name = "OfflineError";
  }
}

/** Where each missing file goes, its size and MD5 where published, and where it comes from. */
function handPlacementGuide(basedir: string, missing: readonly RemoteFile[], text?: WikiText): string {
  const lines = [
    `To place the files by hand, fetch them where there is a network and copy them into BASEDIR=${basedir}:`,
  ];
  for (const file of missing) {
    const facts = [
      ...(file.size === undefined ? [] : [`${file.size} bytes`]),
      ...(file.md5 === undefined ? [] : [`md5 ${file.md5}`]),
      ...(file === text?.archive ? [`unpacked here into ${text.folder}/`] : []),
    ];
    lines.push(`  ${join(basedir, file.name)}${facts.length > 0 ? ` (${facts.join(", ")})` : ""}`);
    lines.push(`      from ${file.url}`);
  }
  lines.push("then run this command again: files already there are skipped, and VERIFY_CHECKSUM=1 checks their MD5s.");
  return lines.join("\n");
}

/** The files of `plan` not yet in `basedir`: the text's only while it is not unpacked. */
async function missingFiles(plan: DownloadPlan, basedir: string): Promise<RemoteFile[]> {
  const text = plan.text && !existsSync(textMarker(plan.text, basedir)) ? [plan.text.md5List, plan.text.archive] : [];
  const missing: RemoteFile[] = [];
  for (const file of [...plan.files, ...text])
    if ((await sizeIfExists(join(basedir, file.name))) === undefined) missing.push(file);
  return missing;
}

/** Fetches, checks and unpacks everything in `plan` into `options.basedir`. */
export async function downloadBertData(plan: DownloadPlan, options: DownloadBertOptions): Promise<void> {
  const log = options.log ?? process.stderr;
  await mkdir(options.basedir, { recursive: true });
  for (const name of io.removeStaleTemps(options.basedir))
    log.write(`removed ${name}, left by a download that was killed\n`);
  try {
    for (const file of plan.files) await fetchFile(file, options);
    if (plan.checkpoint) await writeCheckpointState(options.basedir, plan.checkpoint);
    if (plan.text) await fetchText(plan.text, options);
  } catch (error) {
    if (!(error instanceof UnreachableError)) throw error;
    throw new OfflineError(error, options.basedir, await missingFiles(plan, options.basedir), plan.text);
  }
  log.write(`done: ${options.basedir}\n`);
}

/**
 * Downloads `file` unless a complete copy is there; checks its MD5 when asked. A copy whose MD5 is wrong is moved
 * aside (`<name>.bad-md5`) and fetched once more; a second mismatch is an error, the file again aside, never under
 * its own name, where a rerun would take it for done.
 */
async function fetchFile(file: RemoteFile, options: DownloadBertOptions, retry = true): Promise<string> {
  const log = options.log ?? process.stderr;
  const dest = join(options.basedir, file.name);
  const have = await sizeIfExists(dest);
  if (have === undefined) {
    let bar: ByteProgress | undefined;
    await downloadToFile(file.url, dest, {
      ...options.http,
      expectedSize: file.size,
      onHtmlPage: confirmedDownloadUrl,
      onProgress: (done, total) => {
        bar ??= new ByteProgress(file.name, total ?? file.size, log, done);
        bar.setTotal(total ?? file.size);
        bar.update(done);
      },
      // On a terminal the bar's line is still open: end it before the note.
      onRetry: (error, delayMs) =>
        log.write(`${log.isTTY ? "\n" : ""}${file.name}: ${error.message}; retrying in ${delayMs} ms\n`),
    });
    bar?.finish();
  } else if (file.size !== undefined && have !== file.size) {
    throw new Error(`${dest} has ${have} bytes, expected ${file.size}: delete it to download it again`);
  } else {
    log.write(`${file.name}: already here, skipped\n`);
  }
  if (options.verifyChecksum && file.md5) {
    const bar = new ByteProgress(`md5 ${file.name}`, file.size ?? have, log);
    try {
      await verifyMd5(dest, file.md5, (n) => bar.add(n));
    } catch (error) {
      if (!(error instanceof ChecksumError)) throw error;
      bar.finish();
      const aside = `${dest}.bad-md5`;
      await rename(dest, aside);
      if (!retry) throw new ChecksumError(error.file, error.expected, error.actual, aside);
      log.write(
        `${file.name}: md5 ${error.actual} is not the published ${error.expected}; moved to ${aside}, fetching again\n`,
      );
      return fetchFile(file, options, false);
    }
    bar.finish();
  }
  return dest;
}

/** The TF `checkpoint` state file that names the init checkpoint, as the reference writes it. */
async function writeCheckpointState(basedir: string, name: string): Promise<void> {
  const text = `model_checkpoint_path: "${name}"\nall_model_checkpoint_paths: "${name}"\n`;
  io.writeFileAtomic(join(basedir, "checkpoint"), new TextEncoder().encode(text));
}

/**
 * The text archive is unpacked straight from the compressed stream, then deleted as the
 * reference does; a marker file records a finished extraction so that reruns skip it.
 */
async function fetchText(text: WikiText, options: DownloadBertOptions): Promise<void> {
  const log = options.log ?? process.stderr;
  const listPath = await fetchFile(text.md5List, options);
  const entries = parseMd5List(await readFile(listPath, "utf8"), listPath);
  const marker = textMarker(text, options.basedir);
  const folder = join(options.basedir, text.folder);
  const extracted = existsSync(marker);
  if (extracted) {
    log.write(`${text.folder}/: already extracted, skipped\n`);
  } else {
    const archive = await fetchFile(text.archive, options);
    const bar = new ByteProgress(`extract ${text.archive.name}`, (await stat(archive)).size, log);
    const summary = await extractTarGz(archive, options.basedir, { onArchiveBytes: (n) => bar.add(n) });
    bar.finish();
    log.write(`${text.archive.name}: ${summary.files} files, ${summary.bytes} bytes\n`);
  }
  if (options.verifyChecksum) {
    let total = 0;
    for (const { name } of entries) total += (await sizeIfExists(join(folder, name))) ?? 0;
    const bar = new ByteProgress(`md5 ${text.folder}/ (${entries.length} files)`, total, log);
    await verifyMd5List(folder, entries, (n) => bar.add(n));
    bar.finish();
  }
  if (!extracted) {
    io.writeFileAtomic(marker, new TextEncoder().encode(`${new Date().toISOString()}\n`));
    await rm(join(options.basedir, text.archive.name), { force: true });
  }
}

/** The file that records a finished extraction of the text archive. */
const textMarker = (text: WikiText, basedir: string): string => join(basedir, `.${text.archive.name}.extracted`);

async function sizeIfExists(path: string): Promise<number | undefined> {
  try {
    return (await stat(path)).size;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

const USAGE = `usage: npx tsx mlperf/bert/data/download.ts [--basedir DIR] [--wiki-train] [--verify-checksum]

Downloads the MLPerf BERT inputs from the reference's Google Drive files into BASEDIR:
  bert_config.json, vocab.txt, model.ckpt-28252.{index,meta,data-00000-of-00001}, checkpoint
and with WIKI_TRAIN=1 also bert_reference_results_text_md5.txt and results_text.tar.gz,
which is unpacked into BASEDIR/results4/ (500 parts, eval.txt, eval.md5) and then deleted.
Interrupted downloads resume from <file>.part; complete files are skipped.

environment (flags take precedence):
  BASEDIR=DIR         data folder (default ${defaultBasedir()})
  WIKI_TRAIN=1        also fetch and unpack the Wikipedia text (about 13 GB unpacked)
  VERIFY_CHECKSUM=1   check every file's MD5 against the published ones
`;

function parseArgs(argv: string[]): { basedir: string; wikiTrain: boolean; verifyChecksum: boolean } | "help" {
  if (argv.includes("--help") || argv.includes("-h")) return "help";
  const options = {
    basedir: basedirFromEnv(),
    wikiTrain: getenv("WIKI_TRAIN", 0) !== 0,
    verifyChecksum: getenv("VERIFY_CHECKSUM", 0) !== 0,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--wiki-train") options.wikiTrain = true;
    else if (arg === "--verify-checksum") options.verifyChecksum = true;
    else if (arg === "--basedir" && argv[i + 1] !== undefined) options.basedir = argv[++i]!;
    else if (arg.startsWith("--basedir=")) options.basedir = arg.slice("--basedir=".length);
    else throw new UsageError(`unknown argument ${JSON.stringify(arg)}\n\n${USAGE}`);
  }
  return options;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args === "help") {
    process.stdout.write(USAGE);
    return;
  }
  process.stderr.write(
    `BASEDIR=${args.basedir} WIKI_TRAIN=${Number(args.wikiTrain)} VERIFY_CHECKSUM=${Number(args.verifyChecksum)}\n`,
  );
  await downloadBertData(referencePlan(args.wikiTrain), { basedir: args.basedir, verifyChecksum: args.verifyChecksum });
}

/** What a bad file, no network, a refused or failed download or a bad archive throws: exit status 2 (exit_status.ts). */
export const DOWNLOAD_INPUT_ERRORS = [OfflineError, DownloadError, DriveError, ChecksumError, Md5ListError, TarError];

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: Error) => {
    process.stderr.write("\n"); // past a progress bar
    process.exitCode = reportFailure("download", error, DOWNLOAD_INPUT_ERRORS);
  });
}
