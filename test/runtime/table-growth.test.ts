// What the worker service and the live view run on a schedule must read what is active, not what
// has ever run: on a job table of many finished jobs and a few active ones (after a vacuum, as
// autovacuum leaves it), each periodic statement uses an index and touches a few buffers, not the
// table (issue 16, target 5: no decay as the tables grow). Plus the live view's count of the
// finished states, the one periodic read that must see the whole table, spaced out as it grows.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RECONCILER_LOCK_KEY } from '../../runtime/maintenance/reconciler.ts';
import { FINISHED_COUNT_SPACING, liveStateCounts } from '../../runtime/live/counts.ts';
import { LIVE_SQL } from '../../runtime/live/sql.ts';
import { OPS_SQL } from '../../runtime/oncall/sql.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import { JobClient } from '../../runtime/store/client.ts';
import { JobStore } from '../../runtime/store/job-store.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { SQL } from '../../runtime/store/sql.ts';
import { createTestDb, type TestDb } from '../support/db.ts';

const FINISHED = 20_000;
const PENDING = 90;
const RUNNING = 10;

let db: TestDb;
let tablePages = 0;

beforeAll(async () => {
  db = await createTestDb();
  const client = new JobClient({
    pool: db.pool,
    registry: defaultRegistry(),
    publisher: new Publisher(db.pool, new MemoryQueue({ visibilityTimeoutSeconds: 60 }), silentLogger),
    defaultMaxAttempts: 3,
  });
  const total = FINISHED + PENDING + RUNNING;
  for (let i = 0; i < total; i += 1000)
    await client.enqueueNow(
      Array.from({ length: Math.min(1000, total - i) }, (_, k) => ({ type: 'ledger.post', payload: { batch: `G-${i + k}`, entries: 1 } })),
    );
  // The oldest finish (as a drain leaves them), the newest wait or run.
  await db.pool.query(
    `WITH ranked AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM jobs.job)
     UPDATE jobs.job j SET attempt = 1, started_at = statement_timestamp(), claimed_at = statement_timestamp(),
            state = CASE WHEN r.n <= $1::int THEN 'succeeded'::jobs.job_state ELSE 'running'::jobs.job_state END,
            finished_at = CASE WHEN r.n <= $1::int THEN statement_timestamp() END,
            lease_owner = CASE WHEN r.n > $1::int THEN 'w' END,
            lease_expires_at = CASE WHEN r.n > $1::int THEN statement_timestamp() + interval '1 minute' END
       FROM ranked r WHERE r.id = j.id AND r.n <= $1::int + $2::int`,
    [FINISHED, RUNNING],
  );
  await db.pool.query('VACUUM ANALYZE jobs.job');
  await db.pool.query('VACUUM ANALYZE jobs.outbox');
  tablePages = (await db.pool.query("SELECT relpages FROM pg_class WHERE oid = 'jobs.job'::regclass")).rows[0].relpages;
}, 120_000);
afterAll(async () => {
  await db.drop();
});

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  Plans?: PlanNode[];
}
const scans = (n: PlanNode): string[] => [...(n['Relation Name'] === 'job' ? [n['Node Type']] : []), ...(n.Plans ?? []).flatMap(scans)];

/** EXPLAIN (ANALYZE, BUFFERS) in a transaction rolled back: the scans on jobs.job and the buffers touched. */
async function explain(text: string, params: unknown[]): Promise<{ scans: string[]; buffers: number }> {
  const c = await db.pool.connect();
  try {
    await c.query('BEGIN');
    const { rows } = await c.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`, params);
    await c.query('ROLLBACK');
    const plan = rows[0]['QUERY PLAN'][0].Plan as PlanNode;
    return { scans: scans(plan), buffers: plan['Shared Hit Blocks'] + plan['Shared Read Blocks'] };
  } finally {
    c.release();
  }
}

describe('periodic statements on a table of many finished jobs', () => {
  const periodic: [string, string, unknown[]][] = [
    ['rescuer: expired leases', SQL.jobRescueExpired, [10, 100]],
    ['reconciler: the count', SQL.reconcileCount, [RECONCILER_LOCK_KEY, ['bulk', 'urgent']]],
    ['reconciler: the pick', SQL.jobRepublishLost, [61, 240, 1000, ['bulk', 'urgent']]],
    ['outbox relay', SQL.outboxLockDue, [2, 100]],
    ['stuck-job count', OPS_SQL.stuckJobCount, [[], [], 3600, 900]],
    ['pruner', SQL.jobPrune, [500, 30]],
    ['live view: leases', LIVE_SQL.leases, [200]],
    ['live view: active counts', SQL.jobCountActive, []],
    ['live view: waiting groups', SQL.waitingGroups, [10]],
  ];
  it.each(periodic)('%s reads the active jobs through an index, not the table', async (_name, text, params) => {
    const { scans, buffers } = await explain(text, params);
    expect(tablePages).toBeGreaterThan(400);
    expect(scans).not.toContain('Seq Scan');
    // The active rows sit on a few pages; 100 buffers is a twentieth of the table, or less.
    expect(buffers).toBeLessThan(Math.min(100, tablePages / 4));
  });

  it('the live view counts every state correctly, whichever way it reads them', async () => {
    const count = liveStateCounts(new JobStore(db.pool));
    const expected = { pending: PENDING, running: RUNNING, succeeded: FINISHED, dead: 0, cancelled: 0 };
    expect(await count()).toEqual(expected);
    expect(await count()).toEqual(expected);
  });
});

describe('the live view: finished states counted less often as the count grows costly', () => {
  it('counts the whole table first, then the active states only until the spacing has passed, then the whole table again', async () => {
    let now = 0;
    const calls: string[] = [];
    const full = { pending: 1, running: 2, succeeded: 500, dead: 3, cancelled: 4 };
    const store = {
      countByState: async () => {
        calls.push('all');
        now += 10; // the full count takes 10 ms
        return { ...full };
      },
      countActive: async () => {
        calls.push('active');
        return { pending: 7, running: 8 };
      },
    };
    const count = liveStateCounts(store, () => now);
    expect(await count()).toEqual(full);
    now += 100;
    expect(await count()).toEqual({ ...full, pending: 7, running: 8 });
    now += 10 * FINISHED_COUNT_SPACING - 100;
    await count();
    expect(calls).toEqual(['all', 'active', 'all']);
  });
});
