// CPython's `random.Random` bit for bit (MT19937 seeded by init_by_array, as in
// Modules/_randommodule.c and Lib/random.py since 3.2): the reference preprocessing draws
// every masking and sentence decision from it, so parity needs the exact stream.

const N = 624;
const M = 397;
const UPPER_MASK = 0x80000000;
const LOWER_MASK = 0x7fffffff;
const MATRIX_A = 0x9908b0df;

/** Python's `random.Random(seed)` for an integer seed. */
export class PyRandom {
  private readonly state = new Uint32Array(N);
  /** The tempered outputs of the current state, handed out in order. */
  private readonly tempered = new Uint32Array(N);
  private index = N;

  constructor(seed: number | bigint) {
    this.initByArray(seedWords(seed));
  }

  /** One 32-bit MT19937 output (`genrand_uint32`). */
  nextUint32(): number {
    if (this.index >= N) this.twist();
    return this.tempered[this.index++]!;
  }

  /** `random()`: a double in [0, 1) with 53 random bits, from two outputs. */
  random(): number {
    const high = this.nextUint32() >>> 5;
    const low = this.nextUint32() >>> 6;
    return (high * 67108864 + low) / 9007199254740992;
  }

  /** `getrandbits(k)` for 0 <= k <= 53 (32-bit words, least significant first). */
  getrandbits(k: number): number {
    if (!Number.isInteger(k) || k < 0 || k > 53) throw new RangeError(`getrandbits: k=${k} is outside 0..53`);
    if (k === 0) return 0;
    if (k <= 32) return this.nextUint32() >>> (32 - k);
    const low = this.nextUint32();
    const high = this.nextUint32() >>> (64 - k);
    return high * 4294967296 + low;
  }

  /** `_randbelow(n)`: rejection sampling on `bit_length(n)` bits, so even n = 1 draws. */
  randbelow(n: number): number {
    if (!Number.isSafeInteger(n) || n <= 0) throw new RangeError(`randbelow: n=${n} must be a positive safe integer`);
    const bits = bitLength(n);
    if (bits <= 32) {
      // getrandbits(k) for k <= 32 inlined: this is the hot loop of every shuffle.
      const shift = 32 - bits;
      let r = this.nextUint32() >>> shift;
      while (r >= n) r = this.nextUint32() >>> shift;
      return r;
    }
    let r = this.getrandbits(bits);
    while (r >= n) r = this.getrandbits(bits);
    return r;
  }

  /** `randrange(start, stop)`: an integer in [start, stop). */
  randrange(start: number, stop: number): number {
    if (stop <= start) throw new RangeError(`randrange: empty range [${start}, ${stop})`);
    return start + this.randbelow(stop - start);
  }

  /** `randint(a, b)`: an integer in [a, b], both ends included. */
  randint(a: number, b: number): number {
    return this.randrange(a, b + 1);
  }

  /** `shuffle(x)` in place: Fisher-Yates from the end, `randbelow(i + 1)` per step. */
  shuffle<T>(items: T[] | Int32Array): void {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.randbelow(i + 1);
      const held = items[i]!;
      items[i] = items[j]!;
      items[j] = held;
    }
  }

  private initGenrand(seed: number): void {
    const mt = this.state;
    mt[0] = seed >>> 0;
    for (let i = 1; i < N; i++) {
      const prev = mt[i - 1]!;
      mt[i] = (Math.imul(1812433253, prev ^ (prev >>> 30)) + i) >>> 0;
    }
    this.index = N;
  }

  private initByArray(key: Uint32Array): void {
    const mt = this.state;
    this.initGenrand(19650218);
    let i = 1;
    let j = 0;
    for (let k = Math.max(N, key.length); k > 0; k--) {
      const prev = mt[i - 1]!;
      mt[i] = ((mt[i]! ^ Math.imul(prev ^ (prev >>> 30), 1664525)) + key[j]! + j) >>> 0;
      i++;
      j++;
      if (i >= N) {
        mt[0] = mt[N - 1]!;
        i = 1;
      }
      if (j >= key.length) j = 0;
    }
    for (let k = N - 1; k > 0; k--) {
      const prev = mt[i - 1]!;
      mt[i] = ((mt[i]! ^ Math.imul(prev ^ (prev >>> 30), 1566083941)) - i) >>> 0;
      i++;
      if (i >= N) {
        mt[0] = mt[N - 1]!;
        i = 1;
      }
    }
    mt[0] = 0x80000000;
  }

  private twist(): void {
    const mt = this.state;
    let kk = 0;
    for (; kk < N - M; kk++) {
      const y = (mt[kk]! & UPPER_MASK) | (mt[kk + 1]! & LOWER_MASK);
      mt[kk] = mt[kk + M]! ^ (y >>> 1) ^ (y & 1 ? MATRIX_A : 0);
    }
    for (; kk < N - 1; kk++) {
      const y = (mt[kk]! & UPPER_MASK) | (mt[kk + 1]! & LOWER_MASK);
      mt[kk] = mt[kk + M - N]! ^ (y >>> 1) ^ (y & 1 ? MATRIX_A : 0);
    }
    const y = (mt[N - 1]! & UPPER_MASK) | (mt[0]! & LOWER_MASK);
    mt[N - 1] = mt[M - 1]! ^ (y >>> 1) ^ (y & 1 ? MATRIX_A : 0);
    // Tempering all 624 outputs in one tight loop is cheaper than one at a time.
    const out = this.tempered;
    for (let k = 0; k < N; k++) {
      let t = mt[k]!;
      t ^= t >>> 11;
      t ^= (t << 7) & 0x9d2c5680;
      t ^= (t << 15) & 0xefc60000;
      t ^= t >>> 18;
      out[k] = t;
    }
    this.index = 0;
  }
}

/** Python seeds from `abs(seed)` split into 32-bit words, least significant first. */
function seedWords(seed: number | bigint): Uint32Array {
  if (typeof seed === "number" && !Number.isSafeInteger(seed))
    throw new RangeError(`PyRandom: seed ${seed} is not a safe integer`);
  let rest = BigInt(seed);
  if (rest < 0n) rest = -rest;
  const words: number[] = [];
  do {
    words.push(Number(rest & 0xffffffffn));
    rest >>= 32n;
  } while (rest > 0n);
  return Uint32Array.from(words);
}

function bitLength(n: number): number {
  return n < 4294967296 ? 32 - Math.clz32(n) : 32 + bitLength(Math.floor(n / 4294967296));
}
