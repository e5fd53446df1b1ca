// Lowered host kernels on disk, so that a process whose kernels an earlier one lowered skips lowering them:
// lowering was a large share of a warm start's time. The key is the
// scheduler's structure key (everything the lowering reads: the inlined graph's ops, dtypes, shapes and
// arguments, the buffers, the host forms) and a hash of tsgrad's own source files, so a changed lowering
// never meets kernels an older one made. Only host devices: a GPU's lowering also depends on the GPU.
import { createHash } from "node:crypto";
import { type Dirent, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { type DType, dtypeOf } from "../dtype.ts";
import type { KernelIR } from "../codegen/ir.ts";
import { cacheDir, debugLevel, hasFileSystem, writeAtomic } from "../helpers.ts";

let version: string | undefined;

/** Kernels read back and kept this process, for tests and DEBUG output. */
export const loweredStats = { loaded: 0, stored: 0, sourcesRead: 0 };

/**
 * A hash of every source file of tsgrad (src/ in a checkout, dist/ in a package): what made the kernels. In a
 * bundle, all of tsgrad is the bundle's text (the folder around it may hold anything: other projects, data).
 * Where a bundle's `import.meta.url` was defined away (bench/gpu-check.sh's, so that CLI guards do not fire in
 * it), the script that runs is the bundle.
 */
export function sourceVersion(): string {
  if (version) return version;
  const self = fileURLToPath(import.meta.url);
  if (/^lowered_cache\.[cm]?[jt]s$/.test(basename(self))) return (version = hashSources(dirname(dirname(self))));
  const hash = createHash("sha256").update("bundle\0");
  try {
    hash.update(readFileSync(existsSync(self) ? self : (process.argv[1] ?? "")));
  } catch {
    hash.update(`unknown ${process.pid} ${Date.now()}`); // no source to name: this process shares no kernels
  }
  return (version = hash.digest("hex").slice(0, 32));
}

/**
 * A hash of the .ts/.js/.mjs files under `root`, by path and text. Dependencies (node_modules), hidden folders
 * and links to folders are not followed (a link back up, as in /lib/llvm-14/build, would walk without end); what
 * cannot be read is left out.
 */
export function hashSources(root: string): string {
  const hash = createHash("sha256");
  const visit = (dir: string): void => {
    let entries: Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true }).sort((a, b) =>
        a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
      );
    } catch {
      return;
    }
    for (const entry of entries) {
      const name = entry.name;
      if (name === "node_modules" || name.startsWith(".")) continue;
      const path = join(dir, name);
      try {
        if (entry.isDirectory()) visit(path);
        else if (
          /\.(ts|js|mjs)$/.test(name) &&
          !name.endsWith(".d.ts") &&
          (entry.isFile() || (entry.isSymbolicLink() && statSync(path).isFile()))
        ) {
          hash.update(relative(root, path)).update("\0").update(readFileSync(path)).update("\0");
        }
      } catch {
        // a dangling link or a file without read access
      }
    }
  };
  visit(root);
  return hash.digest("hex").slice(0, 32);
}

/** This version's folder: lowered/<source hash>/ (older versions' folders are deleted when it is made). */
const folder = (): string => join(cacheDir(), "lowered", sourceVersion());

const pathOf = (key: string, extension = "json"): string =>
  join(folder(), `${createHash("sha256").update(key).digest("hex").slice(0, 32)}.${extension}`);

/**
 * Makes this version's folder; the first time, deletes the others (a source edit would otherwise leave megabytes each
 * time).
 */
function makeFolder(): void {
  const dir = folder();
  if (existsSync(dir)) return;
  const parent = join(cacheDir(), "lowered");
  // (another process of this version may be making it at the same time: it is never deleted)
  if (existsSync(parent))
    for (const name of readdirSync(parent))
      if (name !== sourceVersion()) rmSync(join(parent, name), { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
}

/** The key each kernel read back or kept this process was lowered for. */
const keys = new WeakMap<KernelIR, string>();

// JSON keeps neither dtypes' identity nor NaN, the infinities and -0: they are written as tagged objects
const encode = (_: string, value: unknown): unknown => {
  if (typeof value === "number" && (!Number.isFinite(value) || Object.is(value, -0)))
    return { $number: Object.is(value, -0) ? "-0" : String(value) };
  if (value !== null && typeof value === "object" && "itemsize" in value && "kind" in value && "name" in value)
    return { $dtype: (value as DType).name };
  return value;
};
/** The tagged objects of a parsed entry replaced in place (a JSON.parse reviver costs a call per value). */
function untag(value: unknown): unknown {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = untag(value[i]);
    return value;
  }
  const record = value as Record<string, unknown>;
  if (typeof record.$number === "string") return Number(record.$number);
  if (typeof record.$dtype === "string") return dtypeOf(record.$dtype);
  for (const k in record) record[k] = untag(record[k]);
  return record;
}

/** The kernel an earlier process lowered for `key`, or undefined (none, or a file that does not read back). */
export function loadLowered(key: string): KernelIR | undefined {
  if (!hasFileSystem()) return undefined;
  const text = readIfThere(pathOf(key));
  if (text === undefined) return undefined;
  try {
    const entry = JSON.parse(text) as { key: string; kernel: unknown };
    // the file names a hash of the key: the key itself must match too
    if (entry.key !== key) return undefined;
    loweredStats.loaded++;
    const kernel = untag(entry.kernel) as KernelIR;
    keys.set(kernel, key);
    return kernel;
  } catch {
    return undefined; // a damaged entry is lowered again and written over
  }
}

/** Keeps `kernel`, lowered for `key`, for later processes. */
export function storeLowered(key: string, kernel: KernelIR): void {
  if (!hasFileSystem()) return;
  keys.set(kernel, key);
  keep(pathOf(key), () => JSON.stringify({ key, kernel }, encode));
  loweredStats.stored++;
}

/**
 * A kernel's source text as `render` writes it for `variant` (what else the text depends on: buffers sharing
 * memory, the target's vector widths), kept beside the kernel when it came from or went to this cache: a warm
 * start then renders nothing (rendering C only to look up the compiled library was a large share of one).
 */
export function renderedSource(kernel: KernelIR, variant: string, render: () => string): string {
  const key = keys.get(kernel);
  if (key === undefined) return render();
  const path = pathOf(`${key}\0${variant}`, "src");
  const text = readIfThere(path);
  // the first line repeats the variant: a file that does not is not this text
  const newline = text?.indexOf("\n") ?? -1;
  if (text !== undefined && text.slice(0, newline) === JSON.stringify(variant)) {
    loweredStats.sourcesRead++;
    return text.slice(newline + 1);
  }
  const source = render();
  keep(path, () => `${JSON.stringify(variant)}\n${source}`);
  return source;
}

/** A cache entry's text, or undefined where there is none (or it went while being read: another version's process). */
function readIfThere(path: string): string | undefined {
  try {
    return existsSync(path) ? readFileSync(path, "utf8") : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Writes a cache entry; a cache that cannot be written (a full disk, a read-only home) only costs the next process
 * time.
 */
function keep(path: string, text: () => string): void {
  try {
    makeFolder();
    writeAtomic(path, text());
  } catch (e) {
    if (debugLevel() >= 1)
      console.error(`tsgrad: could not keep ${path}: ${e instanceof Error ? e.message : String(e)}`);
  }
}
