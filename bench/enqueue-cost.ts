// What one enqueue costs: the time of BEGIN, JobClient.enqueue, COMMIT on one connection, and
// the WAL it writes, for the shapes an ERP uses: no idempotency key, a key of a type whose keys
// are unique among active jobs only (inventory.cost), a key of a type whose keys outlive the job
// (ledger.post, issue 15), the duplicate enqueue of such a key, and a batch of 500 in one
// transaction. An embedded PostgreSQL, not durable by default (the statement's cost, not
// fsync's; --durable for the commit as production pays it). Nothing is published: the outbox
// rows stay, as if the relay were slow.
//
//   npx tsx bench/enqueue-cost.ts [--jobs 2000] [--durable]
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startEmbeddedPg, withDatabase } from '../dev/embedded-pg.ts';
import { migrate } from '../runtime/db/migrate.ts';
import { defaultRegistry } from '../runtime/handlers/index.ts';
import { silentLogger } from '../runtime/observability/log.ts';
import { MemoryQueue } from '../runtime/queue/memory.ts';
import { JobClient, type EnqueueSpec } from '../runtime/store/client.ts';
import { Publisher } from '../runtime/store/outbox.ts';

const { values } = parseArgs({ options: { jobs: { type: 'string', default: '2000' }, durable: { type: 'boolean' } } });
const n = Number(values.jobs);

const embedded = await startEmbeddedPg({ durable: values.durable ?? false });
const admin = new pg.Client({ connectionString: embedded.url });
await admin.connect();
await admin.query('CREATE DATABASE enqueue_cost');
const pool = new pg.Pool({ connectionString: withDatabase(embedded.url, 'enqueue_cost'), max: 2 });
pool.on('error', () => undefined);
await migrate(pool);
const queue = new MemoryQueue({ visibilityTimeoutSeconds: 30 });
const client = new JobClient({
  pool,
  registry: defaultRegistry(),
  publisher: new Publisher(pool, queue, silentLogger),
  defaultMaxAttempts: 5,
});

const lsn = async () => (await admin.query<{ l: string }>('SELECT pg_current_wal_lsn()::text AS l')).rows[0]!.l;
const walSince = async (from: string) =>
  Number((await admin.query<{ b: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint AS b', [from])).rows[0]!.b);

/** `count` transactions of `perTx` jobs each: the least, median and p99 time per transaction (on a busy machine the least says most), and WAL bytes per job. */
async function measure(name: string, count: number, spec: (i: number) => EnqueueSpec, perTx = 1) {
  const c = await pool.connect();
  c.on('error', () => undefined);
  const times: number[] = [];
  try {
    // Warm up: prepared statements, caches.
    for (let i = 0; i < 50; i++) {
      await c.query('BEGIN');
      await client.enqueue(c, spec(-1 - i));
      await c.query('ROLLBACK');
    }
    const from = await lsn();
    for (let i = 0; i < count; i++) {
      const t0 = process.hrtime.bigint();
      await c.query('BEGIN');
      await client.enqueue(
        c,
        Array.from({ length: perTx }, (_, k) => spec(i * perTx + k)),
      );
      await c.query('COMMIT');
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    const wal = await walSince(from);
    times.sort((a, b) => a - b);
    const q = (p: number) => times[Math.min(times.length - 1, Math.floor(p * times.length))]!;
    console.log(
      `${name.padEnd(40)} min ${times[0]!.toFixed(3).padStart(8)} ms  median ${q(0.5).toFixed(3).padStart(8)} ms  p99 ${q(0.99).toFixed(3).padStart(8)} ms  ${Math.round(
        wal / (count * perTx),
      )
        .toString()
        .padStart(6)} WAL bytes/job`,
    );
  } finally {
    c.release();
  }
}

const ledger = (i: number) => ({ type: 'ledger.post', payload: { batch: `B-${i}`, entries: 3 } });
const costing = (i: number) => ({ type: 'inventory.cost', payload: { store: `S-${i}`, period: '2026-11' } });
console.log(`${n} transactions each, PostgreSQL ${values.durable ? 'durable' : 'not durable (fsync off)'}; per transaction:`);
await measure('no key (ledger.post)', n, ledger);
await measure('key, active jobs only (inventory.cost)', n, (i) => ({ ...costing(i), idempotencyKey: `cost-${i}` }));
await measure('key of ledger.post', n, (i) => ({ ...ledger(i), idempotencyKey: `post-${i}` }));
// Every enqueue repeats a key the previous step committed.
await measure('duplicate key of ledger.post', n, (i) => ({ ...ledger(Math.max(i, 0)), idempotencyKey: `post-${Math.max(i, 0)}` }));
await measure(
  'batch of 500, keys of ledger.post',
  Math.max(1, Math.round(n / 100)),
  (i) => ({ ...ledger(i), idempotencyKey: `batch-${i}` }),
  500,
);

await pool.end();
await admin.end();
queue.close();
await embedded.stop();
