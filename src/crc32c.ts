// CRC-32C (Castagnoli), as TFRecord framing and TF checkpoints use it.

const TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC-32C of `bytes`, continuing from `crc` (0 to start). */
export function crc32c(bytes: Uint8Array, crc = 0): number {
  let c = ~crc >>> 0;
  for (let i = 0; i < bytes.length; i++) c = TABLE[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8);
  return ~c >>> 0;
}

/** TensorFlow's masked CRC: rotate right by 15 bits and add a constant, so CRCs of CRCs stay useful. */
export function maskedCrc32c(bytes: Uint8Array): number {
  const crc = crc32c(bytes);
  return ((((crc >>> 15) | (crc << 17)) >>> 0) + 0xa282ead8) >>> 0;
}
