// How far ahead a worker receives (runtime/worker/pace.ts), on a clock the test moves: the rate
// is followed within one 100 ms window both ways (a drain must not spend seconds climbing to its
// pace, long jobs after fast ones must not be claimed at the fast ones' pace), a rate rising in
// windows a capacity's worth of fast jobs closed early asks twice as far (4× the rate × the round
// trip, then 2×; never in full 100 ms windows), a gap starts from nothing, and only full receives
// measure the round trip (a long poll that waited is not the network's time).
import { describe, expect, it } from 'vitest';
import { Pace } from '../../runtime/worker/pace.ts';

function paced(windowCount?: number) {
  let t = 0;
  let finished = 0;
  const pace = new Pace(
    () => finished,
    () => t,
    windowCount,
  );
  /** `n` slots freed over the next `ms`. */
  const run = (n: number, ms: number) => {
    finished += n;
    t += ms;
  };
  return { pace, run };
}

describe('asking ahead', () => {
  it('follows a rising rate within one 100 ms window', () => {
    const { pace, run } = paced();
    pace.receive(10, 10, 20); // full receives take 20 ms
    expect(pace.ahead(1000)).toBe(0);
    run(30, 100); // 0.3 jobs/ms
    expect(pace.ahead(1000)).toBe(12); // 2 × 0.3/ms × 20 ms
    run(300, 100); // ten times faster
    expect(pace.ahead(1000)).toBe(120); // at once, not a tenth of the way per window
  });

  it("a window that counted a capacity's worth closes after 20 ms: a starting drain climbs in steps of 20 ms, not 100", () => {
    const { pace, run } = paced(20); // capacity 20
    pace.receive(10, 10, 30);
    run(20, 10); // a capacity's worth, but not 20 ms yet
    expect(pace.ahead(1000)).toBe(0);
    run(0, 10); // 20 ms: 1 job/ms measured now, climbing from nothing
    expect(pace.ahead(1000)).toBe(120); // 4 × 1/ms × 30 ms
    run(60, 20); // 3 jobs/ms: still climbing
    expect(pace.ahead(1000)).toBe(360);
    run(10, 20); // fewer than a capacity: the window stays open until 100 ms
    expect(pace.ahead(1000)).toBe(360);
    run(5, 80); // 15 slots over 100 ms
    expect(pace.ahead(1000)).toBe(9); // 2 × 0.15/ms × 30 ms
  });

  it('asks twice as far while fast jobs climb, and no further once the rate levels off or falls', () => {
    const { pace, run } = paced(20);
    pace.receive(10, 10, 20);
    run(20, 20); // 1 job/ms, from nothing
    expect(pace.ahead(1000)).toBe(80); // 4 × 1/ms × 20 ms
    run(28, 20); // 1.4×: not a climb
    expect(pace.ahead(1000)).toBe(56); // 2 × 1.4/ms × 20 ms
    run(42, 20); // 1.5×: a climb
    expect(pace.ahead(1000)).toBe(168); // 4 × 2.1/ms × 20 ms
    run(20, 20); // falling
    expect(pace.ahead(1000)).toBe(40); // 2 × 1/ms × 20 ms
  });

  it('slower jobs, whose windows last 100 ms, never climb: their rates jump from window to window', () => {
    const { pace, run } = paced(20);
    pace.receive(10, 10, 20);
    run(10, 100); // 0.1 job/ms, from nothing, in a full window
    expect(pace.ahead(1000)).toBe(4); // 2 × 0.1/ms × 20 ms
    run(19, 100); // 1.9× the last window
    expect(pace.ahead(1000)).toBe(7); // 2 × 0.19/ms × 20 ms
  });

  it('a small capacity still needs 20 freed slots to close a window early: one completion is not a rate', () => {
    const { pace, run } = paced(1); // concurrency 1, prefetch 0
    pace.receive(1, 1, 20);
    run(1, 25); // one 20 ms job after a 20 ms round trip... measured over one job alone it would read 0.04/ms
    expect(pace.ahead(1000)).toBe(0);
    run(1, 75); // the window closes at 100 ms: 2 jobs in 100 ms
    expect(pace.ahead(1000)).toBe(0); // 2 × 0.02/ms × 20 ms = 0.8, rounded down
  });

  it('with early windows, long jobs after fast ones still ask nothing ahead within one window', () => {
    const { pace, run } = paced(20);
    pace.receive(10, 10, 20);
    run(100, 20); // 5 jobs/ms, closed early, climbing from nothing
    expect(pace.ahead(1000)).toBe(400);
    run(5, 30); // long jobs now: fewer than a capacity freed, the window stays open
    expect(pace.ahead(1000)).toBe(400);
    run(0, 70); // 100 ms: 5 slots over the window
    expect(pace.ahead(1000)).toBe(2); // 2 × 0.05/ms × 20 ms
  });

  it('never more than the bound it is given, nor 200 ms of work when a receive was slow', () => {
    const { pace, run } = paced();
    pace.receive(10, 10, 2_000); // one receive that took two seconds (a pause, a retried call)
    run(400, 100); // 4 jobs/ms
    expect(pace.ahead(160)).toBe(160);
    expect(pace.ahead(10_000)).toBe(800); // 2 × 4/ms × 100 ms, not × 2,000 ms
  });

  it('long jobs after fast ones ask nothing ahead within one window', () => {
    const { pace, run } = paced();
    pace.receive(10, 10, 20);
    run(400, 100);
    expect(pace.ahead(1000)).toBe(160);
    run(0, 100); // nothing finishes: every slot holds a long job
    expect(pace.ahead(1000)).toBe(0);
  });

  it('after a gap (the loop waited: idle, or every slot busy) it starts from nothing', () => {
    const { pace, run } = paced();
    pace.receive(10, 10, 20);
    run(400, 100);
    expect(pace.ahead(1000)).toBe(160);
    run(200, 1_000); // the burst's tail, then a long poll that waited
    expect(pace.ahead(1000)).toBe(0);
    run(300, 100); // busy again: measured within the next window
    expect(pace.ahead(1000)).toBe(120);
  });

  it('only full receives measure the round trip: a long poll that waited does not', () => {
    const { pace, run } = paced();
    pace.receive(10, 3, 20_000); // came back short after waiting 20 s
    run(300, 100);
    expect(pace.ahead(1000)).toBe(0);
    pace.receive(10, 10, 15);
    expect(pace.ahead(1000)).toBe(90); // 2 × 3/ms × 15 ms
  });
});
