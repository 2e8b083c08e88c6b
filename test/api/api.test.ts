// The HTTP API against a real server on an ephemeral port, over a migrated PostgreSQL and the
// platform's SQS-like MemoryQueue: every route, each class of bad input with its status and
// message, idempotency under concurrency, keyset paging, cancel, auth, readiness, and that an
// enqueue publishes exactly one message after COMMIT.
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_PAYLOAD_BYTES } from '../../runtime/store/client.ts';
import { createPool, endPool } from '../../runtime/db/pool.ts';
import { migrate } from '../../runtime/db/migrate.ts';
import { JobClient } from '../../runtime/store/client.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { parseJobMessage } from '../../runtime/queue/message.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { startDbProxy } from '../../dev/db-proxy.ts';
import { createPlatform, type Platform } from '../support/platform.ts';
import { expectJobTypesListed, unknownTypeMessage } from '../support/registered-types.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';
import { call, capturingLogger, rawRequest, startServer, type TestServer } from './support.ts';

const JOB_KEYS = [
  'attempt',
  'blockedSince',
  'cancelledBy',
  'concurrencyKey',
  'concurrencyLimit',
  'createdAt',
  'finishedAt',
  'id',
  'idempotencyKey',
  'lane',
  'lastError',
  'maxAttempts',
  'parentId',
  'payload',
  'progress',
  'result',
  'runAfter',
  'startedAt',
  'state',
  'type',
].sort();
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const ledger = (batch: string, extra: Record<string, unknown> = {}) => ({ type: 'ledger.post', payload: { batch, entries: 3 }, ...extra });
const messagesFor = (p: Platform, jobId: string) =>
  p.queue.sentLog.filter((m) => {
    const r = parseJobMessage(m.body);
    return r.ok && r.message.jobId === jobId;
  });
