// A type's concurrency key template (`'recount:{warehouse}'`) names payload fields: the library
// and the API refuse a payload without one, in the words jobs.enqueue uses in SQL, instead of
// filling in nothing and putting every such job under one shared key; a template naming a field
// the type's schema does not have is refused when the type is registered.
import * as z from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../../runtime/domain/errors.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { createPlatform, type Platform } from '../support/platform.ts';

const recount = defineJob({
  type: 'test.recount',
  description: 'recount a warehouse (a key from an optional field)',
  schema: z.object({ warehouse: z.string().optional(), zone: z.number().int().optional() }),
  concurrency: { key: 'recount:{warehouse}:{zone}' },
  run: async () => undefined,
});

const bySite = defineJob({
  type: 'test.by_site',
  description: 'keyed on a field its schema lets be anything',
  schema: z.object({ site: z.unknown() }),
  concurrency: { key: 'site:{site}' },
  run: async () => undefined,
});

describe('concurrency key templates', () => {
  let p: Platform;
  beforeAll(async () => {
    p = await createPlatform({ registry: new JobRegistry([recount, bySite]) });
  });
  afterAll(() => p.close());

  it('a payload without a field the template names is refused, naming the fields, the type and the template; nothing is enqueued', async () => {
    const err = await p.client.enqueueNow({ type: 'test.recount', payload: { zone: 3 } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).message).toBe(
      'payload: has no warehouse, which job type test.recount keys its jobs on (recount:{warehouse}:{zone}); give it, or a concurrencyKey',
    );
    const none = await p.client.enqueueNow({ type: 'test.recount', payload: {} }).catch((e: unknown) => e);
    expect((none as ValidationError).message).toMatch(/^payload: has no warehouse, zone, which job type/);
    expect((await p.db.pool.query("SELECT count(*)::int AS n FROM jobs.job WHERE type = 'test.recount'")).rows[0].n).toBe(0);
  });

  it('a field the template names that holds an object or a list is refused, naming it: no "[object Object]" key', async () => {
    for (const [site, what] of [
      [{ id: 1 }, 'an object'],
      [[1, 2], 'a list'],
    ] as const) {
      const err = await p.client.enqueueNow({ type: 'test.by_site', payload: { site } }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ValidationError);
      expect((err as ValidationError).message).toBe(
        `payload.site: is ${what}, and job type test.by_site keys its jobs on it (site:{site}): it must be a string, number or boolean`,
      );
    }
    const [ok] = await p.client.enqueueNow({ type: 'test.by_site', payload: { site: 7 } });
    expect(ok!.job.concurrencyKey).toBe('site:7');
  });

  it('with the fields, or with a key of its own, the job is enqueued under that key', async () => {
    const [a] = await p.client.enqueueNow({ type: 'test.recount', payload: { warehouse: 'WH-1', zone: 3 } });
    expect(a!.job.concurrencyKey).toBe('recount:WH-1:3');
    const [b] = await p.client.enqueueNow({ type: 'test.recount', payload: {}, concurrencyKey: 'recount:all' });
    expect(b!.job.concurrencyKey).toBe('recount:all');
  });

  it('a template naming a field the payload schema does not have is refused at registration', () => {
    expect(() => new JobRegistry([{ ...recount, concurrency: { key: 'recount:{warehose}' } }])).toThrow(
      `job type "test.recount": concurrency.key 'recount:{warehose}' names warehose, which its payload schema does not have (fields: warehouse, zone)`,
    );
  });
});
