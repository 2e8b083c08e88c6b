// What one concurrency key's backlog costs its claims (issue 14), load-independent where it can
// be: N jobs waiting on one key (limit 1), then the keyed claim of the oldest (it starts) and of
// the next (blocked), each under EXPLAIN (ANALYZE, BUFFERS) and rolled back, and jobs.wake_key
// with the oldest running (the key has no room: what every end of a keyed job pays). Twice: with
// the backlog draining (every job but the oldest blocked: the steady state, the figures at the
// top level) and just enqueued (no job blocked yet: `justEnqueued`). Since migration 0015 the
// draining figures do not grow with N.
//
//   npx tsx bench/key-backlog.ts [N,N,…]        default 250,1000,4000,16000; prints one JSON line per N
import pg from 'pg';
import { startEmbeddedPg, withDatabase } from '../dev/embedded-pg.ts';
import { migrate } from '../runtime/db/migrate.ts';
import { createPool } from '../runtime/db/pool.ts';
import { KEY_SQL } from '../runtime/store/sql-keys.ts';
import { JobStore } from '../runtime/store/job-store.ts';
import { withTransaction } from '../runtime/db/transaction.ts';

const backlogs = (process.argv[2] ?? '250,1000,4000,16000').split(',').map(Number);
const embedded = await startEmbeddedPg({});
const admin = new pg.Client({ connectionString: embedded.url });
admin.on('error', (err) => process.stderr.write(`key-backlog: admin connection: ${err.message}\n`));
await admin.connect();
try {
  for (const n of backlogs) {
    await admin.query('DROP DATABASE IF EXISTS keyplan WITH (FORCE)');
    await admin.query('CREATE DATABASE keyplan');
    const pool = createPool({ url: withDatabase(embedded.url, 'keyplan'), max: 2, applicationName: 'keyplan' });
    await migrate(pool);
    const store = new JobStore(pool);
    for (let i = 0; i < n; i += 1000)
      await withTransaction(pool, (c) =>
        store.insertMany(
          c,
          Array.from({ length: Math.min(1000, n - i) }, () => ({
            type: 'x',
            payload: {},
            maxAttempts: 3,
            concurrencyKey: 'k',
            concurrencyLimit: 1,
          })),
        ),
      );
    await pool.query('VACUUM ANALYZE jobs.job');
    const { rows: ids } = await pool.query('SELECT id FROM jobs.job ORDER BY id LIMIT 2');
    const oldest = ids[0].id;
    const c = await pool.connect();
    c.on('error', () => undefined);
    // The claim of the oldest job (it starts), and of the second (blocked), with buffers.
    const plan = async (id: string) => {
      await c.query('BEGIN');
      await c.query(KEY_SQL.keyLockClaim, [[id]]);
      const { rows } = await c.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${KEY_SQL.jobClaimKeyed}`, [[id], 'w', 30]);
      await c.query('ROLLBACK');
      const p = rows[0]['QUERY PLAN'][0];
      const bufs = (node: Record<string, number>): number => (node['Shared Hit Blocks'] ?? 0) + (node['Shared Read Blocks'] ?? 0);
      return { ms: p['Execution Time'], buffers: bufs(p.Plan) };
    };
    const reps = 20;
    const claims = async () => {
      let msStart = 0;
      let msBlocked = 0;
      let bStart = 0;
      let bBlocked = 0;
      for (let r = 0; r < reps; r++) {
        const a = await plan(oldest);
        msStart += a.ms;
        bStart = a.buffers;
        const b = await plan(ids[1].id);
        msBlocked += b.ms;
        bBlocked = b.buffers;
      }
      return { msStart: msStart / reps, bStart, msBlocked: msBlocked / reps, bBlocked };
    };
    // wake_key with the oldest running (no room): what every end of a keyed job pays.
    const wake = async () => {
      await c.query(
        "UPDATE jobs.job SET state = 'running', attempt = 1, lease_owner = 'w', lease_expires_at = now() + interval '1 hour', claimed_at = now() WHERE id = $1",
        [oldest],
      );
      const t = performance.now();
      for (let r = 0; r < reps; r++) {
        await c.query('BEGIN');
        await c.query("SELECT jobs.wake_key('k', 1)");
        await c.query('ROLLBACK');
      }
      await c.query("UPDATE jobs.job SET state = 'pending', attempt = 0, lease_owner = NULL, lease_expires_at = NULL WHERE id = $1", [
        oldest,
      ]);
      return (performance.now() - t) / reps;
    };
    // Just enqueued: every message still on its way, no job blocked yet (the first receives).
    const fresh = await claims();
    const freshWake = await wake();
    // Draining: every job but the oldest blocked, as the worker leaves a key's backlog once it has
    // received each job's message; the oldest was just woken and is claimed.
    await c.query('UPDATE jobs.job SET blocked_since = now() WHERE id <> $1', [oldest]);
    await c.query('VACUUM ANALYZE jobs.job');
    const draining = await claims();
    const drainingWake = await wake();
    c.release();
    await pool.end();
    const r3 = (x: number) => +x.toFixed(3);
    console.log(
      JSON.stringify({
        n,
        claimStartMs: r3(draining.msStart),
        claimStartBuffers: draining.bStart,
        claimBlockedMs: r3(draining.msBlocked),
        claimBlockedBuffers: draining.bBlocked,
        wakeKeyMs: r3(drainingWake),
        justEnqueued: {
          claimStartMs: r3(fresh.msStart),
          claimStartBuffers: fresh.bStart,
          claimBlockedMs: r3(fresh.msBlocked),
          claimBlockedBuffers: fresh.bBlocked,
          wakeKeyMs: r3(freshWake),
        },
      }),
    );
  }
} finally {
  await admin.end();
  await embedded.stop();
}
