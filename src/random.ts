// Counter-based random bits (Threefry-2x32, 20 rounds, as tinygrad and JAX use): the same seed and
// counter give the same numbers on every backend, and nothing depends on the order kernels run in.
import { dtypes } from "./dtype.ts";
import { UOp } from "./uop.ts";

const ROTATIONS = [13, 15, 26, 6, 17, 29, 16, 24];
const PARITY = 0x1bd11bda;

const u32 = (v: number, like: UOp): UOp => UOp.const(v >>> 0, dtypes.uint32, like.device).reshape(like.shape.map(() => 1)).expand(like.shape);

function rotl(x: UOp, r: number): UOp {
  return x.alu("SHL", u32(r, x)).alu("OR", x.alu("SHR", u32(32 - r, x)));
}

/** Threefry-2x32 of counter words (x0, x1) under key (k0, k1): two uint32 outputs per element. */
export function threefry2x32(x0: UOp, x1: UOp, k0: number, k1: number): [UOp, UOp] {
  const keys = [k0 >>> 0, k1 >>> 0, (k0 ^ k1 ^ PARITY) >>> 0];
  let a = x0.alu("ADD", u32(keys[0]!, x0));
  let b = x1.alu("ADD", u32(keys[1]!, x1));
  for (let block = 0; block < 5; block++) {
    for (let r = 0; r < 4; r++) {
      a = a.alu("ADD", b);
      b = rotl(b, ROTATIONS[(block % 2) * 4 + r]!).alu("XOR", a);
    }
    a = a.alu("ADD", u32(keys[(block + 1) % 3]!, a));
    b = b.alu("ADD", u32((keys[(block + 2) % 3]! + block + 1) >>> 0, b));
  }
  return [a, b];
}

/** `n` uniformly random uint32 words for (seed, call counter). */
export function randomBits(n: number, seed: number, counter: number, device: string): UOp {
  const half = Math.ceil(n / 2);
  const index = UOp.index(half, device).bitcast(dtypes.uint32);
  const zero = u32(0, index);
  const [lo, hi] = threefry2x32(index, zero, seed, counter);
  return lo.reshape([half, 1]).pad([[0, 0], [0, 1]]).alu("ADD", hi.reshape([half, 1]).pad([[0, 0], [1, 0]])).reshape([half * 2]).shrink([[0, n]]);
}
