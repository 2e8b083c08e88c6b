// Who may use the on-call routes. With API_OPERATOR_TOKEN set, every on-call route (dead jobs,
// the DLQ, poison messages, stuck jobs) needs it and the ERP clients' API_TOKEN gets a 403 that
// names the token needed; the job routes take either token. With only API_TOKEN, today's
// behaviour (one token for everything) and a warning at start; with neither (the local stack),
// everything is open, an empty `Authorization: Bearer ` included, as the runbook's curl sends it.
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { apiConfigFromEnv, authWarnings, startApiService } from '../../runtime/apps/api.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { startLocalSqs, type LocalSqs } from '../../dev/fauxqs.ts';
import { OpsRoutes } from '../../runtime/http/oncall-routes.ts';
import { createOpsServices } from '../../runtime/oncall/services.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import { call, capturingLogger, startServer, type Res, type TestServer } from '../api/support.ts';
import { createPlatform, type Platform } from '../support/platform.ts';

const CLIENT = 'erp-client-token-0123456789';
const OPERATOR = 'on-call-operator-token-9876543210';
const NOBODY = '00000000-0000-4000-8000-000000000000';

/** Every on-call route, with a request its handler accepts (so a pass is a 2xx, a 404 for the unknown job, or the local endpoint's 409 for a move cancel). */
const ON_CALL: [method: string, path: string, json?: unknown][] = [
  ['GET', '/v1/dead-jobs'],
  ['GET', `/v1/dead-jobs/${NOBODY}`],
  ['POST', `/v1/dead-jobs/${NOBODY}/redrive`, { by: 'pat' }],
  ['POST', `/v1/dead-jobs/${NOBODY}/discard`, { by: 'pat', reason: 'auth test' }],
  ['POST', '/v1/dead-jobs/redrive', { ids: [NOBODY], dryRun: true }],
  ['POST', '/v1/dead-jobs/discard', { ids: [NOBODY], reason: 'auth test' }],
  ['GET', '/v1/dlq/messages?limit=10'],
  ['POST', '/v1/dlq/redrive', { dryRun: true, by: 'pat' }],
  ['POST', '/v1/dlq/discard', { messageIds: ['no-such-message'], reason: 'auth test' }],
  ['GET', '/v1/dlq/move-tasks'],
  ['POST', '/v1/dlq/move-tasks/cancel', { taskHandle: 'no-such-task', by: 'pat' }],
  ['GET', '/v1/poison-messages'],
  ['GET', '/v1/stuck-jobs'],
  ['POST', '/v1/pending-jobs/republish', { ids: [NOBODY], by: 'pat' }],
  ['GET', '/v1/schedules'],
  ['POST', '/v1/schedules/no-such-schedule/pause', { by: 'pat' }],
  ['POST', '/v1/schedules/no-such-schedule/trigger', { by: 'pat' }],
];
/** The job routes the ERP clients use. */
const JOBS: [method: string, path: string, json?: unknown][] = [
  ['GET', '/v1/jobs'],
  ['GET', `/v1/jobs/${NOBODY}`],
  ['GET', '/v1/job-types'],
  ['GET', '/v1/stats'],
  ['POST', '/v1/jobs', { type: 'ledger.post', payload: { batch: 'AUTH', entries: 1 } }],
  ['POST', `/v1/jobs/${NOBODY}/cancel`],
];

let p: Platform;
let sqs: LocalSqs;
const servers: TestServer[] = [];
let both: TestServer;
let clientOnly: TestServer;
let operatorOnly: TestServer;
let open: TestServer;

beforeAll(async () => {
  p = await createPlatform();
  sqs = await startLocalSqs({ timings: { visibilityTimeoutSeconds: 30, maxReceiveCount: 10 }, prefix: 'ops-auth' });
  const ops = new OpsRoutes(
    createOpsServices({
      pool: p.db.pool,
      registry: p.registry,
      publisher: p.publisher,
      queue: p.queue,
      log: silentLogger,
      queueUrl: sqs.queueUrl,
      dlqUrl: sqs.dlqUrl,
      region: 'us-east-1',
      endpoint: sqs.endpoint,
    }),
  );
  const start = async (tokens: { apiToken?: string; operatorToken?: string }) => {
    const s = await startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: silentLogger, ops, ...tokens });
    servers.push(s);
    return s;
  };
  both = await start({ apiToken: CLIENT, operatorToken: OPERATOR });
  clientOnly = await start({ apiToken: CLIENT });
  operatorOnly = await start({ operatorToken: OPERATOR });
  open = await start({});
});
afterAll(async () => {
  for (const s of servers) await s.close();
  await sqs?.stop();
  await p?.close();
});

