// Collects items added within a few milliseconds and hands them to one flush call: one
// DeleteMessageBatch for ten deletes, one UPDATE for many completions. add() resolves with its
// own item's outcome; push() is the fire-and-forget form for items whose outcome the flush
// function handles itself (no promise per item on a path that runs once per job).

type Settle<R> = ((r: R) => void) | null;

export class Batcher<T, R> {
  private items: T[] = [];
  private resolvers: Settle<R>[] = [];
  private rejecters: ((e: unknown) => void)[] = [];
  private timer: NodeJS.Timeout | NodeJS.Immediate | null = null;
  private inflight = new Set<Promise<void>>();

  constructor(
    private readonly flushFn: (items: T[]) => Promise<R[]>,
    private readonly opts: {
      maxItems: number;
      delayMs: number;
      /**
       * Flushes in flight at once (default: no limit). Under load, what arrives while the limit
       * is reached waits and goes in the next flush, when one ends: batches grow with the load
       * instead of the statements multiplying (group commit). Idle, nothing waits.
       */
      maxInFlight?: number;
      onError?: (err: unknown, items: T[]) => void;
    },
  ) {}

  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => this.enqueue(item, resolve, reject));
  }

  /** Queue an item without waiting for its outcome; a failed flush goes to opts.onError. */
  push(item: T): void {
    this.enqueue(item, null, noop);
  }

  /** Flush what is queued and wait for every flush in flight. */
  async drain(): Promise<void> {
    this.flushNow();
    while (this.inflight.size > 0 || this.items.length > 0) {
      await Promise.allSettled([...this.inflight]);
      this.flushNow();
    }
  }

  private enqueue(item: T, resolve: Settle<R>, reject: (e: unknown) => void): void {
    this.items.push(item);
    this.resolvers.push(resolve);
    this.rejecters.push(reject);
    if (this.items.length >= this.opts.maxItems) this.flushNow();
    // delayMs 0: flush once the current turn of the event loop is over, so everything that
    // finished together goes in one batch without adding a timer's millisecond.
    else if (!this.timer)
      this.timer = this.opts.delayMs === 0 ? setImmediate(() => this.flushNow()) : setTimeout(() => this.flushNow(), this.opts.delayMs);
  }

  private flushNow(): void {
    if (this.timer) {
      if (this.opts.delayMs === 0) clearImmediate(this.timer as NodeJS.Immediate);
      else clearTimeout(this.timer as NodeJS.Timeout);
      this.timer = null;
    }
    const limit = this.opts.maxInFlight ?? Number.POSITIVE_INFINITY;
    while (this.items.length > 0 && this.inflight.size < limit) {
      const n = Math.min(this.items.length, this.opts.maxItems);
      const items = this.items.splice(0, n);
      const resolvers = this.resolvers.splice(0, n);
      const rejecters = this.rejecters.splice(0, n);
      const p = this.flushFn(items).then(
        (results) => {
          for (let i = 0; i < resolvers.length; i++) resolvers[i]?.(results[i] as R);
        },
        (err: unknown) => {
          this.opts.onError?.(err, items);
          for (const reject of rejecters) reject(err);
        },
      );
      const tracked = p.finally(() => {
        this.inflight.delete(tracked);
        // What waited for a flush to end goes now, together.
        if (this.items.length > 0 && !this.timer) this.flushNow();
      });
      this.inflight.add(tracked);
    }
  }
}

function noop(): void {}
