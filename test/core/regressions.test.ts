// Core bugs found while building on the core, one test each, named for the behaviour that broke.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor } from "../../src/index.ts";
import { testDevices } from "../devices.ts";

for (const device of testDevices()) {
  test(`tensors realized from equal lazy values stay independent when both are assigned in one realize (${device})`, () => {
    // zeros(...).contiguous() twice is one deduplicated node: the second realize found it stored and
    // did not count its tensor as a co-owner, so both assigns wrote into the one shared buffer
    const first = Tensor.zeros([3], { device }).contiguous().realize();
    const second = Tensor.zeros([3], { device }).contiguous().realize();
    first.assign(first.add(1));
    second.assign(second.add(2));
    Tensor.realizeAll([first, second]);
    assert.deepEqual(first.tolist(), [1, 1, 1]);
    assert.deepEqual(second.tolist(), [2, 2, 2]);
  });
}
