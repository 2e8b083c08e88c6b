// The live view's event bus against a real PostgreSQL: a worker's sink batches events into one
// pg_notify statement per flush, chunked under the 8000-byte payload limit, and the API's LISTEN
// feed receives them in order, keeps a bounded ring, and reconnects when its connection is
// terminated. Also the switches: JOBS_EVENTS, and the SQS fault injection that refuses to run
// without a local endpoint.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../runtime/config/rules.ts';
import {
  eventsEnabled,
  MAX_PAYLOAD_BYTES,
  NotifyEventSink,
  packEvents,
  workerEventSink,
  type LiveEvent,
} from '../../runtime/live/events.ts';
import { LiveFeed, type FeedEvent } from '../../runtime/live/feed.ts';
import { FaultyQueue, InjectedSqsError, sqsFaultRateFromEnv, withSqsFaults } from '../../runtime/queue/fault-injection.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { waitFor } from '../support/platform.ts';

const ev = (i: number, detail = ''): LiveEvent => ({
  kind: 'claimed',
  workerId: 'w-1',
  jobId: `job-${i}`,
  type: 'ledger.post',
  attempt: 1,
  at: new Date().toISOString(),
  ...(detail ? { detail } : {}),
});

describe('packEvents', () => {
  it('keeps every chunk under the payload limit, loses no event and keeps their order', () => {
    const events = Array.from({ length: 300 }, (_, i) => ev(i, 'x'.repeat(i % 7 === 0 ? 350 : 20)));
    const chunks = packEvents(events);
    expect(chunks.length).toBeGreaterThan(3);
    for (const c of chunks) expect(Buffer.byteLength(c)).toBeLessThanOrEqual(MAX_PAYLOAD_BYTES);
    expect(chunks.flatMap((c) => JSON.parse(c) as LiveEvent[]).map((e) => e.jobId)).toEqual(events.map((e) => e.jobId));
  });

  it('an event too large alone keeps its fields and loses only its detail', () => {
    const [chunk] = packEvents([{ ...ev(1), detail: 'é'.repeat(5000) }]);
    expect(Buffer.byteLength(chunk!)).toBeLessThan(MAX_PAYLOAD_BYTES);
    expect(JSON.parse(chunk!)[0]).toMatchObject({ jobId: 'job-1', detail: '(detail too large for the event bus)' });
  });
});

describe('JOBS_EVENTS and JOBS_FAULT_SQS_ERROR_RATE', () => {
  it('events are off unless JOBS_EVENTS=notify, and a typo stops the start', () => {
    expect(eventsEnabled({})).toBe(false);
    expect(eventsEnabled({ JOBS_EVENTS: 'off' })).toBe(false);
    expect(eventsEnabled({ JOBS_EVENTS: 'notify' })).toBe(true);
    expect(() => eventsEnabled({ JOBS_EVENTS: 'notfy' })).toThrow(/JOBS_EVENTS = "notfy" must be "notify"/);
    expect(workerEventSink({}, { query: async () => ({}) } as never, 'w')).toBeNull();
  });

  it('SQS fault injection is refused without a local endpoint, and fails the share of calls it is given', async () => {
    expect(sqsFaultRateFromEnv({})).toBeNull();
    expect(() => sqsFaultRateFromEnv({ JOBS_FAULT_SQS_ERROR_RATE: '0.2' })).toThrow(ConfigError);
    expect(() => sqsFaultRateFromEnv({ JOBS_FAULT_SQS_ERROR_RATE: '0.2' })).toThrow(/allowed only with a local endpoint/);
    expect(() => sqsFaultRateFromEnv({ JOBS_FAULT_SQS_ERROR_RATE: '2', JOBS_SQS_ENDPOINT: 'http://127.0.0.1:1' })).toThrow(/at most 0.9/);
    const inner = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
    expect(withSqsFaults(inner, {})).toBe(inner);
    // Each call draws once (fail?) and, when failing, once more (before or after the request).
    const draws = [0.1, 0.9, /* ok: */ 0.9, /* fail before: */ 0.1, 0.1];
    const seen: string[] = [];
    const q = new FaultyQueue(
      inner,
      0.5,
      (op, when) => seen.push(`${op}:${when}`),
      () => draws.shift()!,
    );
    await expect(q.send([{ body: 'a' }])).rejects.toBeInstanceOf(InjectedSqsError);
    expect(inner.sentLog).toHaveLength(1); // done, but the answer was "lost"
    await q.send([{ body: 'b' }]);
    expect(inner.sentLog).toHaveLength(2);
    await expect(q.send([{ body: 'c' }])).rejects.toThrow(/request not sent/);
    expect(inner.sentLog).toHaveLength(2);
    expect(seen).toEqual(['SendMessageBatch:after', 'SendMessageBatch:before']);
    expect(q.injected.SendMessageBatch).toBe(2);
    inner.close();
  });
});