const jobCount = async (p: Platform) => (await p.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM jobs.job')).rows[0]!.n;

describe('jobs API', () => {
  let p: Platform;
  let api: TestServer;
  let logs: ReturnType<typeof capturingLogger>;

  beforeAll(async () => {
    p = await createPlatform();
    logs = capturingLogger();
    api = await startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: logs.log });
  });
  afterAll(async () => {
    await api?.close();
    await p?.close();
  });

  describe('health', () => {
    it('GET /healthz answers 200 without touching the database, with a request id', async () => {
      const r = await call(api.url, 'GET', '/healthz');
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ status: 'ok' });
      expect(r.headers.get('x-request-id')).toMatch(UUID);
      expect(r.headers.get('content-type')).toBe('application/json; charset=utf-8');
    });

    it('echoes a well-formed incoming x-request-id and replaces a malformed one', async () => {
      const mine = await call(api.url, 'GET', '/healthz', { headers: { 'x-request-id': 'erp-42.abc' } });
      expect(mine.headers.get('x-request-id')).toBe('erp-42.abc');
      const bad = await call(api.url, 'GET', '/healthz', { headers: { 'x-request-id': 'a b<script>' } });
      expect(bad.headers.get('x-request-id')).toMatch(UUID);
    });

    it('GET /readyz answers 200 when the database is reachable and migrated', async () => {
      const r = await call(api.url, 'GET', '/readyz');
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ status: 'ready' });
    });

    it('GET /readyz answers 503 naming the pending migrations on an unmigrated database, and 200 once migrated', async () => {
      const fresh: TestDb = await createTestDb({ migrate: false });
      const s = await startServer({ pool: fresh.pool, client: p.client, registry: p.registry, log: silentLogger });
      try {
        const r = await call(s.url, 'GET', '/readyz');
        expect(r.status).toBe(503);
        expect(r.body.status).toBe('unavailable');
        expect(r.body.reason).toContain('migrations pending: 0001_job_table.sql, 0002_example_erp_tables.sql');
        await migrate(fresh.pool);
        expect((await call(s.url, 'GET', '/readyz')).status).toBe(200);
      } finally {
        await s.close();
        await fresh.drop();
      }
    });

    it('GET /readyz answers 503 when the database is unreachable, without leaking its address; /healthz stays 200', async () => {
      const dead = createPool({ url: 'postgres://nobody:secret@127.0.0.1:1/none', max: 1, applicationName: 'dead' });
      const s = await startServer({ pool: dead, client: p.client, registry: p.registry, log: silentLogger });
      try {
        const r = await call(s.url, 'GET', '/readyz');
        expect(r.status).toBe(503);
        expect(r.body.reason).toMatch(/^database unreachable/);
        expect(JSON.stringify(r.body)).not.toMatch(/127\.0\.0\.1|ECONNREFUSED|secret/);
        expect((await call(s.url, 'GET', '/healthz')).status).toBe(200);
      } finally {
        await s.close();
        await dead.end();
      }
    });
    it("GET /readyz on a silent primary lets its connection go after the read timeout: enqueues work again once the database answers (API review: each call held one for TCP's 15 minutes)", async () => {
      const u = new URL(p.db.url);
      const proxy = await startDbProxy({ host: u.hostname, port: Number(u.port) });
      const pool = createPool({ url: proxy.url(p.db.url), max: 1, applicationName: 'readyz-stall', platformQueryTimeoutMs: 300 });
      const client = new JobClient({ pool, registry: p.registry, publisher: p.publisher, defaultMaxAttempts: 3 });
      const s = await startServer({ pool, client, registry: p.registry, log: silentLogger, readyTimeoutMs: 200 });
      try {
        expect((await call(s.url, 'GET', '/readyz')).status).toBe(200);
        expect(proxy.stall()).toBe(1); // the primary goes silent: the open connection hears nothing, never a reset
        expect((await call(s.url, 'GET', '/readyz')).status).toBe(503);
        // New connections reach the database again (the proxy forwards them), once the pool has room for one.
        const r = await Promise.race([
          call(s.url, 'POST', '/v1/jobs', { json: ledger('READYZ-STALL') }),
          new Promise<{ status: string }>((resolve) => setTimeout(() => resolve({ status: 'no answer within 5 s' }), 5000)),
        ]);
        expect(r.status).toBe(201);
        await p.store.cancel((r as { body: { id: string } }).body.id, 'cleanup');
      } finally {
        await s.close();
        await endPool(pool, 1000);
        await proxy.stop();
      }
    });
  });

  describe('POST /v1/jobs', () => {
    it('a statement timeout (a keyed enqueue waiting behind an uncommitted one with its key) is a 503 "busy" with Retry-After, not a 500 (API review)', async () => {
      const pool = createPool({ url: p.db.url, max: 2, applicationName: 'busy-api', statementTimeoutMs: 300 });
      const client = new JobClient({ pool, registry: p.registry, publisher: p.publisher, defaultMaxAttempts: 3 });
      const s = await startServer({ pool, client, registry: p.registry, log: silentLogger });
      const holder = await p.db.pool.connect();
      try {
        await holder.query('BEGIN');
        await p.client.enqueue(holder, ledger('BUSY-1', { idempotencyKey: 'busy-key' }));
        const r = await call(s.url, 'POST', '/v1/jobs', { json: ledger('BUSY-1', { idempotencyKey: 'busy-key' }) });
        expect({ status: r.status, code: r.body.error?.code, retryAfter: r.headers.get('retry-after') }).toEqual({
          status: 503,
          code: 'busy',
          retryAfter: '2',
        });
        expect(r.body.error.message).toMatch(/statement timeout.*rolled back; retry shortly/);
      } finally {
        await holder.query('ROLLBACK');
        holder.release();
        await s.close();
        await pool.end();
      }
    });

    describe('an enqueue whose answer the connection lost (API review: a keyless one answered "retry shortly", and the retry made a second job)', () => {
      /** A pool whose next `statement` (a prepared statement's name, or COMMIT) runs, commits, and then loses its answer, as in a failover. */
      function answerLostAfter(statement: string) {
        const pool = createPool({ url: p.db.url, max: 2, applicationName: 'answer-lost' });
        const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
        let armed = true;
        const patched = async () => {
          const c = await connect();
          const query = c.query.bind(c) as (...a: unknown[]) => Promise<unknown>;
          (c as unknown as { query: (...a: unknown[]) => Promise<unknown> }).query = async (...a: unknown[]) => {
            const r = await query(...a);
            const cfg = a[0] as string | { name?: string; text?: string };
            const which = typeof cfg === 'string' ? cfg : (cfg.name ?? cfg.text);
            if (armed && which === statement) {
              armed = false;
              throw new Error('Connection terminated unexpectedly');
            }
            return r;
          };
          return c;
        };
        // pool.query asks for a connection with a callback; everything else awaits one.
        (pool as unknown as { connect: (cb?: (err: unknown, c?: pg.PoolClient, done?: (e?: Error) => void) => void) => unknown }).connect =
          (cb) => (cb ? void patched().then((c) => cb(undefined, c, (e) => c.release(e)), cb) : patched());
        return pool;
      }
      async function serve(pool: pg.Pool) {
        const client = new JobClient({ pool, registry: p.registry, publisher: p.publisher, defaultMaxAttempts: 3 });
        return startServer({ pool, client, registry: p.registry, log: silentLogger });
      }
      const jobsOfBatch = async (batch: string) =>
        (await p.db.pool.query("SELECT id FROM jobs.job WHERE payload->>'batch' = $1", [batch])).rows.map((r) => r.id as string);

      it('without a key: 503 outcome_unknown with the job id and its Location; GET tells it exists; its outbox row publishes it', async () => {
        const pool = answerLostAfter('jobInsertMany');
        const s = await serve(pool);
        try {
          const r = await call(s.url, 'POST', '/v1/jobs', { json: ledger('LOST-ANSWER-1') });
          const [id] = await jobsOfBatch('LOST-ANSWER-1');
          expect({ status: r.status, code: r.body.error.code, jobIds: r.body.error.jobIds, location: r.headers.get('location') }).toEqual({
            status: 503,
            code: 'outcome_unknown',
            jobIds: [id],
            location: `/v1/jobs/${id}`,
          });
          expect(r.headers.get('retry-after')).toBe('2');
          expect(r.body.error.message).toMatch(/may have been created.*GET \/v1\/jobs\/\{id\}.*idempotencyKey/);
          expect((await call(s.url, 'GET', `/v1/jobs/${id}`)).status).toBe(200);
          const outbox = await p.db.pool.query('SELECT 1 FROM jobs.outbox WHERE job_id = $1', [id]);
          expect(outbox.rowCount).toBe(1);
          await p.store.cancel(id!, 'cleanup');
        } finally {
          await s.close();
          await pool.end();
        }
      });

      it('a batch without keys: both ids, no Location', async () => {
        const pool = answerLostAfter('jobInsertMany');
        const s = await serve(pool);
        try {
          const r = await call(s.url, 'POST', '/v1/jobs/batch', { json: { jobs: [ledger('LOST-ANSWER-2'), ledger('LOST-ANSWER-2')] } });
          const ids = await jobsOfBatch('LOST-ANSWER-2');
          expect({ status: r.status, code: r.body.error.code, location: r.headers.get('location') }).toEqual({
            status: 503,
            code: 'outcome_unknown',
            location: null,
          });
          expect([...r.body.error.jobIds].sort()).toEqual([...ids].sort());
          expect(ids).toHaveLength(2);
          for (const id of ids) await p.store.cancel(id, 'cleanup');
        } finally {
          await s.close();
          await pool.end();
        }
      });

      it('with a key: 503 unavailable, and the retry answers 200 duplicate with the one job', async () => {
        const pool = answerLostAfter('COMMIT');
        const s = await serve(pool);
        try {
          const r = await call(s.url, 'POST', '/v1/jobs', { json: ledger('LOST-ANSWER-3', { idempotencyKey: 'lost-answer-3' }) });
          expect({ status: r.status, code: r.body.error.code }).toEqual({ status: 503, code: 'unavailable' });
          const again = await call(s.url, 'POST', '/v1/jobs', { json: ledger('LOST-ANSWER-3', { idempotencyKey: 'lost-answer-3' }) });
          expect({ status: again.status, duplicate: again.body.duplicate }).toEqual({ status: 200, duplicate: true });
          expect(await jobsOfBatch('LOST-ANSWER-3')).toEqual([again.body.id]);
          await p.store.cancel(again.body.id, 'cleanup');
        } finally {
          await s.close();
          await pool.end();
        }
      });
    });

    it('enqueues: 201 with the job, a Location, and exactly one SQS message with its id', async () => {
      const r = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-201') });
      expect(r.status).toBe(201);
      expect(Object.keys(r.body).sort()).toEqual([...JOB_KEYS, 'duplicate'].sort());
      expect(r.body).toMatchObject({
        type: 'ledger.post',
        state: 'pending',
        attempt: 0,
        maxAttempts: 3,
        payload: { batch: 'B-201', entries: 3, workMs: 0, failAttempts: 0 },
        progress: null,
        result: null,
        lastError: null,
        startedAt: null,
        finishedAt: null,
        duplicate: false,
      });
      expect(r.body.id).toMatch(UUID);
      expect(r.body.createdAt).toMatch(ISO);
      expect(r.headers.get('location')).toBe(`/v1/jobs/${r.body.id}`);
      const stored = await p.store.get(r.body.id);
      expect(stored?.state).toBe('pending');
      const sent = messagesFor(p, r.body.id);
      expect(sent).toHaveLength(1);
      expect(JSON.parse(sent[0]!.body)).toEqual({ jobId: r.body.id, type: 'ledger.post' });
    });

    it('honours maxAttempts, runAt and idempotencyKey', async () => {
      const runAt = new Date(Date.now() + 3_600_000).toISOString();
      const r = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-OPTS', { maxAttempts: 7, runAt, idempotencyKey: 'opts-1' }) });
      expect(r.status).toBe(201);
      expect(r.body).toMatchObject({ maxAttempts: 7, runAfter: runAt, idempotencyKey: 'opts-1' });
    });

    it('a second POST with an idempotency key answers 200 with the existing job and duplicate: true, and publishes nothing, also once the job ended (ledger.post keeps its keys)', async () => {
      const first = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-DUP', { idempotencyKey: 'close-2026-11' }) });
      const second = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-DUP', { idempotencyKey: 'close-2026-11' }) });
      expect(first.status).toBe(201);
      expect(second.status).toBe(200);
      expect(second.body.duplicate).toBe(true);
      expect(second.body.payloadDiffers).toBeUndefined();
      expect(second.body.id).toBe(first.body.id);
      expect(messagesFor(p, first.body.id)).toHaveLength(1);
      // The key reused for other work: the same answer, saying so.
      const reused = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-OTHER', { idempotencyKey: 'close-2026-11' }) });
      expect(reused.body).toMatchObject({ id: first.body.id, duplicate: true, payloadDiffers: true });
      // ledger.post keeps its keys after the job ends: once cancelled, the key still answers with that job, as it is.
      expect((await call(api.url, 'POST', `/v1/jobs/${first.body.id}/cancel`, { json: { by: 'ops' } })).status).toBe(200);
      const third = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-DUP', { idempotencyKey: 'close-2026-11' }) });
      expect(third.status).toBe(200);
      expect(third.body).toMatchObject({
        id: first.body.id,
        duplicate: true,
        state: 'cancelled',
        cancelledBy: 'ops (api, 127.0.0.1)',
        result: null,
      });
      expect(messagesFor(p, first.body.id)).toHaveLength(1);
    });

    it('20 concurrent POSTs with one key make exactly one 201 and nineteen 200 duplicates of the same job', async () => {
      const results = await Promise.all(
        Array.from({ length: 20 }, () => call(api.url, 'POST', '/v1/jobs', { json: ledger('B-RACE', { idempotencyKey: 'race-key' }) })),
      );
      expect(results.map((r) => r.status).sort()).toEqual([200, ...Array(19).fill(200)].map((s, i) => (i === 0 ? 201 : s)).sort());
      expect(results.filter((r) => r.status === 201)).toHaveLength(1);
      expect(results.filter((r) => r.status === 200 && r.body.duplicate === true)).toHaveLength(19);
      expect(new Set(results.map((r) => r.body.id)).size).toBe(1);
      const { rows } = await p.db.pool.query("SELECT count(*)::int AS n FROM jobs.job WHERE idempotency_key = 'race-key'");
      expect(rows[0].n).toBe(1);
      expect(messagesFor(p, results[0]!.body.id)).toHaveLength(1);
    });
  });

  describe('bad input: a 4xx naming the field and the reason, and no job', () => {
    const big = 'x'.repeat(MAX_PAYLOAD_BYTES + 10);
    const nested = (depth: number): unknown => (depth === 0 ? 1 : { a: nested(depth - 1) });
    const cases: {
      name: string;
      body?: string | Uint8Array;
      json?: unknown;
      headers?: Record<string, string>;
      status: number;
      code: string;
      field?: string;
      message: RegExp;
    }[] = [
      {
        name: 'malformed JSON',
        body: '{"type": "ledger.post",',
        headers: { 'content-type': 'application/json' },
        status: 400,
        code: 'malformed_json',
        field: 'body',
        message: /^body: is not valid JSON/,
      },
      {
        name: 'wrong content type',
        body: JSON.stringify(ledger('B')),
        headers: { 'content-type': 'text/plain' },
        status: 415,
        code: 'unsupported_media_type',
        field: 'Content-Type',
        message: /must be application\/json \(got "text\/plain"\)/,
      },
      {
        name: 'form content type',
        body: 'type=ledger.post',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        status: 415,
        code: 'unsupported_media_type',
        field: 'Content-Type',
        message: /application\/json/,
      },
      {
        name: 'no body',
        body: '',
        headers: { 'content-type': 'application/json' },
        status: 400,
        code: 'invalid_body',
        field: 'body',
        message: /^body: is required/,
      },
      { name: 'a JSON array', json: [ledger('B')], status: 400, code: 'invalid_body', field: 'body', message: /must be a JSON object/ },
      {
        name: 'a misspelt field',
        json: { ...ledger('B'), idempotency_key: 'k' },
        status: 400,
        code: 'invalid_field',
        field: 'idempotency_key',
        message:
          /^idempotency_key: is not a field of a job \(allowed: type, payload, idempotencyKey, maxAttempts, runAt, concurrencyKey, concurrencyLimit, lane\)/,
      },
      { name: 'no type', json: { payload: {} }, status: 400, code: 'invalid_field', field: 'type', message: /^type: is required/ },
      {
        name: 'an unknown type',
        json: { type: 'ledger.psot', payload: {} },
        status: 400,
        code: 'invalid_field',
        field: 'type',
        message: unknownTypeMessage('ledger.psot', defaultRegistry()), // createPlatform's registry
      },
      {
        name: 'a payload of the wrong shape',
        json: { type: 'ledger.post', payload: { batch: 'B', entries: 'three' } },
        status: 400,
        code: 'invalid_field',
        field: 'payload.entries',
        message: /^payload.entries: must be a whole number from 1 to 100000 \(got "three"\)/,
      },
      {
        name: 'a payload with an extra field',
        json: { type: 'ledger.post', payload: { batch: 'B', entries: 1, amount: 5 } },
        status: 400,
        code: 'invalid_field',
        field: 'payload.amount',
        message: /is not a field of this job type/,
      },
      {
        name: 'maxAttempts out of range',
        json: ledger('B', { maxAttempts: 0 }),
        status: 400,
        code: 'invalid_field',
        field: 'maxAttempts',
        message: /^maxAttempts: must be a whole number from 1 to 100/,
      },
      {
        name: 'maxAttempts as a string',
        json: ledger('B', { maxAttempts: '3' }),
        status: 400,
        code: 'invalid_field',
        field: 'maxAttempts',
        message: /^maxAttempts: must be a whole number/,
      },
      {
        name: 'runAt not a timestamp',
        json: ledger('B', { runAt: 'tomorrow' }),
        status: 400,
        code: 'invalid_field',
        field: 'runAt',
        message: /^runAt: must be an ISO 8601 timestamp/,
      },
      {
        name: 'runAt without an offset',
        json: ledger('B', { runAt: '2026-12-01T06:00:00' }),
        status: 400,
        code: 'invalid_field',
        field: 'runAt',
        message: /with an offset/,
      },
      {
        name: 'runAt as a number',
        json: ledger('B', { runAt: 1767225600000 }),
        status: 400,
        code: 'invalid_field',
        field: 'runAt',
        message: /^runAt: must be an ISO 8601 timestamp with an offset.*\(got 1767225600000\)/,
      },
      {
        name: 'an empty idempotency key',
        json: ledger('B', { idempotencyKey: '' }),
        status: 400,
        code: 'invalid_field',
        field: 'idempotencyKey',
        message: /^idempotencyKey: must be a string of 1 to 200 characters/,
      },
      {
        name: 'a line break in a concurrency key',
        json: ledger('B', { concurrencyKey: 'ledger:\r\nX-Injected: 1' }),
        status: 400,
        code: 'invalid_field',
        field: 'concurrencyKey',
        message: /^concurrencyKey: must not contain control characters \(U\+000D at character 8\)/,
      },
      {
        name: 'a NUL character',
        json: ledger('B\u0000C'),
        status: 400,
        code: 'invalid_field',
        field: 'payload.batch',
        message: /NUL character/,
      },
      {
        name: 'an unpaired surrogate',
        body: '{"type":"ledger.post","payload":{"batch":"\\ud800","entries":1}}',
        headers: { 'content-type': 'application/json' },
        status: 400,
        code: 'invalid_field',
        field: 'payload.batch',
        message: /unpaired UTF-16 surrogate/,
      },
      {
        name: 'invalid UTF-8',
        body: new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]),
        headers: { 'content-type': 'application/json' },
        status: 400,
        code: 'invalid_body',
        field: 'body',
        message: /not valid UTF-8/,
      },
      {
        name: 'nesting deeper than 64',
        json: { type: 'ledger.post', payload: nested(100) },
        status: 400,
        code: 'invalid_field',
        message: /nests deeper than 64 levels/,
      },
      {
        name: 'a payload over the limit',
        json: ledger(big),
        status: 413,
        code: 'payload_too_large',
        field: 'payload',
        message: new RegExp(`^payload: is \\d+ bytes; the limit is ${MAX_PAYLOAD_BYTES} bytes`),
      },
      {
        name: 'a body over the read cap',
        json: { type: 'ledger.post', payload: { batch: 'B', entries: 1, pad: 'x'.repeat(3 * MAX_PAYLOAD_BYTES) } },
        status: 413,
        code: 'payload_too_large',
        field: 'body',
        message: new RegExp(
          `^body: is larger than ${2 * MAX_PAYLOAD_BYTES} bytes; a job payload may be at most ${MAX_PAYLOAD_BYTES} bytes`,
        ),
      },
    ];

    it.each(cases)('$name → $status', async (c) => {
      const before = await jobCount(p);
      const r = await call(api.url, 'POST', '/v1/jobs', {
        ...(c.json !== undefined ? { json: c.json } : { body: c.body! }),
        headers: c.headers ?? {},
      });
      expect(r.status).toBe(c.status);
      expect(r.body.error.code).toBe(c.code);
      expect(r.body.error.message).toMatch(c.message);
      if (c.field) expect(r.body.error.field).toBe(c.field);
      expect(await jobCount(p)).toBe(before);
    });

    it('refuses a streamed body without a length as soon as it passes the cap, without reading the rest', async () => {
      const piece = Buffer.alloc(64 * 1024, 'x');
      const chunks = [Buffer.from('{"type":"ledger.post","payload":{"pad":"'), ...Array.from({ length: 64 }, () => piece)]; // 4 MiB offered
      const r = await rawRequest(api.url, {
        method: 'POST',
        path: '/v1/jobs',
        headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
        chunks,
        gapMs: 2,
      });
      expect(r.status).toBe(413);
      expect(r.body.error).toMatchObject({ code: 'payload_too_large', field: 'body' });
      expect(r.headers.connection).toBe('close');
    });

    it('refuses an oversized Expect: 100-continue upload before the client sends it', async () => {
      const r = await rawRequest(api.url, {
        method: 'POST',
        path: '/v1/jobs',
        headers: { 'content-type': 'application/json', 'content-length': String(10 * MAX_PAYLOAD_BYTES), expect: '100-continue' },
        chunks: [],
      });
      expect(r.status).toBe(413);
      expect(r.body.error.field).toBe('body');
    });
  });

  describe('GET /v1/jobs/:id', () => {
    it('returns the job with ISO timestamps', async () => {
      const created = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-GET') });
      const r = await call(api.url, 'GET', `/v1/jobs/${created.body.id}`);
      expect(r.status).toBe(200);
      expect(Object.keys(r.body).sort()).toEqual(JOB_KEYS);
      const { duplicate: _d, ...withoutDuplicate } = created.body;
      expect(r.body).toEqual(withoutDuplicate);
    });

    it("shows a job's concurrency key and limit, and since when it has waited for its key", async () => {
      const first = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-KEY-1', { concurrencyKey: 'ledger:api-view' }) });
      expect(first.body).toMatchObject({ concurrencyKey: 'ledger:api-view', concurrencyLimit: 1, blockedSince: null, parentId: null });
      const second = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-KEY-2', { concurrencyKey: 'ledger:api-view' }) });
      // What a claim writes when it finds the key full (the first job running).
      await p.db.pool.query("UPDATE jobs.job SET blocked_since = now() - interval '5 seconds' WHERE id = $1", [second.body.id]);
      const r = await call(api.url, 'GET', `/v1/jobs/${second.body.id}`);
      expect(r.body).toMatchObject({ state: 'pending', concurrencyKey: 'ledger:api-view', concurrencyLimit: 1 });
      expect(r.body.blockedSince).toMatch(ISO);
    });

    it('accepts an upper-case id', async () => {
      const created = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-UPPER') });
      const r = await call(api.url, 'GET', `/v1/jobs/${String(created.body.id).toUpperCase()}`);
      expect(r.status).toBe(200);
      expect(r.body.id).toBe(created.body.id);
    });

    it('shows the last error without its stack', async () => {
      const created = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-ERR') });
      await p.db.pool.query(
        `UPDATE jobs.job SET last_error = '{"name":"Error","message":"boom","retryable":true,"stack":"Error: boom\\n at /app/x.js:1"}' WHERE id = $1`,
        [created.body.id],
      );
      const r = await call(api.url, 'GET', `/v1/jobs/${created.body.id}`);
      expect(r.body.lastError).toEqual({ name: 'Error', message: 'boom', retryable: true });
    });

    it('404 for an id that does not exist', async () => {
      const r = await call(api.url, 'GET', '/v1/jobs/00000000-0000-4000-8000-000000000000');
      expect(r.status).toBe(404);
      expect(r.body.error).toEqual({
        code: 'job_not_found',
        field: 'id',
        message: 'job 00000000-0000-4000-8000-000000000000 does not exist',
      });
    });

    it('400 for an id that is not a UUID, before any query', async () => {
      const r = await call(api.url, 'GET', '/v1/jobs/12345');
      expect(r.status).toBe(400);
      expect(r.body.error).toEqual({ code: 'invalid_id', field: 'id', message: 'id: must be a job id (a UUID), got "12345"' });
      const sqlish = await call(api.url, 'GET', "/v1/jobs/1'%20OR%20'1'='1");
      expect(sqlish.status).toBe(400);
    });
  });

  describe('GET /v1/jobs', () => {
    const type = 'inventory.cost';
    const costJob = (store: string) => ({ type, payload: { store, period: '2026-10' } });

    it('pages newest first through more than one page with an opaque cursor', async () => {
      const ids: string[] = [];
      for (let i = 0; i < 7; i++) {
        const r = await call(api.url, 'POST', '/v1/jobs', { json: costJob(`S${i}`) });
        ids.push(r.body.id);
      }
      const seen: string[] = [];
      let cursor: string | null = null;
      const pages: number[] = [];
      do {
        const r: { status: number; body: { jobs: { id: string }[]; nextCursor: string | null } } = await call(
          api.url,
          'GET',
          `/v1/jobs?type=${type}&limit=3${cursor ? `&cursor=${cursor}` : ''}`,
        );
        expect(r.status).toBe(200);
        pages.push(r.body.jobs.length);
        seen.push(...r.body.jobs.map((j) => j.id));
        cursor = r.body.nextCursor;
      } while (cursor);
      expect(pages).toEqual([3, 3, 1]);
      expect(seen).toEqual([...ids].reverse());
    });

    // Jobs enqueued in one transaction share created_at to the microsecond, which a JS Date
    // cannot hold: the store reads the cursor job's exact created_at back from its row.
    it('pages through jobs enqueued in one transaction (same created_at) without skipping or repeating any', async () => {
      const batch = await p.client.enqueueNow(
        Array.from({ length: 5 }, (_, i) => ({ type, payload: { store: `T${i}`, period: '2026-11' } })),
      );
      const want = new Set(batch.map((b) => b.job.id));
      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const r: { body: { jobs: { id: string }[]; nextCursor: string | null } } = await call(
          api.url,
          'GET',
          `/v1/jobs?type=${type}&limit=2${cursor ? `&cursor=${cursor}` : ''}`,
        );
        seen.push(...r.body.jobs.map((j) => j.id));
        cursor = r.body.nextCursor;
      } while (cursor);
      expect(new Set(seen).size).toBe(seen.length);
      expect(seen.filter((id) => want.has(id))).toHaveLength(5);
    });

    it('filters by state', async () => {
      const a = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-FILTER') });
      await call(api.url, 'POST', `/v1/jobs/${a.body.id}/cancel`);
      const r = await call(api.url, 'GET', '/v1/jobs?state=cancelled&limit=200');
      expect(r.status).toBe(200);
      expect(r.body.jobs.map((j: { id: string }) => j.id)).toContain(a.body.id);
      expect(r.body.jobs.every((j: { state: string }) => j.state === 'cancelled')).toBe(true);
    });

    it('returns nextCursor null on the last page and an empty page for an unused type', async () => {
      const r = await call(api.url, 'GET', '/v1/jobs?type=no.such_type');
      expect(r.body).toEqual({ jobs: [], nextCursor: null });
    });

    it.each([
      ['state=finished', 'state', /^state: must be one of pending, running, succeeded, dead, cancelled \(got "finished"\)/],
      ['limit=0', 'limit', /^limit: must be a whole number from 1 to 200 \(got "0"\)/],
      ['limit=201', 'limit', /^limit: must be a whole number from 1 to 200/],
      ['limit=ten', 'limit', /^limit: must be a whole number/],
      ['limit=-1', 'limit', /^limit: must be a whole number/],
      ['cursor=garbage!', 'cursor', /^cursor: is not a cursor this API returned/],
      [`cursor=${Buffer.from('{"t":"x","i":"y"}').toString('base64url')}`, 'cursor', /^cursor: is not a cursor/],
      ['type=Ledger%20Post', 'type', /^type: must be a job type name/],
      ['type=a%00b', 'type', /^type: must be a job type name/],
      ['status=dead', 'status', /^status: is not a parameter of this list \(allowed: state, type, lane, limit, cursor\)/],
      ['state=dead&state=pending', 'state', /^state: given more than once/],
    ])('?%s → 400 naming %s', async (qs, field, message) => {
      const r = await call(api.url, 'GET', `/v1/jobs?${qs}`);
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ code: 'invalid_query', field });
      expect(r.body.error.message).toMatch(message);
    });
  });

  describe('POST /v1/jobs/:id/cancel', () => {
    it('cancels a pending job and records who asked', async () => {
      const a = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-CANCEL') });
      const r = await call(api.url, 'POST', `/v1/jobs/${a.body.id}/cancel`, { json: { by: 'alice@erp' } });
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ id: a.body.id, state: 'cancelled', cancelled: true, cancelledBy: 'alice@erp (api, 127.0.0.1)' });
      expect(r.body.finishedAt).toMatch(ISO);
      expect((await p.store.get(a.body.id))?.cancelledBy).toBe('alice@erp (api, 127.0.0.1)');
    });

    it('without a body, records the caller address; a repeated cancel answers 200 with cancelled: false', async () => {
      const a = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-CANCEL2') });
      const first = await call(api.url, 'POST', `/v1/jobs/${a.body.id}/cancel`);
      expect(first.status).toBe(200);
      expect(first.body.cancelledBy).toBe('api, 127.0.0.1');
      const again = await call(api.url, 'POST', `/v1/jobs/${a.body.id}/cancel`, { json: { by: 'bob' } });
      expect(again.status).toBe(200);
      expect(again.body).toMatchObject({ state: 'cancelled', cancelled: false, cancelledBy: 'api, 127.0.0.1' });
    });

    it('409 for a job that already succeeded, with the job', async () => {
      const a = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-DONE') });
      await p.db.pool.query("UPDATE jobs.job SET state = 'succeeded', finished_at = now() WHERE id = $1", [a.body.id]);
      const r = await call(api.url, 'POST', `/v1/jobs/${a.body.id}/cancel`);
      expect(r.status).toBe(409);
      expect(r.body.error.code).toBe('job_finished');
      expect(r.body.error.message).toMatch(/already succeeded at .*; a finished job cannot be cancelled/);
      expect(r.body.job.state).toBe('succeeded');
    });

    it('404 for an unknown job, 400 for a bad id, a bad body or an unknown field', async () => {
      expect((await call(api.url, 'POST', '/v1/jobs/00000000-0000-4000-8000-000000000000/cancel')).status).toBe(404);
      const badId = await call(api.url, 'POST', '/v1/jobs/nope/cancel');
      expect(badId.status).toBe(400);
      expect(badId.body.error.field).toBe('id');
      const a = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-CANCEL-BAD') });
      const badBy = await call(api.url, 'POST', `/v1/jobs/${a.body.id}/cancel`, { json: { by: 42 } });
      expect(badBy.status).toBe(400);
      expect(badBy.body.error).toMatchObject({ code: 'invalid_field', field: 'by' });
      const extra = await call(api.url, 'POST', `/v1/jobs/${a.body.id}/cancel`, { json: { reason: 'x' } });
      expect(extra.body.error).toMatchObject({ code: 'invalid_field', field: 'reason' });
      const text = await call(api.url, 'POST', `/v1/jobs/${a.body.id}/cancel`, {
        body: 'by=me',
        headers: { 'content-type': 'text/plain' },
      });
      expect(text.status).toBe(415);
      const malformed = await call(api.url, 'POST', `/v1/jobs/${a.body.id}/cancel`, {
        body: '{',
        headers: { 'content-type': 'application/json' },
      });
      expect(malformed.status).toBe(400);
      expect((await p.store.get(a.body.id))?.state).toBe('pending');
    });
  });

  describe('catalogue and stats', () => {
    it('GET /v1/job-types lists the registered types with descriptions', async () => {
      // Every registered type, not a list written here: registering a handler breaks no platform test.
      await expectJobTypesListed(api.url, p.registry);
      const r = await call(api.url, 'GET', '/v1/job-types');
      expect(r.body.jobTypes.find((t: { type: string }) => t.type === 'ledger.post')).toMatchObject({
        description: 'Post a batch of journal entries to the general ledger',
        idempotency: { keep: 'forever' },
      });
    });

    it('GET /v1/stats counts jobs by state', async () => {
      const before = (await call(api.url, 'GET', '/v1/stats')).body.jobs;
      expect(Object.keys(before).sort()).toEqual(['cancelled', 'dead', 'pending', 'running', 'succeeded']);
      await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-STATS') });
      const after = (await call(api.url, 'GET', '/v1/stats')).body.jobs;
      expect(after.pending).toBe(before.pending + 1);
    });
  });

  describe('routing', () => {
    it.each([
      ['GET', '/'],
      ['GET', '/v2/jobs'],
      ['GET', '/v1/jobs/00000000-0000-4000-8000-000000000000/retry'],
      ['GET', '//v1/jobs'],
      ['GET', '/v1/jobs/'],
    ])('%s %s → 404', async (method, path) => {
      const r = await call(api.url, method, path);
      expect(r.status).toBe(404);
      expect(r.body.error.code).toBe('not_found');
    });

    it.each([
      ['DELETE', '/v1/jobs/00000000-0000-4000-8000-000000000000', 'GET, HEAD'],
      ['PUT', '/v1/jobs', 'GET, HEAD, POST'],
      ['GET', '/v1/jobs/00000000-0000-4000-8000-000000000000/cancel', 'POST'],
      ['POST', '/healthz', 'GET, HEAD'],
    ])('%s %s → 405 with Allow: %s', async (method, path, allow) => {
      const r = await call(api.url, method, path);
      expect(r.status).toBe(405);
      expect(r.headers.get('allow')).toBe(allow);
      expect(r.body.error.code).toBe('method_not_allowed');
    });

    it('HEAD works where GET does', async () => {
      const r = await fetch(`${api.url}/healthz`, { method: 'HEAD' });
      expect(r.status).toBe(200);
      expect(await r.text()).toBe('');
    });
  });

  describe('logging', () => {
    it('logs one structured line per request with method, path, status and ms, without the query or headers', async () => {
      const r = await call(api.url, 'GET', '/v1/jobs?limit=1', { headers: { authorization: 'Bearer not-logged' } });
      const id = r.headers.get('x-request-id');
      await new Promise((res) => setTimeout(res, 20));
      const mine = logs.lines.filter((l) => l.requestId === id);
      expect(mine).toHaveLength(1);
      expect(mine[0]).toMatchObject({ level: 30, msg: 'request', method: 'GET', path: '/v1/jobs', status: 200 });
      expect(typeof mine[0]!.ms).toBe('number');
      expect(JSON.stringify(logs.lines)).not.toContain('not-logged');
    });
  });
});

