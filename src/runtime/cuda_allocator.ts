// A caching allocator for device memory: freed blocks wait in free lists by size for the next request of
// that size (a training step asks for the same sizes every step), and are handed back to the driver only
// when an allocation fails, so that the memory a model needs is found without fragmenting.

/** Sizes are rounded up to this many bytes, so that nearby sizes share free lists. */
const GRANULE = 512;

/**
 * Whether an error from the underlying allocation is "out of memory" (then the cache is emptied and it is tried again).
 */
export type IsOutOfMemory = (error: unknown) => boolean;

export class CachingAllocator {
  private readonly freeLists = new Map<number, number[]>();
  /** Bytes held in free lists, not in use. */
  cachedBytes = 0;
  /** Bytes handed out and not freed. */
  usedBytes = 0;

  constructor(
    private readonly allocate: (bytes: number) => number,
    private readonly release: (pointer: number) => void,
    private readonly isOutOfMemory: IsOutOfMemory,
  ) {}

  /** The size a request of `bytes` occupies (at least one granule: drivers refuse empty allocations). */
  static blockSize(bytes: number): number {
    return Math.max(GRANULE, Math.ceil(bytes / GRANULE) * GRANULE);
  }

  alloc(bytes: number): number {
    const size = CachingAllocator.blockSize(bytes);
    const cached = this.freeLists.get(size)?.pop();
    if (cached !== undefined) {
      this.cachedBytes -= size;
      this.usedBytes += size;
      return cached;
    }
    let pointer: number;
    try {
      pointer = this.allocate(size);
    } catch (e) {
      if (!this.isOutOfMemory(e) || this.cachedBytes === 0) throw e;
      this.emptyCache();
      pointer = this.allocate(size);
    }
    this.usedBytes += size;
    return pointer;
  }

  free(pointer: number, bytes: number): void {
    const size = CachingAllocator.blockSize(bytes);
    const list = this.freeLists.get(size);
    list ? list.push(pointer) : this.freeLists.set(size, [pointer]);
    this.cachedBytes += size;
    this.usedBytes -= size;
  }

  /** Hands every cached block back to the driver. */
  emptyCache(): void {
    for (const list of this.freeLists.values()) for (const pointer of list) this.release(pointer);
    this.freeLists.clear();
    this.cachedBytes = 0;
  }
}