describe('NOTIFY sink → LISTEN feed', () => {
  let db: TestDb;
  let feed: LiveFeed;
  const received: FeedEvent[] = [];

  beforeAll(async () => {
    db = await createTestDb({ migrate: false });
    feed = new LiveFeed({ url: db.url, capacity: 50 });
    feed.subscribe((e) => received.push(...e));
    await feed.start();
    await waitFor(() => feed.connected, 5000, 'the feed to LISTEN');
  });
  afterAll(async () => {
    await feed?.stop();
    await db?.drop();
  });

  it('sends a burst as one statement per flush, chunked, and the feed gets every event in order', async () => {
    const statements: string[] = [];
    const pool = {
      query: (text: string, values: unknown[]) => {
        statements.push(text);
        return db.pool.query(text, values);
      },
    };
    const counted = new NotifyEventSink(pool as never, { flushMs: 50 });
    const start = received.length;
    for (let i = 0; i < 200; i++) counted.push(ev(i, 'y'.repeat(100)));
    await waitFor(() => received.length - start >= 200, 5000, '200 events');
    expect(statements).toHaveLength(1);
    expect(received.slice(start).map((e) => e.jobId)).toEqual(Array.from({ length: 200 }, (_, i) => `job-${i}`));
    // Sequence numbers are consecutive; the ring keeps only the newest `capacity`.
    const seqs = received.slice(start).map((e) => e.seq);
    expect(seqs.at(-1)! - seqs[0]!).toBe(199);
    expect(feed.since(0)).toHaveLength(50);
    expect(feed.since(0).at(-1)!.jobId).toBe('job-199');
    await counted.stop();
  });

  it('a flush that fails keeps its events for the next one', async () => {
    let fail = true;
    const flaky = {
      query: (text: string, values: unknown[]) => (fail ? Promise.reject(new Error('connection terminated')) : db.pool.query(text, values)),
    };
    const sink = new NotifyEventSink(flaky as never, { flushMs: 20 });
    const start = received.length;
    sink.push(ev(1000));
    await sink.flush();
    expect(received.length).toBe(start);
    fail = false;
    await sink.flush();
    await waitFor(() => received.some((e) => e.jobId === 'job-1000'), 5000, 'the retried event');
    await sink.stop();
  });

  it('tracks workers from their presence pings without putting the pings in the feed', async () => {
    const sink = new NotifyEventSink(db.pool, { flushMs: 10 });
    sink.push({ kind: 'worker-alive', workerId: 'w-9', at: new Date().toISOString(), pid: 4242, running: 3 });
    await sink.stop();
    await waitFor(() => feed.workers.get('w-9'), 5000, 'worker w-9');
    expect(feed.workers.get('w-9')).toMatchObject({ pid: 4242, running: 3, down: false });
    expect(received.some((e) => e.kind === 'worker-alive')).toBe(false);
  });

  it('reconnects after its connection is terminated, and receives again', async () => {
    await db.pool.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'jobs-api live feed' AND datname = current_database()",
    );
    await waitFor(() => !feed.connected, 5000, 'the feed to notice');
    await waitFor(() => feed.connected, 10_000, 'the feed to reconnect');
    const sink = new NotifyEventSink(db.pool, { flushMs: 10 });
    sink.push(ev(2000));
    await sink.stop();
    await waitFor(() => received.some((e) => e.jobId === 'job-2000'), 5000, 'an event after the reconnect');
  });
});
