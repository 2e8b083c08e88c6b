// The live view's HTTP side on a real API server over PostgreSQL: the page at / (static, no
// auth, a strict CSP), /live/state with leases counted down by the database's clock, the SSE
// stream, the token on /live/*, and the fault routes, which exist only when the local stack
// hands the API its fault control: without JOBS_LIVE_FAULTS_URL they are 404, as in production.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LiveFeed } from '../../runtime/live/feed.ts';
import { createLiveRoutes } from '../../runtime/http/live-routes.ts';
import { liveConfigFromEnv } from '../../runtime/http/live.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { call, startServer, type TestServer } from '../api/support.ts';
import { createPlatform, type Platform } from '../support/platform.ts';

const TOKEN = 'live-test-token';
const auth = { headers: { authorization: `Bearer ${TOKEN}` } };

/** Read an SSE stream until `until` returns true for the events seen so far. */
async function readStream(
  url: string,
  until: (events: { event: string; data: any }[]) => boolean,
  headers: Record<string, string> = {},
): Promise<{ contentType: string | null; events: { event: string; data: any }[] }> {
  const ac = new AbortController();
  const res = await fetch(url, { headers, signal: ac.signal });
  const events: { event: string; data: any }[] = [];
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = '';
  const timeout = setTimeout(() => ac.abort(), 10_000);
  try {
    while (!until(events)) {
      const r = await reader.read();
      if (r.done) break;
      buf += dec.decode(r.value, { stream: true });
      let i: number;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const event = /^event: (.*)$/m.exec(block)?.[1];
        const data = /^data: (.*)$/m.exec(block)?.[1];
        if (event && data) events.push({ event, data: JSON.parse(data) });
      }
    }
  } finally {
    clearTimeout(timeout);
    ac.abort();
  }
  return { contentType: res.headers.get('content-type'), events };
}

