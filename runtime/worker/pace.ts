// How far ahead the fetcher receives. A receive from SQS takes a round trip (10–20 ms in a
// region) plus the claim statement; a worker that asks only for the slots free *now* leaves them
// empty for that long, every time. By Little's law the messages in flight must cover
// throughput × round trip, so the fetcher also asks for the slots it expects to free while its
// receive is on the way: the rate at which handlers have been finishing lately × the recent
// round trip, within a bound the fetcher sets.
//
// Measured only where it means something: the round trip from receives that came back full (the
// queue had messages, so the time was the network's and not a long poll waiting), and the rate
// from slots freed over the last window (100 ms; at least 20 ms once a capacity's worth freed),
// not averaged: the worker's own rate is what it asked ahead for, so an average that lags a rise
// holds it back for seconds (a drain of 5,000 no-op jobs spent 2 s of its 2.5 s climbing from 10
// to 80 messages ahead), and one that lags a fall claims fast jobs' worth of long ones. A gap
// between calls (the loop waited: the queue idle, or every slot busy) starts from nothing. Long
// jobs finish rarely, so a worker running them asks ahead for nothing, and its idle peers get the
// messages instead. In-process (tests, the benchmark's memory transport) the round trip is the
// claim statement's alone, a few milliseconds: little ahead.

/** How long a rate sample spans at most. */
const RATE_WINDOW_MS = 100;
/**
 * A window that has counted a capacity's worth of freed slots (`windowCount`) closes at the first
 * look after this long instead: a worker climbing to its pace measures each step as soon as it
 * means something, rather than once per 100 ms. Each window can raise what is asked ahead about
 * twofold (HEADROOM), so with 100 ms windows the start of a backlog (no-op jobs, concurrency 10,
 * 15 ms per SQS call) took 300–400 ms to reach its pace, a third of a 5,000-job drain. Measured in
 * 4 A/B pairs of 3 runs each: with 15 ms per call the whole drain's rate went from a median of
 * 4,515 to 4,784 jobs/s and its share of the zero-delay rate from 85 to 90 % (the pairs' ranges
 * overlap: 83–97 % before, 87–94 % after). Long jobs free slots rarely, so their windows still
 * last 100 ms.
 */
const MIN_WINDOW_MS = 20;
/**
 * ...and at least this many freed slots, whatever the capacity: a worker of concurrency 1 would
 * otherwise close a window at its next completion and measure one job's run time as its rate
 * (the whole receive-and-run cycle is what it must cover), asking twice as much ahead.
 */
const MIN_WINDOW_COUNT = 20;
/** Weight of a new sample in the round trip's moving average. */
const ALPHA = 0.3;
/**
 * The round trip counted at most this long: one slow receive (a pause, a retried call) must not
 * make the worker claim seconds of work ahead. With HEADROOM, at most 200 ms of work at the
 * recent rate is asked ahead (400 ms while climbing).
 */
const MAX_ROUND_TRIP_MS = 100;
/**
 * Ask for this many times what the recent rate needs: the rate is measured from what the worker
 * already does, so asking for exactly that would hold it where it is. Measured (no-op jobs,
 * concurrency 10, 15 ms per SQS call): 1,525 → 2,086 jobs/s with 2×.
 */
const HEADROOM = 2;
/**
 * ...and this many while climbing: a window that closed early (a capacity's worth of slots freed
 * within 100 ms) whose rate is at least CLIMB_RATIO times the one before it (from nothing
 * included: a drain starting) measured receives that were still short of the pace, so the next
 * step asks twice as far. Only while handler slots sit free, in early windows: with 8 worker
 * processes of `ledger.post` (their slots full, rates that jump from one window to the next)
 * climbing on every jump claimed ahead what the surplus hand-back then released, 500–1,700 jobs
 * of a 10,000-job drain against 0–74 without climbing, at the same rate. Once the rate levels
 * off (or falls: long jobs after fast ones) it is HEADROOM again. Measured (no-op jobs, concurrency 10, 15 ms per SQS
 * call, drains of 5,000 by a worker started into the backlog, two alternating pairs of 5 runs):
 * the delayed drains' medians went from 9,771 and 9,755 jobs/s to 10,381 and 10,313, their
 * share of the zero-delay rate from 82 and 86 % to 92 and 87 % (the runs' ranges overlap).
 */
const CLIMB_HEADROOM = 4;
const CLIMB_RATIO = 1.5;

export class Pace {
  /** Moving average of a full receive's round trip plus its claim, ms. */
  private roundTripMs = 0;
  /** Handler slots freed per ms over the last window. */
  private rate = 0;
  /** The last window closed early, with slots free, at CLIMB_RATIO times the rate before it or more. */
  private climbing = false;
  private sampledAt: number;
  private sampledCount = 0;
  private readonly windowCount: number;

  /**
   * `finished`: how many handler slots have freed since the worker started (monotonic).
   * `windowCount`: freed slots that close a window early (after MIN_WINDOW_MS): the worker's
   * capacity (at least MIN_WINDOW_COUNT).
   */
  constructor(
    private readonly finished: () => number,
    private readonly now: () => number = () => performance.now(),
    windowCount = Number.POSITIVE_INFINITY,
  ) {
    this.windowCount = Math.max(windowCount, MIN_WINDOW_COUNT);
    this.sampledAt = now();
  }

  /** A receive that asked for `asked` and got `got` in `ms` (through its claim). */
  receive(asked: number, got: number, ms: number): void {
    if (got < asked || asked === 0) return;
    this.roundTripMs = this.roundTripMs === 0 ? ms : this.roundTripMs + ALPHA * (ms - this.roundTripMs);
  }

  /**
   * The slots expected to free within one round trip, at most `cap`. `starved`: handler slots sit
   * free now, so the rate is the receives' and not the jobs' (only then does a rise count as a
   * climb).
   */
  ahead(cap: number, starved = true): number {
    const now = this.now();
    const elapsed = now - this.sampledAt;
    const count = elapsed >= MIN_WINDOW_MS ? this.finished() : this.sampledCount;
    if (elapsed >= RATE_WINDOW_MS || count - this.sampledCount >= this.windowCount) {
      // A gap much longer than the window (the loop waited: idle, or every slot busy with long
      // jobs) says nothing about the rate now: start from nothing, the next window measures it.
      const rate = elapsed > 2 * RATE_WINDOW_MS ? 0 : (count - this.sampledCount) / elapsed;
      // A climb only while slots sit free (the receives hold the rate back, not the jobs), in a
      // window a capacity's worth of fast jobs closed early: slower jobs' rates jump from window
      // to window, and asking twice as far on their jumps over-claimed.
      this.climbing = starved && elapsed < RATE_WINDOW_MS && rate > 0 && rate >= CLIMB_RATIO * this.rate;
      this.rate = rate;
      this.sampledAt = now;
      this.sampledCount = count;
    }
    const headroom = this.climbing ? CLIMB_HEADROOM : HEADROOM;
    return Math.min(cap, Math.floor(headroom * this.rate * Math.min(this.roundTripMs, MAX_ROUND_TRIP_MS)));
  }
}