const send = (s: TestServer, [method, path, json]: [string, string, unknown?], authorization?: string): Promise<Res> =>
  call(s.url, method, path, {
    ...(json !== undefined ? { json } : {}),
    ...(authorization !== undefined ? { headers: { authorization } } : {}),
  });

/** Through the token check to the handler: its own answer, not an auth error. */
function passed(r: Res, what: string): void {
  expect([401, 403], `${what}: ${JSON.stringify(r.body)}`).not.toContain(r.status);
  expect(r.status, `${what}: ${JSON.stringify(r.body)}`).toBeLessThan(500);
}

describe('API_TOKEN and API_OPERATOR_TOKEN both set', () => {
  it('on-call routes: 200 with the operator token, 403 naming the operator token for the ERP token, 401 without or with a wrong one', async () => {
    for (const route of ON_CALL) {
      const what = `${route[0]} ${route[1]}`;
      passed(await send(both, route, `Bearer ${OPERATOR}`), what);

      const erp = await send(both, route, `Bearer ${CLIENT}`);
      expect(erp.status, what).toBe(403);
      expect(erp.headers.get('www-authenticate'), what).toBe('Bearer realm="jobs", error="insufficient_scope"');
      expect(erp.body.error, what).toEqual({
        code: 'forbidden',
        field: 'Authorization',
        message:
          'Authorization: the on-call routes need the operator token (Authorization: Bearer <API_OPERATOR_TOKEN>); the ERP client token (API_TOKEN) may only use the job routes',
      });

      const none = await send(both, route);
      expect(none.status, what).toBe(401);
      expect(none.headers.get('www-authenticate'), what).toBe('Bearer realm="jobs"');
      expect(none.body.error.message, what).toBe(
        'Authorization: a bearer token is required (Authorization: Bearer <API_OPERATOR_TOKEN>, the on-call operator token)',
      );

      for (const wrong of [`Bearer ${OPERATOR}x`, `Bearer ${CLIENT.slice(0, -1)}`, 'Bearer ', `Basic ${OPERATOR}`]) {
        const r = await send(both, route, wrong);
        expect(r.status, `${what} with ${wrong}`).toBe(401);
      }
    }
  });

  it('the refused ERP token changed nothing: a redrive or discard it asked for did not run', async () => {
    // A dead job, made the way a worker makes one: claimed, then failed non-retryably.
    const [r] = await p.client.enqueueNow({ type: 'ledger.post', payload: { batch: 'AUTH-DEAD', entries: 1 } });
    const [claimed] = await p.store.claim([r!.job.id], 'worker-a', 30);
    const died = await p.store.fail(
      { id: claimed!.id, attempt: claimed!.attempt },
      { name: 'Error', message: 'boom', retryable: false },
      0,
      true,
    );
    expect(died!.state).toBe('dead');
    const id = died!.id;
    expect(
      (
        await call(both.url, 'POST', `/v1/dead-jobs/${id}/discard`, {
          json: { reason: 'erp tried' },
          headers: { authorization: `Bearer ${CLIENT}` },
        })
      ).status,
    ).toBe(403);
    expect(
      (await call(both.url, 'POST', `/v1/dead-jobs/${id}/redrive`, { json: {}, headers: { authorization: `Bearer ${CLIENT}` } })).status,
    ).toBe(403);
    const shown = await call(both.url, 'GET', `/v1/dead-jobs/${id}`, { headers: { authorization: `Bearer ${OPERATOR}` } });
    expect(shown.body.job).toMatchObject({ state: 'dead', discarded: null });
    expect(shown.body.actions).toEqual([]);
  });

  it('job routes take either token (on-call needs one token), and 401 without one', async () => {
    for (const route of JOBS) {
      const what = `${route[0]} ${route[1]}`;
      passed(await send(both, route, `Bearer ${CLIENT}`), `${what} with the ERP token`);
      passed(await send(both, route, `Bearer ${OPERATOR}`), `${what} with the operator token`);
      const none = await send(both, route);
      expect(none.status, what).toBe(401);
      expect(none.body.error.message, what).toBe('Authorization: a bearer token is required (Authorization: Bearer <API_TOKEN>)');
      expect((await send(both, route, 'Bearer not-a-token')).status, what).toBe(401);
    }
    // An unknown path under /v1 is still behind the client token, then a 404.
    expect((await call(both.url, 'GET', '/v1/nothing-here')).status).toBe(401);
    expect((await call(both.url, 'GET', '/v1/nothing-here', { headers: { authorization: `Bearer ${OPERATOR}` } })).status).toBe(404);
    // An unknown on-call path is behind the operator token, then a 404.
    expect((await call(both.url, 'GET', '/v1/dlq/nothing', { headers: { authorization: `Bearer ${CLIENT}` } })).status).toBe(403);
    expect((await call(both.url, 'GET', '/v1/dlq/nothing', { headers: { authorization: `Bearer ${OPERATOR}` } })).status).toBe(404);
  });
});

