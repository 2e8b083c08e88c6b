// On-call and the schedules: /v1/schedules and `jobs schedules list|pause|resume|trigger` against
// a real PostgreSQL. Pause, resume and trigger are recorded as operator actions with who asked;
// a trigger's job is published after its COMMIT; a name the build does not declare is refused
// naming the known ones. And the API service runs the scheduler itself: a schedule fires with no
// worker running.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApiService } from '../../runtime/apps/api.ts';
import { schedulesCommand } from '../../runtime/cli/schedules.ts';
import { ValidationError } from '../../runtime/domain/errors.ts';
import { ledgerPost } from '../../runtime/handlers/ledger-post.ts';
import { defineSchedule } from '../../runtime/handlers/schedule.ts';
import { OpsRoutes } from '../../runtime/http/oncall-routes.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { createOpsServices } from '../../runtime/oncall/services.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import { call, startServer, type TestServer } from '../api/support.ts';
import { createPlatform, waitFor, type Platform } from '../support/platform.ts';

const OPERATOR = 'schedules-operator-token';
const auth = { authorization: `Bearer ${OPERATOR}` };
const nightly = defineSchedule({
  name: 'nightly-posting',
  description: 'post the day',
  cron: '0 1 * * *',
  timeZone: 'Europe/Berlin',
  job: ledgerPost,
  payload: (o) => ({ batch: `day-${o.day(-1)}`, entries: 2 }),
  missed: 'all',
});

let p: Platform;
let api: TestServer;
beforeAll(async () => {
  p = await createPlatform();
  const ops = createOpsServices({
    pool: p.db.pool,
    registry: p.registry,
    publisher: p.publisher,
    queue: p.queue,
    log: silentLogger,
    client: p.client,
    schedules: [nightly],
  });
  api = await startServer({
    pool: p.db.pool,
    client: p.client,
    registry: p.registry,
    log: silentLogger,
    operatorToken: OPERATOR,
    ops: new OpsRoutes(ops),
  });
});
afterAll(async () => {
  await api.close();
  await p.close();
});

const actions = async (schedule: string) =>
  (
    await p.db.pool.query<{ action: string; by: string; reason: string | null; job_id: string | null }>(
      "SELECT action, by, reason, job_id FROM jobs.operator_action WHERE detail->>'schedule' = $1 ORDER BY id",
      [schedule],
    )
  ).rows;

