// Run as a child process by emulated.test.ts (the emulator's environment and BEAM=1 set): one float16
// matmul on CUDA beside the JS device, then its largest error and what the search did, as JSON on stdout.
// With the argument "computed", one factor is computed (a bias added first: its tiles go through registers).
import { Tensor, dtypes } from "../../src/index.ts";
import { searchStats } from "../../src/engine/search.ts";

const computed = process.argv[2] === "computed";
const [a, b] = [
  [256, 96],
  [96, 320],
].map((shape) => Tensor.rand(shape, { device: "JS" }).sub(0.5).cast(dtypes.float16).realize());
const bias = Tensor.rand([96], { device: "JS" }).cast(dtypes.float16).realize();
const product = (device: string) => {
  const left = computed ? a!.to(device).add(bias.to(device)) : a!.to(device);
  return Array.from(left.matmul(b!.to(device)).cast(dtypes.float32).toArray() as Float32Array);
};
const [gpu, js] = [product("CUDA"), product("JS")];
const error = gpu.reduce((worst, g, i) => Math.max(worst, Math.abs(g - js[i]!) / (1 + Math.abs(js[i]!))), 0);
console.log(JSON.stringify({ error, searched: searchStats.searched, cacheHits: searchStats.cacheHits }));