describe('only API_TOKEN set (no operator token)', () => {
  it('keeps one token for everything: the on-call routes take the ERP token, 401 without it', async () => {
    for (const route of [...ON_CALL, ...JOBS]) {
      const what = `${route[0]} ${route[1]}`;
      passed(await send(clientOnly, route, `Bearer ${CLIENT}`), what);
      const none = await send(clientOnly, route);
      expect(none.status, what).toBe(401);
      expect(none.body.error.message, what).toBe('Authorization: a bearer token is required (Authorization: Bearer <API_TOKEN>)');
      // A token this API was not given is just wrong.
      expect((await send(clientOnly, route, `Bearer ${OPERATOR}`)).status, what).toBe(401);
    }
  });
});

describe('only API_OPERATOR_TOKEN set', () => {
  it('closes the on-call routes to anyone without it; the job routes stay open', async () => {
    for (const route of ON_CALL) {
      const what = `${route[0]} ${route[1]}`;
      passed(await send(operatorOnly, route, `Bearer ${OPERATOR}`), what);
      expect((await send(operatorOnly, route)).status, what).toBe(401);
      expect((await send(operatorOnly, route, `Bearer ${CLIENT}`)).status, what).toBe(401);
    }
    for (const route of JOBS) passed(await send(operatorOnly, route), `${route[0]} ${route[1]}`);
  });
});

