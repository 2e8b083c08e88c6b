// How far ahead the fetcher receives. A receive from SQS takes a round trip (10–20 ms in a
// region) plus the claim statement; a worker that asks only for the slots free *now* leaves them
// empty for that long, every time. By Little's law the messages in flight must cover
// throughput × round trip, so the fetcher also asks for the slots it expects to free while its
// receive is on the way: the rate at which handlers have been finishing lately × the recent
// round trip, never more than the worker's capacity.
//
// Measured only where it means something: the round trip from receives that came back full (the
// queue had messages, so the time was the network's and not a long poll waiting), and the rate
// from slots freed over the last few hundred milliseconds. Long jobs finish rarely, so a worker
// running them asks ahead for nothing, and its idle peers get the messages instead. In-process
// (tests, the benchmark's memory transport) the round trip is a few microseconds: nothing ahead.

/** How long a rate sample spans. */
const RATE_WINDOW_MS = 250;
/** Weight of a new sample in the moving averages. */
const ALPHA = 0.3;
/**
 * Ask for this many times what the recent rate needs: the rate is measured from what the worker
 * already does, so asking for exactly that would hold it where it is. Measured (no-op jobs,
 * concurrency 10, 15 ms per SQS call): 1,525 → 2,086 jobs/s with 2× (the fetcher caps it at twice
 * the capacity).
 */
const HEADROOM = 2;

export class Pace {
  /** Moving average of a full receive's round trip plus its claim, ms. */
  private roundTripMs = 0;
  /** Moving average of handler slots freed per ms. */
  private rate = 0;
  private sampledAt = performance.now();
  private sampledCount = 0;

  /** `finished`: how many handler slots have freed since the worker started (monotonic). */
  constructor(private readonly finished: () => number) {}

  /** A receive that asked for `asked` and got `got` in `ms` (through its claim). */
  receive(asked: number, got: number, ms: number): void {
    if (got < asked || asked === 0) return;
    this.roundTripMs = this.roundTripMs === 0 ? ms : this.roundTripMs + ALPHA * (ms - this.roundTripMs);
  }

  /** The slots expected to free within one round trip, at most `cap`. */
  ahead(cap: number): number {
    const now = performance.now();
    const elapsed = now - this.sampledAt;
    if (elapsed >= RATE_WINDOW_MS) {
      const count = this.finished();
      const r = (count - this.sampledCount) / elapsed;
      // A gap much longer than the window (idle) starts afresh rather than averaging a stale rate.
      this.rate = elapsed > 4 * RATE_WINDOW_MS ? r : this.rate + ALPHA * (r - this.rate);
      this.sampledAt = now;
      this.sampledCount = count;
    }
    return Math.min(cap, Math.floor(HEADROOM * this.rate * this.roundTripMs));
  }
}
