// Counter-based random bits (Threefry-2x32, 20 rounds, as tinygrad and JAX use): the same seed and
// counter give the same numbers on every backend, and nothing depends on the order kernels run in.
import { type DType, dtypes } from "../dtype.ts";
import { UOp } from "../uop.ts";

const ROTATIONS = [13, 15, 26, 6, 17, 29, 16, 24];
const PARITY = 0x1bd11bda;

/** The constant `v` in `dtype`, shaped like `like`. */
const fill = (v: number, dtype: DType, like: UOp): UOp =>
  UOp.const(v, dtype, like.device)
    .reshape(like.shape.map(() => 1))
    .expand(like.shape);
const u32 = (v: number, like: UOp): UOp => fill(v >>> 0, dtypes.uint32, like);

function rotl(x: UOp, r: number): UOp {
  return x.alu("SHL", u32(r, x)).alu("OR", x.alu("SHR", u32(32 - r, x)));
}

/**
 * Threefry-2x32 of counter words (x0, x1) under key (k0, k1) (uint32, shaped like x0): two uint32 outputs per element.
 */
export function threefry2x32(x0: UOp, x1: UOp, k0: UOp, k1: UOp): [UOp, UOp] {
  const keys = [k0, k1, k0.alu("XOR", k1).alu("XOR", u32(PARITY, k0))];
  let a = x0.alu("ADD", keys[0]!);
  let b = x1.alu("ADD", keys[1]!);
  for (let block = 0; block < 5; block++) {
    for (let r = 0; r < 4; r++) {
      a = a.alu("ADD", b);
      b = rotl(b, ROTATIONS[(block % 2) * 4 + r]!).alu("XOR", a);
    }
    a = a.alu("ADD", keys[(block + 1) % 3]!);
    b = b.alu("ADD", keys[(block + 2) % 3]!.alu("ADD", u32(block + 1, b)));
  }
  return [a, b];
}

/**
 * `n` uniformly random uint32 words under key (seed, counter): `counter` is a one-element uint32 node
 * (read from a device buffer, so a replayed JIT draws new numbers each call). With `start`, words
 * start..start+n-1 of that stream: a device computes only its slice of one logical draw.
 */
export function randomBits(n: number, seed: number, counter: UOp, device: string, start = 0): UOp {
  // word j is half (lo or hi) of the Threefry pair j / 2. Each word computes its pair's chain and keeps its half:
  // one chain a word, in the kernel that reads the words (padding lo and hi into place computed both chains at
  // every word, the pad's guard holding back only the key's loads; a [pairs, 2] broadcast of the two halves had
  // the scheduler store the chain, shared by both, in ten stages)
  const [first, end] = [Math.floor(start / 2), Math.ceil((start + n) / 2)];
  const words = (end - first) * 2;
  const j = UOp.index(words, device);
  const pair = j.alu("IDIV", fill(2, dtypes.int32, j)).bitcast(dtypes.uint32);
  const index = first === 0 ? pair : pair.alu("ADD", u32(first, pair));
  const [lo, hi] = threefry2x32(index, u32(0, index), u32(seed, index), counter.reshape([1]).expand([words]));
  const isLo = j.alu("MOD", fill(2, dtypes.int32, j)).alu("CMPLT", fill(1, dtypes.int32, j));
  return isLo.alu("WHERE", lo, hi).shrink([[start - 2 * first, start - 2 * first + n]]);
}