describe('jobs API with API_TOKEN set', () => {
  let p: Platform;
  let api: TestServer;
  const token = 's3cret-token-0123456789';

  beforeAll(async () => {
    p = await createPlatform();
    api = await startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: silentLogger, apiToken: token });
  });
  afterAll(async () => {
    await api?.close();
    await p?.close();
  });

  it('401 with WWW-Authenticate without a token, on every /v1 route (unknown ones too)', async () => {
    for (const [method, path] of [
      ['GET', '/v1/jobs'],
      ['POST', '/v1/jobs'],
      ['GET', '/v1/jobs/00000000-0000-4000-8000-000000000000'],
      ['POST', '/v1/jobs/00000000-0000-4000-8000-000000000000/cancel'],
      ['GET', '/v1/job-types'],
      ['GET', '/v1/stats'],
      ['GET', '/v1/nothing-here'],
    ] as const) {
      const r = await call(api.url, method, path, method === 'POST' ? { json: ledger('B-AUTH') } : {});
      expect(r.status, `${method} ${path}`).toBe(401);
      expect(r.headers.get('www-authenticate')).toBe('Bearer realm="jobs"');
      expect(r.body.error.code).toBe('unauthorized');
    }
    expect(await jobCount(p)).toBe(0);
  });

  it('401 with error="invalid_token" for a wrong token, a token of another length, or another scheme', async () => {
    for (const authorization of [
      `Bearer ${token.slice(0, -1)}x`,
      'Bearer short',
      `Basic ${Buffer.from(`u:${token}`).toString('base64')}`,
      `Bearer ${token} extra`,
    ]) {
      const r = await call(api.url, 'GET', '/v1/jobs', { headers: { authorization } });
      expect(r.status, authorization).toBe(401);
    }
    const wrong = await call(api.url, 'GET', '/v1/jobs', { headers: { authorization: 'Bearer wrong' } });
    expect(wrong.headers.get('www-authenticate')).toBe('Bearer realm="jobs", error="invalid_token"');
  });

  it('200 with the right token; /healthz and /readyz stay open', async () => {
    const auth = { authorization: `Bearer ${token}` };
    const created = await call(api.url, 'POST', '/v1/jobs', { json: ledger('B-AUTH'), headers: auth });
    expect(created.status).toBe(201);
    expect((await call(api.url, 'GET', `/v1/jobs/${created.body.id}`, { headers: { authorization: `bearer ${token}` } })).status).toBe(200);
    expect((await call(api.url, 'GET', '/healthz')).status).toBe(200);
    expect((await call(api.url, 'GET', '/readyz')).status).toBe(200);
  });
});

