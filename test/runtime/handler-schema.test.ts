// Handlers declare their payload as a schema (defineJob({ schema })): parse comes from it and
// names the field as `payload.<field>: <rule>`, unknown fields are refused, defaults and limits
// hold, and the fields `jobs types --describe` and GET /v1/job-types show come from it too.
import { describe, expect, it } from 'vitest';
import * as z from 'zod';
import { ValidationError } from '../../runtime/domain/errors.ts';
import { inventoryCost } from '../../runtime/handlers/inventory-cost.ts';
import { ledgerPost } from '../../runtime/handlers/ledger-post.ts';
import { defineJob, payloadFields } from '../../runtime/handlers/types.ts';
import { idList, list, text, wholeNumber } from '../../runtime/handlers/validate.ts';

function refusal(parse: () => unknown): { field: string; message: string } {
  try {
    parse();
  } catch (e) {
    expect(e).toBeInstanceOf(ValidationError);
    return { field: (e as ValidationError).field, message: (e as Error).message };
  }
  throw new Error('expected a ValidationError');
}

describe('defineJob({ schema })', () => {
  it('parses with the defaults and keeps the limits', () => {
    expect(ledgerPost.parse({ batch: 'B', entries: 3 })).toEqual({
      batch: 'B',
      entries: 3,
      workMs: 0,
      failAttempts: 0,
      workAfterWriteMs: 0,
    });
    expect(ledgerPost.parse({ batch: 'B', entries: 3, workMs: null })).toMatchObject({ workMs: 0 });
    expect(inventoryCost.parse({ store: 'S01', period: '2026-10' })).toEqual({
      store: 'S01',
      period: '2026-10',
      skus: 200,
      movementsPerSku: 200,
      chunkSize: 25,
      workMsPerChunk: 0,
    });
    expect(refusal(() => ledgerPost.parse({ batch: 'B', entries: 100_001 }))).toEqual({
      field: 'payload.entries',
      message: 'payload.entries: must be a whole number from 1 to 100000 (got 100001)',
    });
    expect(refusal(() => inventoryCost.parse({ store: 'S', period: '2026-10', workMsPerChunk: 600_001 })).field).toBe(
      'payload.workMsPerChunk',
    );
  });

  it.each([
    [[], 'payload', 'payload: must be a JSON object'],
    [{ entries: 1 }, 'payload.batch', 'payload.batch: is required and must be a string'],
    [{ batch: 1, entries: 1 }, 'payload.batch', 'payload.batch: must be a string (got 1)'],
    [{ batch: 'B' }, 'payload.entries', 'payload.entries: is required: a whole number from 1 to 100000'],
    [{ batch: 'B', entries: 1.5 }, 'payload.entries', 'payload.entries: must be a whole number from 1 to 100000 (got 1.5)'],
    [{ batch: 'x'.repeat(101), entries: 1 }, 'payload.batch', 'payload.batch: must be 1 to 100 characters (got 101)'],
    [
      { batch: 'B', entries: 1, amount: 5 },
      'payload.amount',
      'payload.amount: is not a field of this job type (allowed: batch, entries, workMs, failAttempts, workAfterWriteMs)',
    ],
  ])('ledger.post refuses %j naming %s', (payload, field, message) => {
    expect(refusal(() => ledgerPost.parse(payload))).toEqual({ field, message });
  });

  it('inventory.cost names the period rule', () => {
    expect(refusal(() => inventoryCost.parse({ store: 'S', period: '2026-13' }))).toEqual({
      field: 'payload.period',
      message: 'payload.period: must match YYYY-MM (got "2026-13")',
    });
  });

  it("gives the handler its payload's type and keeps the schema on the definition", async () => {
    const schema = z.strictObject({ invoice: text({ max: 20 }), lines: wholeNumber(1, 10, 1) });
    const job = defineJob({
      type: 'invoices.post',
      description: 'test',
      schema,
      async run(p) {
        const lines: number = p.lines; // typed from the schema
        return `${p.invoice}:${lines}`;
      },
    });
    expect(job.schema).toBe(schema);
    expect(job.parse({ invoice: 'I-1' })).toEqual({ invoice: 'I-1', lines: 1 });
    expect(refusal(() => job.parse({ invoice: 'I-1', line: 2 })).field).toBe('payload.line');
  });

  it('describes the payload fields from the schema', () => {
    expect(payloadFields(ledgerPost).map((f) => [f.name, f.type, f.required, f.default, f.rule])).toEqual([
      ['batch', 'string', true, undefined, '1 to 100 characters'],
      ['entries', 'integer', true, undefined, '1 to 100000'],
      ['workMs', 'integer', false, 0, '0 to 3600000'],
      ['failAttempts', 'integer', false, 0, '0 to 100'],
      ['workAfterWriteMs', 'integer', false, 0, '0 to 3600000'],
    ]);
    expect(payloadFields(inventoryCost).find((f) => f.name === 'period')).toMatchObject({
      type: 'string',
      required: true,
      rule: '1 to 200 characters, matches YYYY-MM',
    });
    // A type defined with its own parse has no schema to describe.
    expect(payloadFields(defineJob({ type: 'x.y', description: 'd', parse: () => ({}), run: async () => null }))).toEqual([]);
  });
});

describe('list() and idList(): a bad item is named by its index', () => {
  const invoices = defineJob({
    type: 'invoices.post',
    description: 'test',
    schema: z.strictObject({
      ids: idList({ max: 5, pattern: /^INV-\d+$/, hint: 'INV-<number>' }),
      quantities: list(wholeNumber(1, 9), { max: 3 }).optional(),
    }),
    async run(p) {
      const ids: string[] = p.ids; // typed from the schema
      return ids.length;
    },
  });

  it.each([
    [{ ids: ['INV-1', 'INV-2', 'INV-3', 'INV-x'] }, 'payload.ids.3', 'payload.ids.3: must match INV-<number> (got "INV-x")'],
    [{ ids: ['INV-1', 'INV-2', 'INV-1'] }, 'payload.ids.2', 'payload.ids.2: repeats item 0 ("INV-1")'],
    [{ ids: ['INV-1', 7] }, 'payload.ids.1', 'payload.ids.1: must be a string (got 7)'],
    [{}, 'payload.ids', 'payload.ids: is required: a list of 1 to 5 items'],
    [{ ids: 'INV-1' }, 'payload.ids', 'payload.ids: must be a list of 1 to 5 items (got "INV-1")'],
    [{ ids: [] }, 'payload.ids', 'payload.ids: must be a list of 1 to 5 items (got 0)'],
    [{ ids: ['INV-1', 'INV-2', 'INV-3', 'INV-4', 'INV-5', 'INV-6'] }, 'payload.ids', 'payload.ids: must be a list of 1 to 5 items (got 6)'],
    [{ ids: ['INV-1'], quantities: [1, 0] }, 'payload.quantities.1', 'payload.quantities.1: must be a whole number from 1 to 9 (got 0)'],
  ])('refuses %j naming %s', (payload, field, message) => {
    expect(refusal(() => invoices.parse(payload))).toEqual({ field, message });
  });

  it('accepts a good list and describes it with its bounds', () => {
    expect(invoices.parse({ ids: ['INV-1', 'INV-2'], quantities: [3] })).toEqual({ ids: ['INV-1', 'INV-2'], quantities: [3] });
    expect(payloadFields(invoices).find((f) => f.name === 'ids')).toMatchObject({ type: 'array', required: true, rule: '1 to 5 items' });
  });
});
