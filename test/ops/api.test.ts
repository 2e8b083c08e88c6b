// The on-call routes inside the API server, in-process: behind the API token like every /v1 route
// when no operator token is configured (auth.test.ts: API_OPERATOR_TOKEN, the 401/403/200 matrix),
// the API's error shape, a 501 that says what to do when the API has no DLQ, cancelling a DLQ move
// task (AWS, with aws-sdk-client-mock; refused on a local endpoint), and the API service reading
// its on-call settings from the environment.
import { CancelMessageMoveTaskCommand, ResourceNotFoundException, SQSClient } from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApiService } from '../../runtime/apps/api.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { OpsRoutes } from '../../runtime/http/oncall-routes.ts';
import { createOpsServices, opsConfigFromEnv } from '../../runtime/oncall/services.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import { call, startServer, type TestServer } from '../api/support.ts';
import { createPlatform, type Platform } from '../support/platform.ts';

const TOKEN = 'ops-token-123';
const sqsMock = mockClient(SQSClient);
let p: Platform;
let api: TestServer;
/** With a DLQ on AWS (SQS mocked) and on a local endpoint (never reached: the cancel is refused first). */
let aws: TestServer;
let local: TestServer;
beforeAll(async () => {
  p = await createPlatform();
  const base = { pool: p.db.pool, registry: p.registry, publisher: p.publisher, queue: p.queue, log: silentLogger };
  const queues = {
    queueUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/erp-jobs',
    dlqUrl: 'https://sqs.eu-west-1.amazonaws.com/123456789012/erp-jobs-dlq',
    region: 'eu-west-1',
  };
  const server = (ops: OpsRoutes) =>
    startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: silentLogger, apiToken: TOKEN, ops });
  api = await server(new OpsRoutes(createOpsServices(base)));
  aws = await server(new OpsRoutes(createOpsServices({ ...base, ...queues })));
  local = await server(new OpsRoutes(createOpsServices({ ...base, ...queues, endpoint: 'http://127.0.0.1:1' })));
});
afterAll(async () => {
  await api.close();
  await aws.close();
  await local.close();
  await p.close();
  sqsMock.restore();
});
beforeEach(() => sqsMock.reset());
const auth = { authorization: `Bearer ${TOKEN}` };