describe('jobs API faults', () => {
  let p: Platform;
  beforeAll(async () => {
    p = await createPlatform();
  });
  afterAll(() => p?.close());

  it('an unexpected error is a 500 with the request id, logged, and no internals in the body', async () => {
    const { log, lines } = capturingLogger();
    const broken = Object.create(p.client) as JobClient;
    Object.defineProperty(broken, 'store', {
      value: {
        get: async () => {
          throw new Error('relation "jobs.job" is broken; password=hunter2');
        },
      },
    });
    const s = await startServer({ pool: p.db.pool, client: broken, registry: p.registry, log });
    try {
      const r = await call(s.url, 'GET', '/v1/jobs/00000000-0000-4000-8000-000000000000');
      expect(r.status).toBe(500);
      const id = r.headers.get('x-request-id');
      expect(r.body.error).toEqual({ code: 'internal', message: `internal error; report request id ${id}`, requestId: id });
      expect(JSON.stringify(r.body)).not.toContain('hunter2');
      await new Promise((res) => setTimeout(res, 20));
      const logged = lines.find((l) => l.level === 50 && l.requestId === id);
      expect(logged?.err?.message).toContain('hunter2');
    } finally {
      await s.close();
    }
  });

  it('a database outage is a 503 with Retry-After, not a 500', async () => {
    const dead = createPool({ url: 'postgres://nobody:secret@127.0.0.1:1/none', max: 1, applicationName: 'dead' });
    const client = new JobClient({ pool: dead, registry: p.registry, publisher: p.publisher, defaultMaxAttempts: 3 });
    const s = await startServer({ pool: dead, client, registry: p.registry, log: silentLogger });
    try {
      const get = await call(s.url, 'GET', '/v1/jobs/00000000-0000-4000-8000-000000000000');
      expect(get.status).toBe(503);
      expect(get.headers.get('retry-after')).toBe('2');
      expect(get.body.error.code).toBe('unavailable');
      expect(JSON.stringify(get.body)).not.toMatch(/127\.0\.0\.1|ECONNREFUSED/);
      const post = await call(s.url, 'POST', '/v1/jobs', { json: ledger('B-OUTAGE') });
      expect(post.status).toBe(503);
      // Bad input is still a 400: it is refused before any connection is attempted.
      const bad = await call(s.url, 'POST', '/v1/jobs', { json: { type: 'nope' } });
      expect(bad.status).toBe(400);
    } finally {
      await s.close();
      await dead.end();
    }
  });
});
