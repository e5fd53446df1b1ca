// Bundles tsgrad for a browser page: `train_worker.ts` (tsgrad inside a Web Worker) as one ES module, with Node's
// built-in modules, koffi and npm's `webgpu` replaced by stubs whose functions throw if called. Nothing the JS and
// WEBGPU devices run in a browser calls them: the CPU device, disk caches and files are Node's (their availability
// checks answer no). Used by serve.ts and test/browser/webgpu_page.test.ts.
import { copyFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type Plugin, build } from "esbuild";

const HERE = fileURLToPath(new URL(".", import.meta.url));

/** Values the stubs give for calls made while modules load or while a device is chosen. */
const HARMLESS: Record<string, string> = {
  cpus: "() => []",
  availableParallelism: "() => 1",
  homedir: '() => "/"',
  tmpdir: '() => "/tmp"',
  freemem: "() => 0",
  totalmem: "() => 0",
  join: '(...parts) => parts.join("/")',
  isMainThread: "true",
  parentPort: "null",
  workerData: "null",
  constants: "{}",
  sep: '"/"',
};
const RESERVED = new Set([
  "default",
  "in",
  "do",
  "if",
  "for",
  "new",
  "try",
  "var",
  "let",
  "case",
  "else",
  "enum",
  "this",
]);

/** Each Node-only module as a stub with the same export names (read from the real module here, in Node). */
const nodeStubs: Plugin = {
  name: "node-stubs",
  setup(b) {
    b.onResolve({ filter: /^(node:|koffi$|webgpu$)/ }, (args) => ({ path: args.path, namespace: "stub" }));
    b.onLoad({ filter: /.*/, namespace: "stub" }, async (args) => {
      let names: string[] = [];
      try {
        names = Object.keys(await import(args.path)).filter((n) => /^[A-Za-z_$][\w$]*$/.test(n) && !RESERVED.has(n));
      } catch {
        // a module that does not load here either: no named exports
      }
      const lines = [
        `const fail = (name) => () => { throw new Error(${JSON.stringify(args.path)} + "." + name + " is not in a browser"); };`,
        "export default new Proxy({}, { get: (_, name) => fail(String(name)) });",
        ...names.map((n) => `export const ${n} = ${HARMLESS[n] ?? `fail(${JSON.stringify(n)})`};`),
      ];
      return { contents: lines.join("\n"), loader: "js" };
    });
  },
};

/** Writes the page (index.html), its worker bundle (train_worker.js) and a sourcemap to `outDir`. */
export async function bundleBrowserDemo(outDir: string): Promise<void> {
  mkdirSync(outDir, { recursive: true });
  await build({
    entryPoints: [join(HERE, "train_worker.ts")],
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    outfile: join(outDir, "train_worker.js"),
    sourcemap: true,
    plugins: [nodeStubs],
    // tsgrad reads process.env for its settings
    banner: { js: 'globalThis.process ??= { env: {}, versions: {}, argv: [], platform: "browser", cwd: () => "/" };' },
    logLevel: "error",
  });
  copyFileSync(join(HERE, "index.html"), join(outDir, "index.html"));
}
