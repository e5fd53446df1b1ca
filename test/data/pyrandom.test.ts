// Reference values printed by CPython 3.11.7: `r = random.Random(12345)` and the calls named
// in each test, in the order given (each test starts from a fresh generator unless it says so).
import { test } from "node:test";
import assert from "node:assert/strict";
import { PyRandom } from "../../mlperf/bert/data/pyrandom.ts";

test("random() matches Python's first draws for seed 12345", () => {
  const rng = new PyRandom(12345);
  const draws = Array.from({ length: 5 }, () => rng.random());
  assert.deepEqual(
    draws,
    [0.41661987254534116, 0.010169169457068361, 0.8252065092537432, 0.2986398551995928, 0.3684116894884757],
  );
});

test("the call sequence random x5, getrandbits, randint, shuffle, randrange matches Python", () => {
  // python: [r.random() for _ in range(5)]; [r.getrandbits(32) for _ in range(5)];
  // [r.getrandbits(k) for k in (1,7,31,33,53)]; [r.randint(0,30521) for _ in range(5)];
  // [r.randint(1,1) for _ in range(3)]; r.random(); x=list(range(10)); r.shuffle(x);
  // [r.randrange(3, 1000003) for _ in range(4)]
  const rng = new PyRandom(12345);
  for (let i = 0; i < 5; i++) rng.random();
  assert.deepEqual(
    Array.from({ length: 5 }, () => rng.getrandbits(32)),
    [831769172, 1160692746, 2430986565, 1873586768, 694443915],
  );
  assert.deepEqual(
    [1, 7, 31, 33, 53].map((k) => rng.getrandbits(k)),
    [0, 15, 1877275096, 1859447115, 5649447776444452],
  );
  assert.deepEqual(
    Array.from({ length: 5 }, () => rng.randint(0, 30521)),
    [5712, 20046, 18127, 6121, 11629],
  );
  assert.deepEqual(
    Array.from({ length: 3 }, () => rng.randint(1, 1)),
    [1, 1, 1],
  );
  assert.equal(rng.random(), 0.14814616893018917, "randint(1, 1) must consume one output each");
  const items = Array.from({ length: 10 }, (_, i) => i);
  rng.shuffle(items);
  assert.deepEqual(items, [4, 9, 7, 6, 8, 0, 2, 5, 3, 1]);
  assert.deepEqual(
    Array.from({ length: 4 }, () => rng.randrange(3, 1000003)),
    [3625, 7000, 985914, 696152],
  );
});

test("the state regenerates correctly past the first 624 outputs", () => {
  const rng = new PyRandom(12345);
  for (let i = 0; i < 700; i++) rng.getrandbits(32);
  assert.equal(rng.random(), 0.5677920641460522);
});

test("seeds 0, 2**40+7 and -5 seed like Python (abs value, 32-bit words)", () => {
  const firstThree = (seed: number | bigint) => {
    const rng = new PyRandom(seed);
    return [rng.nextUint32(), rng.nextUint32(), rng.nextUint32()];
  };
  assert.deepEqual(firstThree(0), [3626764237, 1654615998, 3255389356]);
  assert.deepEqual(firstThree(2 ** 40 + 7), [2635837658, 3209733218, 3500038837]);
  assert.deepEqual(firstThree(2n ** 40n + 7n), [2635837658, 3209733218, 3500038837]);
  assert.deepEqual(firstThree(-5), [2675342405, 1097127993, 3185950873]);
});

test("an empty randrange and randbelow(0) throw like Python's ValueError", () => {
  const rng = new PyRandom(1);
  assert.throws(() => rng.randrange(5, 5), RangeError);
  assert.throws(() => rng.randbelow(0), RangeError);
});