describe('live view routes', () => {
  let p: Platform;
  let feed: LiveFeed;
  let api: TestServer;
  let jobId: string;

  beforeAll(async () => {
    p = await createPlatform();
    feed = new LiveFeed({ url: p.db.url });
    const live = createLiveRoutes({
      pool: p.db.pool,
      store: p.store,
      feed,
      leaseSeconds: 30,
      heartbeatSeconds: 10,
      log: silentLogger,
      stateIntervalMs: 100,
    });
    api = await startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: silentLogger, apiToken: TOKEN, live });
    const [r] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch: 'LIVE-1', entries: 2 } });
    jobId = r!.job.id;
    await p.store.claim([jobId], 'worker-live-1', 30);
    await p.store.renewLeases([{ id: jobId, attempt: 1, progress: { fraction: 0.4, message: 'posting' } }], 30);
  });
  afterAll(async () => {
    await api?.close();
    await feed?.stop();
    await p?.close();
  });

  it('GET / is the page: HTML, no token needed, nothing loaded from elsewhere', async () => {
    const res = await fetch(`${api.url}/`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(res.headers.get('content-security-policy')).toMatch(/default-src 'none'.*connect-src 'self'/);
    const html = await res.text();
    expect(html).toMatch(/<title>Jobs — live<\/title>/);
    expect(html).not.toMatch(/<script[^>]+src=|<link[^>]+href=|https?:\/\//);
    expect(html).not.toMatch(/innerHTML/);
  });

  it('/live/* needs the API token, like /v1', async () => {
    expect((await call(api.url, 'GET', '/live/state')).status).toBe(401);
    expect((await call(api.url, 'GET', '/live/events')).status).toBe(401);
    expect((await call(api.url, 'GET', '/live/state', auth)).status).toBe(200);
  });

  it('GET /live/state: jobs by state, the lease with owner, attempt, time left by the database clock, and progress', async () => {
    const s = (await call(api.url, 'GET', '/live/state', auth)).body;
    expect(s.jobs).toMatchObject({ running: 1 });
    expect(s.leases).toEqual([
      expect.objectContaining({
        id: jobId,
        type: 'ledger.post',
        owner: 'worker-live-1',
        attempt: 1,
        attemptsUsed: 1,
        progress: { fraction: 0.4, message: 'posting' },
      }),
    ]);
    expect(s.leases[0].leaseLeftMs).toBeGreaterThan(25_000);
    expect(s.leases[0].leaseLeftMs).toBeLessThanOrEqual(30_000);
    expect(s.workers).toEqual([expect.objectContaining({ id: 'worker-live-1', leases: 1 })]);
    expect(s).toMatchObject({
      queue: null,
      dlq: null,
      events: { enabled: true },
      faults: { enabled: false },
      timings: { leaseSeconds: 30, heartbeatSeconds: 10 },
    });
  });

  it('a job due in hours reads as due, with its SQS message sent only 15 min before (a newcomer took one for a lost job)', async () => {
    const [r] = await p.client.enqueueNow({
      type: 'ledger.post',
      payload: { batch: 'LIVE-LATER', entries: 1 },
      runAt: new Date(Date.now() + 3 * 3_600_000),
    });
    const s = (await call(api.url, 'GET', '/live/state', auth)).body;
    const shown = s.recent.find((j: { id: string }) => j.id === r!.job.id);
    expect(shown.due).toMatch(/^\S+Z, in (2 h 59|3 h 0) min \(its SQS message is sent 15 min before\)$/);
    expect(s.recent.find((j: { id: string }) => j.id === jobId).due).toBeNull();
    await p.store.cancel(r!.job.id, 'test');
  });

  it('GET /live/stream: snapshots every interval and events as they arrive, after the backlog', async () => {
    feed.publish([{ kind: 'claimed', workerId: 'worker-live-1', jobId, type: 'ledger.post', attempt: 1, at: new Date().toISOString() }]);
    let pushed = false;
    const { contentType, events } = await readStream(
      `${api.url}/live/stream`,
      (evs) => {
        if (!pushed && evs.some((e) => e.event === 'state')) {
          pushed = true;
          feed.publish([
            { kind: 'lease-lost', workerId: 'worker-live-1', jobId, attempt: 1, at: new Date().toISOString(), detail: 'heartbeat' },
          ]);
        }
        return evs.some((e) => e.event === 'events' && e.data.some((x: { kind: string }) => x.kind === 'lease-lost'));
      },
      auth.headers,
    );
    expect(contentType).toBe('text/event-stream; charset=utf-8');
    expect(events[0]).toEqual({ event: 'hello', data: { epoch: feed.epoch } });
    expect(events[1]).toMatchObject({ event: 'events', data: [expect.objectContaining({ kind: 'claimed', jobId })] });
    expect(events.find((e) => e.event === 'state')!.data.leases[0].id).toBe(jobId);
  });

  it('a page that resumes after sequence N gets only newer events, unless N came from another feed (the API restarted)', async () => {
    const last = feed.lastSeq;
    const hasEvents = (evs: { event: string }[]) => evs.some((e) => e.event === 'state');
    const same = await readStream(`${api.url}/live/stream?after=${last}&epoch=${feed.epoch}`, hasEvents, auth.headers);
    expect(same.events.filter((e) => e.event === 'events')).toEqual([]);
    const other = await readStream(`${api.url}/live/stream?after=${last + 1000}&epoch=0badfeed`, hasEvents, auth.headers);
    expect(other.events.find((e) => e.event === 'events')!.data[0].seq).toBe(1);
  });

  it('without the local stack, the fault routes do not exist: 404 for every fault', async () => {
    for (const [method, path] of [
      ['GET', '/live/faults'],
      ['POST', '/live/faults/kill'],
      ['POST', '/live/faults/pause'],
      ['POST', '/live/faults/duplicate'],
      ['POST', '/live/faults/rollback'],
    ] as const) {
      const r = await call(api.url, method, path, auth);
      expect(r.status, `${method} ${path}`).toBe(404);
      expect(r.body.error.message).toMatch(/only in the local stack/);
    }
    // And the API's configuration has none unless the stack set both variables.
    expect(liveConfigFromEnv({}).faults).toBeUndefined();
    expect(liveConfigFromEnv({ JOBS_LIVE_FAULTS_URL: 'http://127.0.0.1:1' }).faults).toBeUndefined();
  });

  it('reads attempts and errors as `jobs show` does: a redriven job that then succeeded is not "6 / 3" with an error, and a final attempt is flagged', async () => {
    // What a redrive followed by a success leaves on the row: five claims handed back, one used, the old error kept.
    const [redriven, dead, last] = await p.client.enqueueNow([
      { type: 'ledger.post', payload: { batch: 'LIVE-REDRIVEN', entries: 1 } },
      { type: 'ledger.post', payload: { batch: 'LIVE-DEAD', entries: 1 } },
      { type: 'ledger.post', payload: { batch: 'LIVE-LAST', entries: 1 }, maxAttempts: 1 },
    ]);
    await p.db.pool.query(
      `UPDATE jobs.job SET state = $2, attempt = 6, releases = $3, max_attempts = 3, finished_at = now(),
              last_error = '{"name":"Error","message":"ledger locked","retryable":true}'
        WHERE id = $1`,
      [redriven!.job.id, 'succeeded', 5],
    );
    await p.db.pool.query(
      `UPDATE jobs.job SET state = 'dead', attempt = 3, max_attempts = 3, finished_at = now(),
              last_error = '{"name":"Error","message":"ledger locked","retryable":true}'
        WHERE id = $1`,
      [dead!.job.id],
    );
    await p.store.claim([last!.job.id], 'worker-live-2', 30);

    const s = (await call(api.url, 'GET', '/live/state', auth)).body;
    const recent = (id: string) => s.recent.find((j: { id: string }) => j.id === id);
    expect(recent(redriven!.job.id)).toMatchObject({
      state: 'succeeded',
      attemptText: '6 (1 of 3 used, 5 released)',
      attemptsUsed: 1,
      capWarning: null,
      error: null,
      earlierError: 'an earlier attempt failed: Error: ledger locked',
    });
    expect(recent(dead!.job.id)).toMatchObject({ attemptText: '3 (3 of 3 used)', error: 'Error: ledger locked', earlierError: null });
    const lease = s.leases.find((l: { id: string }) => l.id === last!.job.id);
    expect(lease).toMatchObject({ attemptText: '1 (1 of 1 used)', capWarning: 'attempt 1 of 1 — next failure dead-letters' });
    expect(s.leases.find((l: { id: string }) => l.id === jobId)).toMatchObject({ capWarning: null });
  });
});

