// The on-call routes inside the API server, in-process: behind the API token like every /v1 route
// when no operator token is configured (auth.test.ts: API_OPERATOR_TOKEN, the 401/403/200 matrix),
// the API's error shape, a 501 that says what to do when the API has no DLQ, and the API service
// reading its on-call settings from the environment.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApiService } from '../../runtime/api/main.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { OpsRoutes } from '../../runtime/ops/api.ts';
import { createOpsServices, opsConfigFromEnv } from '../../runtime/ops/services.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import { call, startServer, type TestServer } from '../api/support.ts';
import { createPlatform, type Platform } from '../support/platform.ts';

const TOKEN = 'ops-token-123';
let p: Platform;
let api: TestServer;
beforeAll(async () => {
  p = await createPlatform();
  const ops = new OpsRoutes(createOpsServices({ pool: p.db.pool, registry: p.registry, publisher: p.publisher, queue: p.queue, log: silentLogger }));
  api = await startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: silentLogger, apiToken: TOKEN, ops });
});
afterAll(async () => {
  await api.close();
  await p.close();
});
const auth = { authorization: `Bearer ${TOKEN}` };

describe('on-call routes in the API server', () => {
  it.each(['/v1/dead-jobs', '/v1/poison-messages', '/v1/stuck-jobs', '/v1/dlq/messages'])('%s needs the bearer token', async (path) => {
    const r = await call(api.url, 'GET', path);
    expect(r.status).toBe(401);
    expect(r.body.error.code).toBe('unauthorized');
  });

  it('answers with the token; the DLQ routes say what to do when this API has no DLQ URL', async () => {
    expect((await call(api.url, 'GET', '/v1/dead-jobs', { headers: auth })).body).toEqual({ deadJobs: [], nextCursor: null });
    expect((await call(api.url, 'GET', '/v1/stuck-jobs', { headers: auth })).body).toEqual({ thresholds: { runningSeconds: 3600, pendingSeconds: 900 }, stuckJobs: [] });
    const dlq = await call(api.url, 'GET', '/v1/dlq/messages', { headers: auth });
    expect(dlq.status).toBe(501);
    expect(dlq.body.error).toMatchObject({ code: 'dlq_not_configured', message: expect.stringMatching(/started without JOBS_DLQ_URL.*jobs dlq/) });
    expect((await call(api.url, 'HEAD', '/v1/dead-jobs', { headers: auth })).status).toBe(200);
  });

  it('keeps the API\'s error shape: 404 for an unknown job, 405 with Allow, 415 for a non-JSON body, cursor checked', async () => {
    const missing = await call(api.url, 'GET', '/v1/dead-jobs/00000000-0000-4000-8000-000000000000', { headers: auth });
    expect(missing).toMatchObject({ status: 404, body: { error: { code: 'job_not_found', field: 'id' } } });
    const wrong = await call(api.url, 'GET', '/v1/dead-jobs/redrive', { headers: auth });
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('POST');
    const text = await call(api.url, 'POST', '/v1/dead-jobs/redrive', { headers: { ...auth, 'content-type': 'text/plain' }, body: 'all' });
    expect(text.status).toBe(415);
    const cursor = await call(api.url, 'GET', '/v1/dead-jobs?cursor=abc', { headers: auth });
    expect(cursor).toMatchObject({ status: 400, body: { error: { field: 'cursor' } } });
  });

  it('the API service reads JOBS_DLQ_URL and JOBS_STUCK_* and refuses bad ones by name', async () => {
    expect(opsConfigFromEnv({})).toEqual({ stuck: { runningSeconds: 3600, pendingSeconds: 900 } });
    expect(opsConfigFromEnv({ JOBS_DLQ_URL: 'http://127.0.0.1:1/q/dlq', JOBS_STUCK_PENDING_SECONDS: '60' })).toEqual({ dlqUrl: 'http://127.0.0.1:1/q/dlq', stuck: { runningSeconds: 3600, pendingSeconds: 60 } });
    expect(() => opsConfigFromEnv({ JOBS_DLQ_URL: 'not a url' })).toThrow(/JOBS_DLQ_URL = "not a url" is not a URL/);
    expect(() => opsConfigFromEnv({ JOBS_STUCK_RUNNING_SECONDS: '-1' })).toThrow(/JOBS_STUCK_RUNNING_SECONDS = "-1" must be a whole number between 1 and 604800/);
    const svc = await startApiService(
      { databaseUrl: p.db.url, queueUrl: 'http://127.0.0.1:1/q/jobs', region: 'us-east-1', port: 0, poolSize: 2, defaultMaxAttempts: 3 },
      { queue: new MemoryQueue({ visibilityTimeoutSeconds: 30 }), log: silentLogger, host: '127.0.0.1', ops: { stuck: { runningSeconds: 120, pendingSeconds: 30 } } },
    );
    try {
      const r = await call(`http://127.0.0.1:${svc.port}`, 'GET', '/v1/stuck-jobs');
      expect(r.body.thresholds).toEqual({ runningSeconds: 120, pendingSeconds: 30 });
    } finally {
      await svc.shutdown('test');
    }
  });
});
