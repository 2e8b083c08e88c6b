// A type's concurrency key template (`'recount:{warehouse}'`) names payload fields: the library
// and the API refuse a payload without one, in the words jobs.enqueue uses in SQL, instead of
// filling in nothing and putting every such job under one shared key; a template naming a field
// the type's schema does not have is refused when the type is registered. A key is 1 to 200
// characters with no control character, on every path, and a number in a template makes the same
// text through TypeScript as through jobs.enqueue in SQL.
import * as z from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../../runtime/domain/errors.ts';
import { JobRegistry } from '../../runtime/handlers/registry.ts';
import { defineJob } from '../../runtime/handlers/types.ts';
import { registerJobTypes } from '../../runtime/store/job-types.ts';
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
    await registerJobTypes(p.db.pool, p.registry, { maxAttempts: 3 }, 'test'); // for jobs.enqueue, the SQL path
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

  it('a number makes the text PostgreSQL makes of it (plain decimal, trailing zeros trimmed), so both enqueue paths key a job alike', async () => {
    for (const [site, key] of [
      [7, 'site:7'],
      [1.5, 'site:1.5'],
      [1e21, 'site:1000000000000000000000'],
      [1.25e-7, 'site:0.000000125'],
      [-3e-7, 'site:-0.0000003'],
      [true, 'site:true'],
    ] as const) {
      const [ts] = await p.client.enqueueNow({ type: 'test.by_site', payload: { site } });
      const { rows } = await p.db.pool.query("SELECT job_id FROM jobs.enqueue('test.by_site', $1)", [JSON.stringify({ site })]);
      const fromSql = await p.store.get(rows[0].job_id);
      expect([ts!.job.concurrencyKey, fromSql!.concurrencyKey]).toEqual([key, key]);
    }
    // jsonb keeps the 1.0 an SQL caller writes; the key does not.
    const { rows } = await p.db.pool.query(`SELECT job_id FROM jobs.enqueue('test.by_site', '{"site": 1.0}')`);
    expect((await p.store.get(rows[0].job_id))!.concurrencyKey).toBe('site:1');
  });

  it('both paths make the same key from text that looks like a placeholder, and count characters alike (an emoji is one)', async () => {
    const both = async (payload: Record<string, unknown>) => {
      const ts = await p.client.enqueueNow({ type: 'test.recount', payload }).then(
        ([r]) => r!.job.concurrencyKey,
        (e: Error) => e.message,
      );
      const sql = await p.db.pool.query("SELECT job_id FROM jobs.enqueue('test.recount', $1)", [JSON.stringify(payload)]).then(
        async ({ rows }) => (await p.store.get(rows[0].job_id))!.concurrencyKey,
        (e: Error) => e.message,
      );
      return [ts, sql];
    };
    // One pass over the template: a warehouse named "{zone}" is not filled in by the zone.
    expect(await both({ warehouse: '{zone}', zone: 4 })).toEqual(['recount:{zone}:4', 'recount:{zone}:4']);
    // 180 emoji are 180 characters for PostgreSQL (and now for TypeScript), within the 200.
    const wide = '🧾'.repeat(180);
    expect(await both({ warehouse: wide, zone: 1 })).toEqual([`recount:${wide}:1`, `recount:${wide}:1`]);
    const [ts, sql] = await both({ warehouse: '🧾'.repeat(200), zone: 1 });
    expect(ts).toMatch(/makes the key of job type test.recount \(recount:\{warehouse\}:\{zone\}\) 210 characters long; the limit is 200/);
    expect(sql).toMatch(/makes the key of job type test.recount \(recount:\{warehouse\}:\{zone\}\) 210 characters long; the limit is 200/);
    const explicit = await p.client.enqueueNow({ type: 'test.recount', payload: {}, concurrencyKey: '🧾'.repeat(150) });
    expect(explicit[0]!.job.concurrencyKey).toBe('🧾'.repeat(150));
  });

  it('a key with a control character is refused on every path, naming the character and where it is', async () => {
    const refused = async (spec: Parameters<typeof p.client.enqueueNow>[0]) => {
      const err = await p.client.enqueueNow(spec).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ValidationError);
      return (err as ValidationError).message;
    };
    expect(await refused({ type: 'test.by_site', payload: { site: 'a\u001b[31m' } })).toBe(
      'payload.site: must not contain control characters (U+001B at character 2), and job type test.by_site keys its jobs on it (site:{site})',
    );
    expect(await refused({ type: 'test.recount', payload: {}, concurrencyKey: 'line\nbreak' })).toBe(
      'concurrencyKey: must not contain control characters (U+000A at character 5)',
    );
    expect(await refused({ type: 'test.recount', payload: {}, concurrencyKey: 'k', idempotencyKey: 'x\u009by' })).toBe(
      'idempotencyKey: must not contain control characters (U+009B at character 2)',
    );
    expect(await refused({ type: 'test.by_site', payload: { site: 'x'.repeat(200) } })).toBe(
      'payload: makes the key of job type test.by_site (site:{site}) 205 characters long; the limit is 200: give a concurrencyKey',
    );
    expect((await p.db.pool.query("SELECT count(*)::int AS n FROM jobs.job WHERE concurrency_key ~ '[[:cntrl:]]'")).rows[0].n).toBe(0);
  });

  it("a key function's key is held to the same rules; a function that returns no string is the type's bug, not the payload's", async () => {
    const registry = new JobRegistry([
      defineJob({
        type: 'test.key_fn',
        description: 'keyed by a function',
        schema: z.object({ ref: z.unknown() }),
        concurrency: { key: (x: { ref: unknown }) => x.ref as string | null },
        run: async () => undefined,
      }),
    ]);
    const q = await createPlatform({ registry });
    try {
      const err = await q.client.enqueueNow({ type: 'test.key_fn', payload: { ref: 'tab\there' } }).catch((e: unknown) => e);
      expect((err as Error).message).toBe(
        'payload: makes the key "tab\\there" of job type test.key_fn, which must not contain control characters (U+0009 at character 4); give a concurrencyKey',
      );
      const wrong = await q.client.enqueueNow({ type: 'test.key_fn', payload: { ref: 12 } }).catch((e: unknown) => e);
      expect(wrong).toBeInstanceOf(TypeError);
      const [none] = await q.client.enqueueNow({ type: 'test.key_fn', payload: { ref: null } });
      expect(none!.job.concurrencyKey).toBeNull();
    } finally {
      await q.close();
    }
  });

  it('a template naming a field the payload schema does not have is refused at registration', () => {
    expect(() => new JobRegistry([{ ...recount, concurrency: { key: 'recount:{warehose}' } }])).toThrow(
      `job type "test.recount": concurrency.key 'recount:{warehose}' names warehose, which its payload schema does not have (fields: warehouse, zone)`,
    );
  });
});
