// `jobs republish` and POST /v1/pending-jobs/republish: on-call forces a fresh message for
// pending jobs whose message is lost. Only pending jobs; each recorded as an operator action;
// published through the outbox; afterwards each job runs exactly once.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../runtime/observability/log.ts';
import { OpsRoutes } from '../../runtime/http/oncall-routes.ts';
import { createOpsServices, type OpsServices } from '../../runtime/oncall/services.ts';
import { call, startServer, type TestServer } from '../api/support.ts';
import { createPlatform, waitFor, type Platform } from '../support/platform.ts';

const TOKEN = 'republish-token';
let p: Platform;
let ops: OpsServices;
let api: TestServer;

beforeAll(async () => {
  p = await createPlatform();
  ops = createOpsServices({ pool: p.db.pool, registry: p.registry, publisher: p.publisher, queue: p.queue, log: silentLogger });
  api = await startServer({
    pool: p.db.pool,
    client: p.client,
    registry: p.registry,
    log: silentLogger,
    apiToken: TOKEN,
    ops: new OpsRoutes(ops),
  });
});
afterAll(async () => {
  await api.close();
  await p.close();
});

const actions = async (ids: string[]) =>
  (
    await p.db.pool.query<{ job_id: string; by: string; reason: string | null }>(
      "SELECT job_id, by, reason FROM jobs.operator_action WHERE action = 'job-republish' AND job_id = ANY($1::uuid[])",
      [ids],
    )
  ).rows;

describe('republish', () => {
  it('by id: pending jobs get a message, recorded; a running, finished or unknown job is skipped with the reason; each runs exactly once', async () => {
    const jobs = await p.client.enqueueNow(
      Array.from({ length: 3 }, (_, i) => ({ type: 'ledger.post', payload: { batch: `RP-${i}`, entries: 2 } })),
    );
    await p.publisher.flush();
    p.queue.purge();
    const [a, b, c] = jobs.map((j) => j.job.id) as [string, string, string];
    await p.store.cancel(c, 'test');
    const unknown = '01900000-0000-7000-8000-000000000000';
    const r = await ops.republish.republish({ ids: [a, b, c, unknown], by: 'alice (cli)', reason: 'queue purged by mistake' });
    expect(r.jobs.map((j) => j.id).sort()).toEqual([a, b].sort());
    expect(r.skipped).toEqual([
      expect.objectContaining({ id: c, state: 'cancelled', reason: expect.stringMatching(/finished job needs no message/) }),
      expect.objectContaining({ id: unknown, state: null, reason: 'no such job' }),
    ]);
    expect((await actions([a, b, c])).map((x) => [x.job_id, x.by, x.reason]).sort()).toEqual(
      [
        [a, 'alice (cli)', 'queue purged by mistake'],
        [b, 'alice (cli)', 'queue purged by mistake'],
      ].sort(),
    );
    await waitFor(() => p.queue.approximateCount().then((n) => n === 2), 2000, 'two messages');

    p.worker().start();
    await waitFor(
      async () => (await p.store.get(a))?.state === 'succeeded' && (await p.store.get(b))?.state === 'succeeded',
      10_000,
      'both succeeded',
    );
    const { rows } = await p.db.pool.query(
      "SELECT batch, count(*)::int AS n FROM ledger_entries WHERE batch LIKE 'RP-%' GROUP BY batch ORDER BY batch",
    );
    expect(rows).toEqual([
      { batch: 'RP-0', n: 2 },
      { batch: 'RP-1', n: 2 },
    ]);
  });

  it('by type and by age: only pending jobs of that type, or due before the time', async () => {
    const later = new Date(Date.now() + 60_000);
    const [x] = await p.client.enqueueNow([{ type: 'inventory.cost', payload: { store: 'S9', period: '2026-11', skus: 2 }, runAt: later }]);
    const [y] = await p.client.enqueueNow([{ type: 'ledger.post', payload: { batch: 'RP-AGE', entries: 1 }, runAt: later }]);
    const byType = await ops.republish.republish({ type: 'inventory.cost', by: 'bob' });
    expect(byType.jobs.map((j) => j.id)).toEqual([x!.job.id]);
    // Due in a minute: not "due for longer than 10 minutes".
    const old = await ops.republish.republish({ dueBefore: new Date(Date.now() - 600_000), by: 'bob' });
    expect(old.jobs.map((j) => j.id)).not.toContain(y!.job.id);
    const none = await ops.republish.republish({ dueBefore: new Date(Date.now() + 120_000), type: 'ledger.post', by: 'bob' });
    expect(none.jobs.map((j) => j.id)).toEqual([y!.job.id]);
    await expect(ops.republish.republish({ by: 'bob' })).rejects.toThrow(/name the jobs/);
    await p.store.cancel(x!.job.id, 'test');
    await p.store.cancel(y!.job.id, 'test');
  });

  it('POST /v1/pending-jobs/republish: 400 naming what is missing, 401 without the token, 200 with what it did', async () => {
    const [j] = await p.client.enqueueNow([
      { type: 'ledger.post', payload: { batch: 'RP-API', entries: 1 }, runAt: new Date(Date.now() + 60_000) },
    ]);
    const auth = { authorization: `Bearer ${TOKEN}` };
    expect((await call(api.url, 'POST', '/v1/pending-jobs/republish', { json: { ids: [j!.job.id] } })).status).toBe(401);
    const empty = await call(api.url, 'POST', '/v1/pending-jobs/republish', { json: {}, headers: auth });
    expect(empty.status).toBe(400);
    expect(empty.body.error.message).toMatch(/ids, type, or olderThanSeconds/);
    const bad = await call(api.url, 'POST', '/v1/pending-jobs/republish', { json: { ids: ['nope'] }, headers: auth });
    expect(bad.status).toBe(400);
    expect(bad.body.error.field).toBe('ids');
    const ok = await call(api.url, 'POST', '/v1/pending-jobs/republish', {
      json: { ids: [j!.job.id], by: 'carol', reason: 'drill' },
      headers: auth,
    });
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ republished: 1, jobs: [{ id: j!.job.id, type: 'ledger.post' }], skipped: [] });
    expect((await actions([j!.job.id]))[0]).toMatchObject({ by: expect.stringMatching(/^carol \(api, /), reason: 'drill' });
    await p.store.cancel(j!.job.id, 'test');
  });
});
