// Where the BERT data lives: `BASEDIR` if set, else a folder in the user's data dir
// (the reference's default, /raid/datasets/wiki, needs root on most machines).
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