describe('/v1/schedules', () => {
  it('lists, pauses, resumes and triggers, each change an operator action with who asked', async () => {
    const list = await call(api.url, 'GET', '/v1/schedules?next=2', { headers: auth });
    expect(list.status).toBe(200);
    expect(list.body.schedules).toEqual([
      expect.objectContaining({
        name: 'nightly-posting',
        cron: '0 1 * * *',
        timeZone: 'Europe/Berlin',
        type: 'ledger.post',
        missed: 'all',
        paused: null,
        next: [
          { at: expect.any(String), label: expect.stringMatching(/T01:00:00\+0[12]:00$/) },
          { at: expect.any(String), label: expect.stringMatching(/T01:00:00\+0[12]:00$/) },
        ],
        last: [],
      }),
    ]);

    const pause = (json: unknown) => call(api.url, 'POST', '/v1/schedules/nightly-posting/pause', { headers: auth, json });
    expect((await pause({ by: 'pat', reason: 'year-end freeze' })).body).toMatchObject({
      paused: true,
      schedule: { paused: { by: 'pat (api, 127.0.0.1)', reason: 'year-end freeze' } },
    });
    const again = await pause({ by: 'sam' });
    expect([again.status, again.body.error.code, again.body.error.message]).toEqual([
      409,
      'already_paused',
      expect.stringMatching(/^schedule nightly-posting is already paused \(by pat \(api, 127\.0\.0\.1\) at /),
    ]);

    const resume = () => call(api.url, 'POST', '/v1/schedules/nightly-posting/resume', { headers: auth, json: { by: 'pat' } });
    expect((await resume()).body).toMatchObject({ resumed: true, schedule: { paused: null } });
    expect((await resume()).body.error.code).toBe('not_paused');

    const trigger = await call(api.url, 'POST', '/v1/schedules/nightly-posting/trigger', { headers: auth, json: { reason: 'rerun' } });
    expect(trigger.status).toBe(201);
    expect(trigger.body).toMatchObject({
      schedule: 'nightly-posting',
      key: expect.stringMatching(/^schedule:nightly-posting:manual:\d{4}-\d\d-\d\dT/),
      job: { type: 'ledger.post', state: 'pending', duplicate: false, payload: { batch: expect.stringMatching(/^day-\d{4}-\d\d-\d\d$/) } },
    });
    // Published after its COMMIT, as every enqueue.
    await waitFor(() => p.queue.peek().some((m) => JSON.parse(m.body).jobId === trigger.body.job.id), 2000, 'the message');

    expect(await actions('nightly-posting')).toEqual([
      { action: 'schedule-pause', by: 'pat (api, 127.0.0.1)', reason: 'year-end freeze', job_id: null },
      { action: 'schedule-resume', by: 'pat (api, 127.0.0.1)', reason: null, job_id: null },
      { action: 'schedule-trigger', by: 'api, 127.0.0.1', reason: 'rerun', job_id: trigger.body.job.id },
    ]);
  });

  it('a name this build does not declare is a 404 naming the known ones; bad input is a 400 naming the field', async () => {
    const r = await call(api.url, 'POST', '/v1/schedules/month-end/trigger', { headers: auth, json: {} });
    expect([r.status, r.body.error.code, r.body.error.message]).toEqual([
      404,
      'schedule_not_found',
      'no schedule "month-end" in this build; known schedules: nightly-posting',
    ]);
    const bad = await call(api.url, 'POST', '/v1/schedules/nightly-posting/pause', { headers: auth, json: { when: 'now' } });
    expect([bad.status, bad.body.error.field]).toEqual([400, 'when']);
    expect((await call(api.url, 'GET', '/v1/schedules?next=99', { headers: auth })).body.error.field).toBe('next');
  });
});

describe('jobs schedules', () => {
  const run = async (...argv: string[]) => {
    const lines: string[] = [];
    const code = await schedulesCommand(argv, { DATABASE_URL: p.db.url, USER: 'dana' }, (s) => lines.push(s));
    return { code, text: lines.join('\n') };
  };

  it('pause, list, resume, trigger: recorded with --by, exit 1 when nothing changed', async () => {
    // The CLI sees the schedules this build declares (runtime/handlers/schedules.ts).
    expect(await run('pause', 'month-end-close', '--by', 'dana', '--reason', 'audit')).toEqual({
      code: 0,
      text: 'paused schedule month-end-close: no occurrence is enqueued until it is resumed; recorded as schedule-pause by dana (cli)',
    });
    expect((await run('pause', 'month-end-close')).code).toBe(1);
    const list = await run('list');
    expect(list.text).toMatch(
      /^month-end-close {2}PAUSED by dana \(cli\) at \S+ \(audit\)\n {4}0 2 1 \* \* {2}Europe\/Berlin {2}→ inventory\.cost {2}missed: latest/,
    );
    expect(list.text).toMatch(/ {4}next: \d{4}-\d\d-01T02:00:00\+01:00, .* \(not while paused\)/);
    expect(await run('resume', 'month-end-close', '--by', 'dana')).toMatchObject({
      code: 0,
      text: expect.stringMatching(/^resumed schedule month-end-close from its next occurrence \(\d{4}-\d\d-01T02:00:00\+0[12]:00\)/),
    });
    expect((await run('resume', 'month-end-close')).code).toBe(1);
    const trigger = await run('trigger', 'month-end-close', '--by', 'dana', '--json');
    const job = JSON.parse(trigger.text);
    expect(job).toMatchObject({
      schedule: 'month-end-close',
      duplicate: false,
      job: { type: 'inventory.cost', payload: { store: 'S01', period: expect.stringMatching(/^\d{4}-\d\d$/) } },
    });
    // No queue in this environment: the job waits in the outbox for the services' relay.
    expect((await p.db.pool.query('SELECT 1 FROM jobs.outbox WHERE job_id = $1', [job.job.id])).rowCount).toBe(1);
    expect((await actions('month-end-close')).map((a) => [a.action, a.by, a.job_id])).toEqual([
      ['schedule-pause', 'dana (cli)', null],
      ['schedule-resume', 'dana (cli)', null],
      ['schedule-trigger', 'dana (cli)', job.job.id],
    ]);
  });

  it('an unknown schedule or subcommand is a usage error', async () => {
    await expect(run('trigger', 'nope')).rejects.toThrow(ValidationError);
    await expect(run('trigger', 'nope')).rejects.toThrow(/no schedule "nope" in this build; known schedules: month-end-close/);
    await expect(run('stop', 'month-end-close')).rejects.toThrow(/unknown subcommand stop; use list, pause, resume or trigger/);
  });
});

describe('the API service runs the scheduler', () => {
  it('a schedule due every second is enqueued by the API task alone, once per occurrence', async () => {
    const everySecond = defineSchedule({
      name: 'every-second',
      cron: '* * * * * *',
      timeZone: 'UTC',
      job: ledgerPost,
      payload: (o) => ({ batch: `s-${o.label}`, entries: 1 }),
      missed: 'skip',
    });
    const svc = await startApiService(
      { databaseUrl: p.db.url, queueUrl: 'http://unused', region: 'us-east-1', port: 0, poolSize: 4, defaultMaxAttempts: 3 },
      { queue: new MemoryQueue({ visibilityTimeoutSeconds: 30 }), log: silentLogger, host: '127.0.0.1', schedules: [everySecond] },
    );
    try {
      const keys = async () =>
        (
          await p.db.pool.query<{ k: string }>(
            "SELECT idempotency_key AS k FROM jobs.job WHERE idempotency_key LIKE 'schedule:every-second:%'",
          )
        ).rows.map((r) => r.k);
      await waitFor(async () => (await keys()).length > 0, 15_000, 'a job of every-second');
      const k = await keys();
      expect(new Set(k).size).toBe(k.length);
    } finally {
      await svc.shutdown('test');
    }
  });
});