describe('on-call routes in the API server', () => {
  it.each(['/v1/dead-jobs', '/v1/poison-messages', '/v1/stuck-jobs', '/v1/dlq/messages'])('%s needs the bearer token', async (path) => {
    const r = await call(api.url, 'GET', path);
    expect(r.status).toBe(401);
    expect(r.body.error.code).toBe('unauthorized');
  });

  it('answers with the token; the DLQ routes say what to do when this API has no DLQ URL', async () => {
    expect((await call(api.url, 'GET', '/v1/dead-jobs', { headers: auth })).body).toEqual({ deadJobs: [], nextCursor: null });
    expect((await call(api.url, 'GET', '/v1/stuck-jobs', { headers: auth })).body).toEqual({
      thresholds: { runningSeconds: 3600, pendingSeconds: 900 },
      stuckJobs: [],
    });
    // Other limits than the alarm's, as `jobs stuck --pending-seconds` (on-call drill: the API refused them).
    expect((await call(api.url, 'GET', '/v1/stuck-jobs?pendingSeconds=5', { headers: auth })).body.thresholds).toEqual({
      runningSeconds: 3600,
      pendingSeconds: 5,
    });
    const bad = await call(api.url, 'GET', '/v1/stuck-jobs?runningSeconds=0', { headers: auth });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({
      field: 'runningSeconds',
      message: expect.stringMatching(/must be a whole number from 1 to 604800/),
    });
    const dlq = await call(api.url, 'GET', '/v1/dlq/messages', { headers: auth });
    expect(dlq.status).toBe(501);
    expect(dlq.body.error).toMatchObject({
      code: 'dlq_not_configured',
      message: expect.stringMatching(/started without JOBS_DLQ_URL.*jobs dlq/),
    });
    expect((await call(api.url, 'HEAD', '/v1/dead-jobs', { headers: auth })).status).toBe(200);
  });

  it("keeps the API's error shape: 404 for an unknown job, 405 with Allow, 415 for a non-JSON body, cursor checked", async () => {
    const missing = await call(api.url, 'GET', '/v1/dead-jobs/00000000-0000-4000-8000-000000000000', { headers: auth });
    expect(missing).toMatchObject({ status: 404, body: { error: { code: 'job_not_found', field: 'id' } } });
    const wrong = await call(api.url, 'GET', '/v1/dead-jobs/redrive', { headers: auth });
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('POST');
    const text = await call(api.url, 'POST', '/v1/dead-jobs/redrive', { headers: { ...auth, 'content-type': 'text/plain' }, body: 'all' });
    expect(text.status).toBe(415);
    const cursor = await call(api.url, 'GET', '/v1/dead-jobs?cursor=abc', { headers: auth });
    expect(cursor).toMatchObject({ status: 400, body: { error: { field: 'cursor' } } });
    // A lane the platform does not have, in the listing and in a redrive's filter: 400 naming it.
    const lane = await call(api.url, 'GET', '/v1/dead-jobs?lane=fast', { headers: auth });
    expect(lane).toMatchObject({ status: 400, body: { error: { field: 'lane', message: expect.stringMatching(/urgent, bulk.*"fast"/) } } });
    expect((await call(api.url, 'GET', '/v1/dead-jobs?lane=urgent', { headers: auth })).status).toBe(200);
    const redrive = await call(api.url, 'POST', '/v1/dead-jobs/redrive', { headers: auth, json: { lane: 'fast', by: 'x' } });
    expect(redrive).toMatchObject({ status: 400, body: { error: { field: 'lane' } } });
    // null is every lane, as for the other filter fields and the DLQ routes' lane (on-call drill: it was refused as "null").
    const every = await call(api.url, 'POST', '/v1/dead-jobs/redrive', {
      headers: auth,
      json: { lane: null, all: true, dryRun: true, by: 'x' },
    });
    expect(every).toMatchObject({ status: 200, body: { dryRun: true } });
    // A discard can be previewed through the API too (it could not: dryRun was not a field).
    const preview = await call(api.url, 'POST', '/v1/dead-jobs/discard', {
      headers: auth,
      json: { lane: 'bulk', all: true, dryRun: true, by: 'x', reason: 'drill' },
    });
    expect(preview).toMatchObject({ status: 200, body: { dryRun: true, wouldDiscard: expect.any(Array) } });
  });

  it('POST /v1/dlq/move-tasks/cancel cancels the task SQS is given, recorded with who asked; an unknown or finished handle is a 404 naming it, one SQS denies a 403', async () => {
    sqsMock.on(CancelMessageMoveTaskCommand, { TaskHandle: 'task-handle-1' }).resolves({ ApproximateNumberOfMessagesMoved: 12 });
    sqsMock
      .on(CancelMessageMoveTaskCommand, { TaskHandle: 'task-handle-done' })
      .rejects(new ResourceNotFoundException({ message: 'Task does not exist.', $metadata: {} }));
    const ok = await call(aws.url, 'POST', '/v1/dlq/move-tasks/cancel', {
      headers: auth,
      json: { taskHandle: 'task-handle-1', by: 'pat' },
    });
    expect(ok).toMatchObject({
      status: 200,
      body: { cancelled: true, taskHandle: 'task-handle-1', moved: 12, by: 'pat (api, 127.0.0.1)' },
    });
    expect(sqsMock.commandCalls(CancelMessageMoveTaskCommand).map((c) => c.args[0].input)).toEqual([{ TaskHandle: 'task-handle-1' }]);
    const recorded = await p.db.pool.query("SELECT by, detail FROM jobs.operator_action WHERE action = 'dlq-move-cancel'");
    expect(recorded.rows).toEqual([{ by: 'pat (api, 127.0.0.1)', detail: { taskHandle: 'task-handle-1', moved: 12 } }]);

    const gone = await call(aws.url, 'POST', '/v1/dlq/move-tasks/cancel', { headers: auth, json: { taskHandle: 'task-handle-done' } });
    expect(gone.status).toBe(404);
    expect(gone.body.error).toMatchObject({
      code: 'move_task_not_found',
      field: 'taskHandle',
      message: expect.stringMatching(/^no running move task task-handle-done: .*jobs dlq move-status.*GET \/v1\/dlq\/move-tasks/),
    });
    // IAM: the grant covers this DLQ's tasks only (a handle from another queue or environment).
    sqsMock
      .on(CancelMessageMoveTaskCommand, { TaskHandle: 'task-handle-other' })
      .rejects(Object.assign(new Error('not authorized to perform: sqs:cancelmessagemovetask'), { name: 'AccessDeniedException' }));
    const denied = await call(aws.url, 'POST', '/v1/dlq/move-tasks/cancel', { headers: auth, json: { taskHandle: 'task-handle-other' } });
    expect(denied.status).toBe(403);
    expect(denied.body.error).toMatchObject({
      code: 'move_cancel_denied',
      field: 'taskHandle',
      message: expect.stringMatching(/^not allowed to cancel move task task-handle-other .*granted on this environment's DLQ only/),
    });
    expect((await p.db.pool.query("SELECT count(*)::int AS n FROM jobs.operator_action WHERE action = 'dlq-move-cancel'")).rows[0].n).toBe(
      1,
    );
    expect((await call(aws.url, 'GET', '/v1/dlq/move-tasks/cancel', { headers: auth })).status).toBe(405);
  });

  it('POST /v1/dlq/move-tasks/cancel: bad input is a 400 naming taskHandle, and a local endpoint refuses with a 409 without calling SQS', async () => {
    for (const json of [{}, { taskHandle: '' }, { taskHandle: 7 }, { taskHandle: 'x'.repeat(2049) }]) {
      const r = await call(aws.url, 'POST', '/v1/dlq/move-tasks/cancel', { headers: auth, json });
      expect(r.status, JSON.stringify(json).slice(0, 40)).toBe(400);
      expect(r.body.error, JSON.stringify(json).slice(0, 40)).toMatchObject({ code: 'invalid_field', field: 'taskHandle' });
    }
    expect(
      (await call(aws.url, 'POST', '/v1/dlq/move-tasks/cancel', { headers: auth, json: { taskHandle: 'h', bogus: 1 } })).body.error.field,
    ).toBe('bogus');
    expect((await call(aws.url, 'POST', '/v1/dlq/move-tasks/cancel', { headers: auth })).status).toBe(400);

    const refused = await call(local.url, 'POST', '/v1/dlq/move-tasks/cancel', {
      headers: auth,
      json: { taskHandle: 'task-handle-1', by: 'pat' },
    });
    expect(refused.status).toBe(409);
    expect(refused.body.error).toMatchObject({
      code: 'move_tasks_local',
      message: expect.stringMatching(/cannot cancel move task task-handle-1: the local SQS endpoint has no message move tasks/),
    });
    expect(sqsMock.commandCalls(CancelMessageMoveTaskCommand)).toHaveLength(0);
    expect((await call(api.url, 'POST', '/v1/dlq/move-tasks/cancel', { headers: auth, json: { taskHandle: 'h' } })).body.error.code).toBe(
      'dlq_not_configured',
    );
  });

  it('the API service reads JOBS_DLQ_URL and JOBS_STUCK_* and refuses bad ones by name', async () => {
    expect(opsConfigFromEnv({})).toEqual({ stuck: { runningSeconds: 3600, pendingSeconds: 900 } });
    expect(opsConfigFromEnv({ JOBS_DLQ_URL: 'http://127.0.0.1:1/q/dlq', JOBS_STUCK_PENDING_SECONDS: '60' })).toEqual({
      dlqUrl: 'http://127.0.0.1:1/q/dlq',
      stuck: { runningSeconds: 3600, pendingSeconds: 60 },
    });
    expect(() => opsConfigFromEnv({ JOBS_DLQ_URL: 'not a url' })).toThrow(/JOBS_DLQ_URL = "not a url" is not a URL/);
    expect(() => opsConfigFromEnv({ JOBS_STUCK_RUNNING_SECONDS: '-1' })).toThrow(
      /JOBS_STUCK_RUNNING_SECONDS = "-1" must be a whole number between 1 and 604800/,
    );
    const svc = await startApiService(
      { databaseUrl: p.db.url, queueUrl: 'http://127.0.0.1:1/q/jobs', region: 'us-east-1', port: 0, poolSize: 2, defaultMaxAttempts: 3 },
      {
        queue: new MemoryQueue({ visibilityTimeoutSeconds: 30 }),
        log: silentLogger,
        host: '127.0.0.1',
        ops: { stuck: { runningSeconds: 120, pendingSeconds: 30 } },
      },
    );
    try {
      const r = await call(`http://127.0.0.1:${svc.port}`, 'GET', '/v1/stuck-jobs');
      expect(r.body.thresholds).toEqual({ runningSeconds: 120, pendingSeconds: 30 });
    } finally {
      await svc.shutdown('test');
    }
  });
});
