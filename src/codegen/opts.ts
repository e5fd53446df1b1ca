// Kernel options in tinygrad's sense: how one kernel's loops are shaped, without changing what it computes.

/** Computes `amount` neighbouring elements of output axis `axis` in lockstep (register tiling). */
export interface Upcast {
  readonly axis: number;
  readonly amount: number;
}

export interface KernelOpts {
  /** Output axes computed several elements at a time: loads they share are done once, reduce loops are shared. */
  readonly upcast: readonly Upcast[];
  /** The innermost reduce loop does this many iterations per trip (1: none). */
  readonly unroll: number;
  /** Leading output loops split across threads (0: none). */
  readonly parallel: number;
  /** Output axes whose loops come first, outermost first (the rest follow in order): which data stays in cache. */
  readonly outer: readonly number[];
  /**
   * The kernel's one long sum runs in blocks of this many steps, each block over every output (host backends:
   * the operands' block stays in cache across the output tiles; the output holds the partial sums). 0: none.
   */
  readonly kblock?: number;
  /**
   * The innermost reduce loop's steps go to this many accumulators in turn, added pairwise at the end (host
   * backends: a row sum along contiguous memory becomes one vector of partial sums). The additions happen
   * in another order than the plain kernel's. 0 or absent: one accumulator.
   */
  readonly split?: number;
  /**
   * One output axis's tile loop walked in chunks of this many tiles, the chunk loop outermost (host backends):
   * the chunk's panel of that axis's operand stays in cache while the other axis's tiles walk past it, so the
   * other operand streams once per chunk instead of once per tile. Absent: no chunks.
   */
  readonly chunk?: Chunk;
}

/** `tiles` tiles of output axis `axis` to a chunk (KernelOpts.chunk). */
export interface Chunk {
  readonly axis: number;
  readonly tiles: number;
}

/** The chunk when it splits its axis's `trips` tiles into several chunks (a last tile one wide along it has none). */
export const splittingChunk = (chunk: Chunk | undefined, trips: number): Chunk | undefined =>
  chunk && trips > chunk.tiles ? chunk : undefined;

export const NO_OPTS: KernelOpts = { upcast: [], unroll: 1, parallel: 0, outer: [] };

/** A stable text form: cache keys and DEBUG output. */
export const optsKey = (o: KernelOpts): string =>
  `u${o.upcast.map((u) => `${u.axis}x${u.amount}`).join(",")}|r${o.unroll}|p${o.parallel}${o.outer.length ? `|o${o.outer.join(",")}` : ""}${o.kblock ? `|k${o.kblock}` : ""}${o.split ? `|s${o.split}` : ""}${o.chunk ? `|c${o.chunk.axis}x${o.chunk.tiles}` : ""}`;

/** How many elements each iteration of the kernel computes. */
export const upcastWidth = (o: KernelOpts): number => o.upcast.reduce((w, u) => w * u.amount, 1);