describe('live view fault routes in the local stack', () => {
  let p: Platform;
  let api: TestServer;
  let control: http.Server;
  const seen: { method: string; url: string; auth: string | undefined; body: string }[] = [];

  beforeAll(async () => {
    p = await createPlatform();
    // Stands in for the stack's fault control (dev/fault-control.ts).
    control = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        seen.push({ method: req.method!, url: req.url!, auth: req.headers.authorization, body });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ fault: req.url, result: { workerId: 'local-worker-1' } }));
      });
    });
    await new Promise<void>((r) => control.listen(0, '127.0.0.1', r));
    const env = {
      JOBS_LIVE_FAULTS_URL: `http://127.0.0.1:${(control.address() as AddressInfo).port}`,
      JOBS_LIVE_FAULTS_TOKEN: 'stack-secret',
    };
    const cfg = liveConfigFromEnv(env);
    const live = createLiveRoutes({
      pool: p.db.pool,
      store: p.store,
      feed: null,
      faults: cfg.faults!,
      leaseSeconds: 30,
      heartbeatSeconds: 10,
      log: silentLogger,
    });
    api = await startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: silentLogger, live });
  });
  afterAll(async () => {
    await api?.close();
    await new Promise((r) => control?.close(r));
    await p?.close();
  });

  it('forwards a fault to the stack with the stack token, and GET to list the workers', async () => {
    const r = await call(api.url, 'POST', '/live/faults/kill', { json: { workerId: 'local-worker-1' } });
    expect(r).toMatchObject({ status: 200, body: { result: { workerId: 'local-worker-1' } } });
    expect((await call(api.url, 'GET', '/live/faults')).status).toBe(200);
    expect(seen).toEqual([
      { method: 'POST', url: '/faults/kill', auth: 'Bearer stack-secret', body: '{"workerId":"local-worker-1"}' },
      { method: 'GET', url: '/faults', auth: 'Bearer stack-secret', body: '' },
    ]);
    expect((await call(api.url, 'GET', '/live/faults/kill')).status).toBe(405);
    const s = (await call(api.url, 'GET', '/live/state')).body;
    expect(s).toMatchObject({ faults: { enabled: true }, events: { enabled: false } });
  });
});
