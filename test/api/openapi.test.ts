// GET /v1/openapi.json: the OpenAPI document is built from the same route tables and schemas that
// answer requests, so it names every route the server has (a route added to a table appears, with
// its parameters and body), sits behind the API token like every /v1 route, and its enqueue body
// is what POST /v1/jobs accepts: the same fields, the same required ones, the same bounds.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../runtime/observability/log.ts';
import { OpsRoutes } from '../../runtime/http/oncall-routes.ts';
import { routesOf } from '../../runtime/http/server.ts';
import { createOpsServices } from '../../runtime/oncall/services.ts';
import { call, startServer, type TestServer } from './support.ts';
import { createPlatform, type Platform } from '../support/platform.ts';
import { expectOpenApiTypes } from '../support/registered-types.ts';

const TOKEN = 'openapi-token';
const auth = { authorization: `Bearer ${TOKEN}` };
let p: Platform;
let api: TestServer;
let doc: any;

beforeAll(async () => {
  p = await createPlatform();
  const ops = new OpsRoutes(
    createOpsServices({ pool: p.db.pool, registry: p.registry, publisher: p.publisher, queue: p.queue, log: silentLogger }),
  );
  api = await startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: silentLogger, apiToken: TOKEN, ops });
  const r = await call(api.url, 'GET', '/v1/openapi.json', { headers: auth });
  expect(r.status).toBe(200);
  doc = r.body;
});
afterAll(async () => {
  await api?.close();
  await p?.close();
});

const operation = (method: string, path: string) => doc.paths[path.replace(/:([A-Za-z]+)/g, '{$1}')]?.[method.toLowerCase()];

