// Collects items added within a few milliseconds and hands them to one flush call: one
// DeleteMessageBatch for ten deletes, one UPDATE for many completions. Each add() resolves
// with its own item's outcome.

export class Batcher<T, R> {
  private items: { item: T; resolve: (r: R) => void; reject: (e: unknown) => void }[] = [];
  private timer: NodeJS.Timeout | NodeJS.Immediate | null = null;
  private inflight = new Set<Promise<void>>();

  constructor(
    private readonly flushFn: (items: T[]) => Promise<R[]>,
    private readonly opts: { maxItems: number; delayMs: number },
  ) {}

  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.items.push({ item, resolve, reject });
      if (this.items.length >= this.opts.maxItems) this.flushNow();
      // delayMs 0: flush once the current turn of the event loop is over, so everything that
      // finished together goes in one batch without adding a timer's millisecond.
      else if (!this.timer) this.timer = this.opts.delayMs === 0 ? setImmediate(() => this.flushNow()) : setTimeout(() => this.flushNow(), this.opts.delayMs);
    });
  }

  /** Flush what is queued and wait for every flush in flight. */
  async drain(): Promise<void> {
    this.flushNow();
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
  }

  private flushNow(): void {
    if (this.timer) {
      if (this.opts.delayMs === 0) clearImmediate(this.timer as NodeJS.Immediate);
      else clearTimeout(this.timer as NodeJS.Timeout);
      this.timer = null;
    }
    if (this.items.length === 0) return;
    const batch = this.items.splice(0, this.opts.maxItems);
    const p = this.flushFn(batch.map((b) => b.item))
      .then((results) => batch.forEach((b, i) => b.resolve(results[i] as R)))
      .catch((err: unknown) => batch.forEach((b) => b.reject(err)))
      .finally(() => this.inflight.delete(p));
    this.inflight.add(p);
    if (this.items.length > 0) this.flushNow();
  }
}
