// Files written all or nothing: a reader sees the old file or the complete new one, never a torn write
// (a crash mid-checkpoint must not leave a file that loads half a model).

import {
  closeSync,
  fsyncSync,
  linkSync,
  openSync,
  readdirSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";

/** Writes `bytes` to `path` all or nothing: a temp file in the same folder, fsync, rename. */
export function writeFileAtomic(path: string, bytes: Uint8Array): void {
  writeFileAtomicFrom(path, (write) => write(bytes));
}

/** Options of the atomic writers. */
export interface AtomicWriteOptions {
  /**
   * Replace a file already at the path (default true). With false the file is put in place by a hard link, which
   * fails with EEXIST when a file is there, even one another process put there a moment before: two writers
   * racing for one name (two runs checkpointing into one folder) never replace each other's file.
   */
  overwrite?: boolean;
}

/**
 * Writes what `produce` hands its `write`, in order, to `path` all or nothing: a temp file in the same folder,
 * fsync, rename. Nothing is gathered in memory first (a shard or a checkpoint may be gigabytes). `writeAt`
 * overwrites bytes already written (a header whose checksums are known only at the end).
 */
export function writeFileAtomicFrom(
  path: string,
  produce: (write: (bytes: Uint8Array) => void, writeAt: (bytes: Uint8Array, position: number) => void) => void,
  { overwrite = true }: AtomicWriteOptions = {},
): void {
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`);
  try {
    const fd = openSync(temp, "w");
    try {
      let end = 0;
      const writeAt = (bytes: Uint8Array, position: number) => {
        if (position + bytes.length > end)
          throw new RangeError(
            `${temp}: writeAt ${position}..${position + bytes.length} past the ${end} bytes written`,
          );
        for (let written = 0; written < bytes.length; )
          written += writeSync(fd, bytes, written, bytes.length - written, position + written);
      };
      produce((bytes) => {
        for (let written = 0; written < bytes.length; ) written += writeSync(fd, bytes, written);
        end += bytes.length;
      }, writeAt);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    if (overwrite) renameSync(temp, path);
    else {
      linkSync(temp, path);
      unlinkSync(temp);
    }
  } catch (error) {
    try {
      unlinkSync(temp);
    } catch {
      // The temp file was never created or is already gone.
    }
    throw error;
  }
}

/** The temp files writers leave while they write: `.<name>.<pid>.tmp` or `.<name>.<pid>.<random>.tmp`. */
const TEMP_FILE = /^\..+\.(\d+)(\.[a-z0-9]+)?\.tmp$/;

/** Whether the process `pid` still runs on this machine (one that is gone cannot finish its temp file). */
function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Deletes the temp files in `folder` that a process killed mid-write left behind (its pid no longer runs), and
 * returns their names. A folder that does not exist has none.
 */
export function removeStaleTemps(folder: string): string[] {
  let names: string[];
  try {
    names = readdirSync(folder);
  } catch {
    return [];
  }
  const stale = names.filter((name) => {
    const match = TEMP_FILE.exec(name);
    return match !== null && Number(match[1]) !== process.pid && !isRunning(Number(match[1]));
  });
  for (const name of stale) rmSync(join(folder, name), { force: true });
  return stale;
}
