// Issue 18 §5: the platform's tests of its job types hold for any set of registered handlers. A
// platform built with the default registry plus an application's type (as an ERP developer adds
// invoices.post to runtime/handlers/index.ts) passes the same checks the API, OpenAPI, enqueue and
// CLI tests make with the defaults (test/support/registered-types.ts), and shows the new type.
import * as z from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../../runtime/domain/errors.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { OpsRoutes } from '../../runtime/http/oncall-routes.ts';
import { createOpsServices } from '../../runtime/oncall/services.ts';
import { createPlatform, type Platform } from '../support/platform.ts';
import { expectJobTypesListed, expectOpenApiTypes, unknownTypeMessage } from '../support/registered-types.ts';
import { call, startServer, type TestServer } from './support.ts';

const postInvoices = defineJob({
  type: 'invoices.post',
  description: 'Post a batch of invoices (an application type the platform tests do not know)',
  schema: z.strictObject({ batch: z.string() }),
  async run() {
    return null;
  },
});

const TOKEN = 'types-token';
const auth = { authorization: `Bearer ${TOKEN}` };
let p: Platform;
let api: TestServer;
beforeAll(async () => {
  p = await createPlatform({ registry: defaultRegistry().register(postInvoices) });
  const ops = new OpsRoutes(
    createOpsServices({ pool: p.db.pool, registry: p.registry, publisher: p.publisher, queue: p.queue, log: silentLogger }),
  );
  api = await startServer({ pool: p.db.pool, client: p.client, registry: p.registry, log: silentLogger, apiToken: TOKEN, ops });
});
afterAll(async () => {
  await api?.close();
  await p?.close();
});

describe('a platform with an application type registered besides the examples', () => {
  it('has three types, the new one among them', () => {
    expect(p.registry.types()).toEqual(['inventory.cost', 'invoices.post', 'ledger.post']);
  });

  it('GET /v1/job-types lists every registered type with its description', async () => {
    await expectJobTypesListed(api.url, p.registry, auth);
  });

  it('the OpenAPI document carries a payload schema for every registered type', async () => {
    const r = await call(api.url, 'GET', '/v1/openapi.json', { headers: auth });
    expectOpenApiTypes(r.body, p.registry);
    expect(r.body.components.schemas['invoices.post'].required).toEqual(['batch']);
  });

  it('an unknown type is refused naming every registered type, by the API and by the client', async () => {
    const r = await call(api.url, 'POST', '/v1/jobs', { headers: auth, json: { type: 'ledger.psot', payload: {} } });
    expect(r.status).toBe(400);
    expect(r.body.error.message).toMatch(unknownTypeMessage('ledger.psot', p.registry));
    const err = await p.client.enqueueNow({ type: 'ledger.postt', payload: {} } as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).message).toMatch(unknownTypeMessage('ledger.postt', p.registry));
  });
});