describe('no token set (the local stack)', () => {
  it('leaves every route open, whatever the Authorization header says', async () => {
    for (const route of [...ON_CALL, ...JOBS]) {
      const what = `${route[0]} ${route[1]}`;
      passed(await send(open, route), what);
      passed(await send(open, route, `Bearer ${OPERATOR}`), `${what} with a token`);
    }
  });

  it('accepts the empty bearer the runbook sends when $OPERATOR_TOKEN is unset (`Authorization: Bearer ` as curl writes it)', async () => {
    // Raw, so the header goes out byte for byte (fetch would normalize it).
    const raw = (authorization: string) =>
      new Promise<number>((resolve, reject) => {
        const u = new URL(open.url);
        const req = http.request(
          { host: u.hostname, port: u.port, method: 'GET', path: '/v1/poison-messages', headers: { authorization } },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on('error', reject);
        req.end();
      });
    for (const authorization of ['Bearer ', 'Bearer', '']) expect(await raw(authorization), JSON.stringify(authorization)).toBe(200);
    // With a token configured, the same empty bearer is refused.
    expect((await call(both.url, 'GET', '/v1/poison-messages', { headers: { authorization: 'Bearer ' } })).status).toBe(401);
  });
});

describe('configuration and the start warning', () => {
  const GOOD_ENV = {
    DATABASE_URL: 'postgres://jobs:pw@db.internal:5432/jobs',
    JOBS_QUEUE_URL: 'https://sqs.eu-west-1.amazonaws.com/123456789012/jobs',
    AWS_REGION: 'eu-west-1',
  };

  it('reads API_OPERATOR_TOKEN (empty = none), refuses one that cannot travel in a header or equals API_TOKEN, without echoing it', () => {
    expect(apiConfigFromEnv({ ...GOOD_ENV, API_TOKEN: CLIENT, API_OPERATOR_TOKEN: OPERATOR })).toMatchObject({
      apiToken: CLIENT,
      operatorToken: OPERATOR,
    });
    expect(apiConfigFromEnv({ ...GOOD_ENV, API_OPERATOR_TOKEN: '' }).operatorToken).toBeUndefined();
    const refused = (env: Record<string, string>) => {
      try {
        apiConfigFromEnv({ ...GOOD_ENV, ...env });
      } catch (err) {
        return err as Error & { violations: { rule: string }[] };
      }
      throw new Error('expected a ConfigError');
    };
    const spaces = refused({ API_OPERATOR_TOKEN: 'op secret with spaces' });
    expect(spaces.violations.map((v) => v.rule)).toEqual(['api-operator-token-printable']);
    expect(spaces.message).not.toContain('op secret');
    const same = refused({ API_TOKEN: CLIENT, API_OPERATOR_TOKEN: CLIENT });
    expect(same.violations.map((v) => v.rule)).toEqual(['api-operator-token-distinct']);
    expect(same.message).toContain('API_OPERATOR_TOKEN must differ from API_TOKEN');
    expect(same.message).not.toContain(CLIENT);
  });

  it('warns at start when the on-call routes share the ERP token, and says what is open otherwise', async () => {
    expect(authWarnings({ apiToken: CLIENT, operatorToken: OPERATOR })).toEqual([]);
    expect(authWarnings({})).toEqual([
      expect.stringMatching(
        /^API_TOKEN and API_OPERATOR_TOKEN are not set: every \/v1 route, the on-call ones .* included, accepts requests without a bearer token$/,
      ),
    ]);
    expect(authWarnings({ operatorToken: OPERATOR })).toEqual([
      expect.stringMatching(/^API_TOKEN is not set: the \/v1 job routes accept requests without a bearer token/),
    ]);

    const { log, lines } = capturingLogger();
    const svc = await startApiService(
      {
        databaseUrl: p.db.url,
        queueUrl: 'http://127.0.0.1:1/q/jobs',
        region: 'us-east-1',
        port: 0,
        poolSize: 2,
        defaultMaxAttempts: 3,
        apiToken: CLIENT,
      },
      { queue: new MemoryQueue({ visibilityTimeoutSeconds: 30 }), log, host: '127.0.0.1' },
    );
    try {
      const warnings = lines.filter((l) => l.level === 40).map((l) => l.msg as string);
      expect(warnings).toContainEqual(
        expect.stringMatching(
          /^API_OPERATOR_TOKEN is not set: the on-call routes \(\/v1\/dead-jobs, \/v1\/dlq, \/v1\/poison-messages, \/v1\/stuck-jobs, \/v1\/pending-jobs, \/v1\/schedules\) share the ERP clients' API_TOKEN/,
        ),
      );
      expect(lines.find((l) => l.msg === 'api service started')).toMatchObject({ auth: true, operatorAuth: false });
      expect(JSON.stringify(lines)).not.toContain(CLIENT);
    } finally {
      await svc.shutdown('test');
    }
    const quiet = capturingLogger();
    const both = await startApiService(
      {
        databaseUrl: p.db.url,
        queueUrl: 'http://127.0.0.1:1/q/jobs',
        region: 'us-east-1',
        port: 0,
        poolSize: 2,
        defaultMaxAttempts: 3,
        apiToken: CLIENT,
        operatorToken: OPERATOR,
      },
      { queue: new MemoryQueue({ visibilityTimeoutSeconds: 30 }), log: quiet.log, host: '127.0.0.1' },
    );
    try {
      expect(quiet.lines.filter((l) => l.level === 40 && /TOKEN/.test(l.msg))).toEqual([]);
      const r = await call(`http://127.0.0.1:${both.port}`, 'GET', '/v1/stuck-jobs', { headers: { authorization: `Bearer ${CLIENT}` } });
      expect(r.status).toBe(403);
      expect(JSON.stringify(quiet.lines)).not.toContain(OPERATOR);
    } finally {
      await both.shutdown('test');
    }
  });
});
