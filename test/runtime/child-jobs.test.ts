// Issue 15, child jobs: a handler enqueues jobs through ctx.enqueue, inside its fenced
// transaction. The children exist only if the attempt that enqueued them commits, each records
// its parent, and `jobs show` lists them. Through the test kit (a real worker on a fresh
// database), with the zombie and the failed attempt the issue names.
import { afterAll, expect, it } from 'vitest';
import * as z from 'zod';
import { createTestKit } from '../../testing/index.ts';
import { formatJob } from '../../runtime/cli/format.ts';
import { defineJob } from '../../runtime/handlers/types.ts';

const month = defineJob({
  type: 'close.month',
  description: 'closes a month: one costing per store, as child jobs',
  schema: z.strictObject({
    period: z.string(),
    stores: z.number().int(),
    failFirst: z.boolean().default(false),
    bad: z.boolean().default(false),
    keyed: z.boolean().default(true),
  }),
  async run(p, ctx) {
    const children = await ctx.enqueue(
      Array.from({ length: p.stores }, (_, i) => ({
        type: 'cost.store',
        payload: { store: `store-${i + 1}`, period: p.period },
        ...(p.keyed ? { idempotencyKey: `${p.period}:store-${i + 1}` } : {}),
      })),
    );
    if (p.bad) await ctx.enqueue({ type: 'cost.store', payload: { store: 7 } });
    await ctx.db.query('SELECT 1'); // the parent's own writes share the transaction
    if (p.failFirst && ctx.job.attempt === 1) throw new Error('period not ready');
    return { children: children.length };
  },
});
const costStore = defineJob({
  type: 'cost.store',
  description: 'costs one store',
  schema: z.strictObject({ store: z.string(), period: z.string() }),
  async run(p) {
    return { store: p.store };
  },
});

const kit = await createTestKit({ jobs: [month, costStore] });
afterAll(() => kit.close());

const childrenOf = async (parent: string) =>
  (await kit.pool.query('SELECT id, type, state, parent_id FROM jobs.job WHERE parent_id = $1 ORDER BY id', [parent])).rows;

it('the children of a completed attempt exist, record their parent, are published after the commit and run; jobs show lists them', async () => {
  const mark = await kit.mark();
  const parent = await kit.enqueue('close.month', { period: '2026-11', stores: 3 });
  expect(await kit.runOnce(parent)).toMatchObject({ state: 'succeeded', result: { children: 3 } });
  const children = await childrenOf(parent.id);
  expect(children.map((c) => c.parent_id)).toEqual([parent.id, parent.id, parent.id]);
  // Published after the parent's COMMIT, at once: each child's message is on the queue.
  expect((await kit.enqueuedSince(mark)).filter((j) => j.parentId === parent.id)).toHaveLength(3);
  const queued = kit.queue.peek().map((m) => JSON.parse(m.body).jobId);
  for (const c of children) expect(queued).toContain(c.id);
  for (const c of children) expect(await kit.runOnce(c.id)).toMatchObject({ state: 'succeeded', parentId: parent.id });
  const shown = formatJob(await kit.job(parent.id), {
    children: { jobs: (await childrenOf(parent.id)).map((c) => ({ id: c.id, type: c.type, state: c.state })), total: 3 },
  });
  expect(shown).toContain('children  3: 3 succeeded');
  expect(shown).toContain(`  child   ${children[0].id} cost.store succeeded`);
  expect(formatJob(await kit.job(children[0].id))).toContain(`parent    ${parent.id}`);
});

it('a failed attempt leaves no children; its retry enqueues them once', async () => {
  const parent = await kit.enqueue('close.month', { period: '2026-10', stores: 2, failFirst: true });
  const first = await kit.runOnce(parent);
  expect(first).toMatchObject({ state: 'pending', attemptLog: [{ outcome: 'retry' }] });
  expect(await childrenOf(parent.id)).toEqual([]);
  expect(await kit.runOnce(parent)).toMatchObject({ state: 'succeeded', attempt: 2 });
  expect(await childrenOf(parent.id)).toHaveLength(2);
});

it("a zombie's children never exist: the attempt that lost its lease rolls them back with its completion", async () => {
  const mark = await kit.mark();
  // No idempotency keys on these children: nothing but the fence keeps the zombie's from landing.
  const zombie = await kit.start(await kit.enqueue('close.month', { period: '2026-09', stores: 4, keyed: false }), { pauseAt: 'end' });
  zombie.freeze(); // its children are inserted, not committed; no heartbeat from here on
  await kit.reclaim();
  const second = kit.runOnce(zombie.job);
  await zombie.resume(); // its fenced completion matches no row: it rolls back, children and all
  expect(await second).toMatchObject({ state: 'succeeded', attempt: 2 });
  const children = await childrenOf(zombie.job.id);
  expect(children).toHaveLength(4); // the second attempt's, once
  expect((await kit.enqueuedSince(mark)).filter((j) => j.type === 'cost.store').map((j) => j.id)).toEqual(children.map((c) => c.id));
});

it('a bad child is refused naming the field, before the database; the parent fails without children', async () => {
  const parent = await kit.enqueue('close.month', { period: '2026-08', stores: 1, bad: true }, { maxAttempts: 1 });
  const ended = await kit.runOnce(parent);
  expect(ended.state).toBe('dead');
  expect(ended.lastError?.message).toMatch(/payload\.store/);
  expect(await childrenOf(parent.id)).toEqual([]);
});
