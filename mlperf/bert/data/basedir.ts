// Where the BERT data lives: `BASEDIR` if set, else a folder in the user's data dir
// (the reference's default, /raid/datasets/wiki, needs root on most machines), and the
// layout inside it: the reference's results4/ text and vocab.txt, our train/ and eval/ shards.
import { homedir } from "node:os";
import { join } from "node:path";

/** `$XDG_DATA_HOME/tsgrad/wiki`, or `~/.local/share/tsgrad/wiki` without XDG_DATA_HOME. */
export function defaultBasedir(env: NodeJS.ProcessEnv = process.env): string {
  const dataHome = env.XDG_DATA_HOME ? env.XDG_DATA_HOME : join(homedir(), ".local", "share");
  return join(dataHome, "tsgrad", "wiki");
}

/** `BASEDIR` from the environment, or the default above. */
export function basedirFromEnv(env: NodeJS.ProcessEnv = process.env): string {
  return env.BASEDIR ? env.BASEDIR : defaultBasedir(env);
}

/** The Wikipedia text comes in this many parts. */
export const PART_COUNT = 500;

/** `part-00042-of-00500`, the reference's naming of part 42. */
export const partName = (part: number): string =>
  `part-${String(part).padStart(5, "0")}-of-${String(PART_COUNT).padStart(5, "0")}`;

export const vocabPath = (basedir: string): string => join(basedir, "vocab.txt");
export const trainInputPath = (basedir: string, part: number): string => join(basedir, "results4", partName(part));
export const evalInputPath = (basedir: string): string => join(basedir, "results4", "eval.txt");
/** One shard per part: `train/part-00042-of-00500.safetensors`. */
export const trainShardPath = (basedir: string, part: number): string =>
  join(basedir, "train", `${partName(part)}.safetensors`);
/** The 10,000 eval samples. */
export const evalShardPath = (basedir: string): string => join(basedir, "eval", "eval.safetensors");
