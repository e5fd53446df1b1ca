// The bundles bench/gpu-check.sh runs on the GPU machine, which has Node (packed) but no node_modules: each
// entry and everything it imports in one .mjs, koffi left out (its linux x64 binary travels beside them).
// The op-test bundles are also run in the tests (test/cuda/bundled.test.ts), so that a bundle that breaks
// where the sources work (as the lowered-kernel cache's source walk once did) shows up before a GPU is lent.
// CLI: npx tsx bench/gpu/bundle.ts OUTDIR ENTRY.ts...
import { buildSync } from "esbuild";
import { argsWithUsage } from "../args.ts";

/** Bundles each entry into `outdir` as <name>.mjs. */
export function bundleForDevice(entries: readonly string[], outdir: string): void {
  buildSync({
    entryPoints: [...entries],
    outdir,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    external: ["koffi"],
    logLevel: "warning",
    outExtension: { ".js": ".mjs" },
    // one bundle holds many modules: their `import.meta.url === argv[1]` CLI guards (inspect.ts) must not fire in it
    define: { "import.meta.url": JSON.stringify("file:///tsgrad-bundle.mjs") },
  });
}

const USAGE = "usage: npx tsx bench/gpu/bundle.ts OUTDIR ENTRY.ts...   (each entry bundled as OUTDIR/<name>.mjs)";

if (process.argv[1] === import.meta.filename) {
  const [outdir, ...entries] = argsWithUsage(USAGE, {}, { allowPositionals: true }).positionals;
  if (outdir === undefined || entries.length === 0) {
    console.error(USAGE);
    process.exit(2);
  }
  bundleForDevice(entries, outdir);
}