describe('GET /v1/openapi.json', () => {
  it('needs the API token like every /v1 route', async () => {
    const r = await call(api.url, 'GET', '/v1/openapi.json');
    expect(r.status).toBe(401);
    expect(r.body.error.code).toBe('unauthorized');
  });

  it('is an OpenAPI 3.x document with the error shape', () => {
    expect(doc.openapi).toMatch(/^3\.\d+\.\d+$/);
    expect(doc.info.title).toBeTruthy();
    expect(doc.components.schemas.Error.properties.error.required).toEqual(['code', 'message']);
  });

  it('names every route of the route tables, with its path parameters, query and body', () => {
    const routes = routesOf(api.server);
    // The tables themselves: a route dropped from one would vanish from the document unseen.
    const served = routes.map((r) => `${r.method} ${r.path}`);
    for (const known of [
      'GET /v1/jobs',
      'POST /v1/jobs',
      'GET /v1/jobs/:id',
      'POST /v1/jobs/:id/cancel',
      'GET /v1/job-types',
      'GET /v1/openapi.json',
      'GET /v1/dead-jobs',
      'POST /v1/dlq/redrive',
      'POST /v1/pending-jobs/republish',
    ]) {
      expect(served).toContain(known);
    }
    const documented = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.keys(ops as object).map((m) => `${m.toUpperCase()} ${path}`),
    );
    expect(documented.sort()).toEqual(routes.map((r) => `${r.method} ${r.path.replace(/:([A-Za-z]+)/g, '{$1}')}`).sort());
    for (const r of routes) {
      const op = operation(r.method, r.path);
      const what = `${r.method} ${r.path}`;
      expect(op.summary, what).toBeTruthy();
      expect(op.responses['4XX'], what).toBeDefined();
      for (const name of r.path.matchAll(/:([A-Za-z]+)/g)) {
        expect(
          op.parameters?.find((x: any) => x.in === 'path' && x.name === name[1]),
          `${what}: path parameter ${name[1]}`,
        ).toBeDefined();
      }
      for (const name of Object.keys(r.query?.shape ?? {})) {
        expect(
          op.parameters?.find((x: any) => x.in === 'query' && x.name === name),
          `${what}: query parameter ${name}`,
        ).toBeDefined();
      }
      // Every POST declares its body: a route reading an undeclared body would refuse every field.
      if (r.method === 'POST') expect(op.requestBody?.content['application/json'].schema.type, what).toBe('object');
      if (r.path.startsWith('/v1/')) expect(op.security, what).toBeDefined();
    }
    expect(operation('GET', '/v1/dead-jobs').security).toEqual([{ operatorToken: [] }]);
    expect(operation('GET', '/v1/jobs').security).toEqual([{ apiToken: [] }]);
  });

  it("carries each job type's payload shape, from the handler's schema", async () => {
    const ledger = doc.components.schemas['ledger.post'];
    expect(Object.keys(ledger.properties)).toEqual(['batch', 'entries', 'workMs', 'failAttempts', 'workAfterWriteMs']);
    expect(ledger.required).toEqual(['batch', 'entries']);
    expect(ledger.additionalProperties).toBe(false);
    expect(ledger.properties.entries).toMatchObject({ type: 'integer', minimum: 1, maximum: 100000 });
    expect(doc.components.schemas['inventory.cost'].required).toEqual(['store', 'period']);
    const payload = operation('POST', '/v1/jobs').requestBody.content['application/json'].schema.properties.payload;
    expect(payload.anyOf).toContainEqual({ $ref: '#/components/schemas/ledger.post' });
    expectOpenApiTypes(doc, p.registry); // every registered type, not the two examples only
    // GET /v1/job-types shows the same fields.
    const types = (await call(api.url, 'GET', '/v1/job-types', { headers: auth })).body.jobTypes;
    expect(types.find((t: any) => t.type === 'ledger.post').payload.fields.map((f: any) => f.name)).toEqual(Object.keys(ledger.properties));
  });

  it('documents the enqueue body as POST /v1/jobs accepts it: its fields, the required one, the bounds', async () => {
    const body = operation('POST', '/v1/jobs').requestBody;
    const schema = body.content['application/json'].schema;
    expect(body.required).toBe(true);
    expect(Object.keys(schema.properties).sort()).toEqual([
      'concurrencyKey',
      'concurrencyLimit',
      'idempotencyKey',
      'lane',
      'maxAttempts',
      'payload',
      'runAt',
      'type',
    ]);
    expect(schema.required).toEqual(['type']);
    expect(schema.additionalProperties).toBe(false);
    const post = (json: unknown) => call(api.url, 'POST', '/v1/jobs', { headers: auth, json });
    const base = { type: 'ledger.post', payload: { batch: 'OPENAPI', entries: 1 } };
    // The documented bounds are accepted…
    const max = schema.properties.maxAttempts.anyOf.find((s: any) => s.type === 'integer');
    const key = schema.properties.idempotencyKey.anyOf.find((s: any) => s.type === 'string');
    expect(
      (await post({ ...base, maxAttempts: max.maximum, idempotencyKey: 'k'.repeat(key.maxLength), runAt: '2026-12-01T06:00:00Z' })).status,
    ).toBe(201);
    expect((await post({ ...base, maxAttempts: max.minimum, idempotencyKey: 'k'.repeat(key.minLength) })).status).toBe(201);
    // …just past them, a 400 naming the field.
    for (const [field, value] of [
      ['maxAttempts', max.maximum + 1],
      ['maxAttempts', max.minimum - 1],
      ['idempotencyKey', 'k'.repeat(key.maxLength + 1)],
      ['idempotencyKey', ''],
      ['runAt', 'tomorrow'],
    ] as const) {
      const r = await post({ ...base, [field]: value });
      expect(r.status, `${field}=${String(value).slice(0, 20)}`).toBe(400);
      expect(r.body.error.field).toBe(field);
    }
    // A field the schema does not name is refused; the one it requires is required.
    expect((await post({ ...base, priority: 1 })).body.error).toMatchObject({ code: 'invalid_field', field: 'priority' });
    expect((await post({ payload: base.payload })).body.error).toMatchObject({ code: 'invalid_field', field: 'type' });
  });
});
