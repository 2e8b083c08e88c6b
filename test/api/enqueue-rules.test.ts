// The enqueue request's rules are one schema (runtime/store/enqueue-request.ts): POST /v1/jobs and
// JobClient.enqueueNow, a library caller's path, refuse the same input with the same field, status
// and message, and accept the same input.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../../runtime/domain/errors.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { MAX_PAYLOAD_BYTES } from '../../runtime/store/client.ts';
import { createPlatform, type Platform } from '../support/platform.ts';
import { call, startServer, type TestServer } from './support.ts';

let p: Platform;
let api: TestServer;
beforeAll(async () => {
  p = await createPlatform();
  api = await startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: silentLogger });
});
afterAll(async () => {
  await api?.close();
  await p?.close();
});

const ok = { type: 'ledger.post', payload: { batch: 'RULES', entries: 1 } };

describe('one set of enqueue rules for the API and the library', () => {
  it('a bad lane: 400 naming lane and the allowed lanes', async () => {
    const r = await call(api.url, 'POST', '/v1/jobs', { json: { ...ok, lane: 'fast' } });
    expect({ status: r.status, field: r.body.error.field, message: r.body.error.message }).toEqual({
      status: 400,
      field: 'lane',
      message: 'lane: must be one of urgent, bulk (got "fast")',
    });
  });

  it.each([
    ['no type', { payload: ok.payload }],
    ['an empty type', { ...ok, type: '' }],
    ['a type that is not a string', { ...ok, type: 7 }],
    ['an unknown type', { ...ok, type: 'ledger.psot' }],
    ['a misspelt field', { ...ok, idempotency_key: 'k' }],
    ['a payload that is not an object', { ...ok, payload: [1] }],
    ['a missing payload field', { ...ok, payload: { batch: 'B' } }],
    ['a payload field out of range', { ...ok, payload: { batch: 'B', entries: 0 } }],
    ['an unknown payload field', { ...ok, payload: { ...ok.payload, colour: 'red' } }],
    ['a payload over the limit', { ...ok, payload: { batch: 'x'.repeat(MAX_PAYLOAD_BYTES), entries: 1 } }],
    ['an empty idempotency key', { ...ok, idempotencyKey: '' }],
    ['a 201-character idempotency key', { ...ok, idempotencyKey: 'k'.repeat(201) }],
    ['maxAttempts 0', { ...ok, maxAttempts: 0 }],
    ['maxAttempts 1.5', { ...ok, maxAttempts: 1.5 }],
    ['maxAttempts as a string', { ...ok, maxAttempts: '3' }],
    ['runAt without an offset', { ...ok, runAt: '2026-12-01T06:00:00' }],
    ['runAt before 1970', { ...ok, runAt: '1969-12-31T23:59:59Z' }],
    ['runAt as a number', { ...ok, runAt: 1767225600000 }],
    ['an unknown lane', { ...ok, lane: 'fast' }],
    ['a lane that is not a string', { ...ok, lane: 1 }],
  ])('%s: the same field, status and message', async (_name, spec) => {
    const err = await p.client.enqueueNow(spec as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    const v = err as ValidationError;
    const r = await call(api.url, 'POST', '/v1/jobs', { json: spec });
    expect({ status: r.status, field: r.body.error.field, message: r.body.error.message }).toEqual({
      status: v.status,
      field: v.field,
      message: v.message,
    });
  });

  it('both accept the bounds, and a Date is the library’s runAt as its ISO text is the API’s', async () => {
    const runAt = new Date(Date.now() + 3_600_000);
    const spec = { ...ok, idempotencyKey: 'k'.repeat(200), maxAttempts: 100 };
    const [lib] = await p.client.enqueueNow({ ...spec, runAt });
    const r = await call(api.url, 'POST', '/v1/jobs', { json: { ...spec, idempotencyKey: 'j'.repeat(200), runAt: runAt.toISOString() } });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ maxAttempts: 100, runAfter: runAt.toISOString(), payload: lib!.job.payload });
    expect(lib!.job).toMatchObject({ maxAttempts: 100, runAfter: runAt });
    // The payload as the type's schema returns it: its defaults filled in, by both.
    expect(lib!.job.payload).toEqual({ batch: 'RULES', entries: 1, workMs: 0, failAttempts: 0, workAfterWriteMs: 0 });
  });
});
