// Does what the worker service and the live view run cost more as the job table grows? EXPLAIN
// (ANALYZE, BUFFERS) of each periodic statement (rescuer, reconciler, outbox relay, stuck-job
// count, pruner, live view) and of the claim, on a fresh database per size: N jobs run to the end
// through the in-process worker (real rows, real dead tuples, autovacuum as it happens), then a
// backlog of 3,000 pending jobs, as a drain starts. Issue 16, target 5; the periodic statements'
// index use is a test too (test/runtime/table-growth.test.ts).
//
//   npx tsx bench/table-growth.ts                       # 0, 24,000 and 100,000 finished jobs, embedded PostgreSQL
//   npx tsx bench/table-growth.ts --sizes 0,250000 --pg-url postgres://…/postgres
//   npx tsx bench/table-growth.ts --as-planned          # without the active jobs' plan (store/active-jobs.ts): the before
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startEmbeddedPg, withDatabase } from '../dev/embedded-pg.ts';
import { DEFAULT_JOB_TIMINGS } from '../runtime/config/rules.ts';
import { migrate } from '../runtime/db/migrate.ts';
import { createPool } from '../runtime/db/pool.ts';
import { ledgerPost } from '../runtime/handlers/ledger-post.ts';
import { JobRegistry } from '../runtime/handlers/registry.ts';
import { LIVE_SQL } from '../runtime/live/sql.ts';
import { RECONCILER_LOCK_KEY } from '../runtime/maintenance/reconciler.ts';
import { METRIC } from '../runtime/observability/metric-names.ts';
import { silentLogger } from '../runtime/observability/log.ts';
import { OPS_SQL } from '../runtime/oncall/sql.ts';
import { MemoryQueue } from '../runtime/queue/memory.ts';
import { JobClient } from '../runtime/store/client.ts';
import { Publisher } from '../runtime/store/outbox.ts';
import { ACTIVE_JOBS_PLAN } from '../runtime/store/active-jobs.ts';
import { SQL } from '../runtime/store/sql.ts';
import { Worker } from '../runtime/worker/worker.ts';
import { benchNoop } from './jobs.ts';

const { values: args } = parseArgs({
  options: {
    sizes: { type: 'string', default: '0,24000,100000' },
    'pg-url': { type: 'string' },
    /** Every statement as the planner alone chooses (without the active jobs' plan): the before. */
    'as-planned': { type: 'boolean', default: false },
  },
});
const BACKLOG = 3000;
const registry = new JobRegistry([benchNoop, ledgerPost]);

/** `finished` no-op jobs run to the end by an in-process worker, then a backlog of pending ledger jobs (their messages sent nowhere). */
async function populate(url: string, finished: number): Promise<void> {
  const pool = createPool({ url, max: 14, applicationName: 'bench table-growth' });
  const queue = new MemoryQueue({ visibilityTimeoutSeconds: 60 });
  const publisher = new Publisher(pool, queue, silentLogger);
  if (finished > 0) {
    let done = 0;
    let allDone!: () => void;
    const all = new Promise<void>((r) => (allDone = r));
    const worker = new Worker({
      pool,
      queue,
      dlq: new MemoryQueue({ visibilityTimeoutSeconds: 60 }),
      registry,
      publisher,
      log: silentLogger,
      receiveWaitSeconds: 0.1,
      timings: { ...DEFAULT_JOB_TIMINGS, concurrency: 50 },
      metrics: {
        count: (name, k = 1) => {
          if (name === METRIC.jobsSucceeded && (done += k) >= finished) allDone();
        },
        timing: () => undefined,
      },
    });
    worker.start();
    const client = new JobClient({ pool, registry, publisher, defaultMaxAttempts: 3 });
    for (let i = 0; i < finished; i += 1000)
      await client.enqueueNow(Array.from({ length: Math.min(1000, finished - i) }, () => ({ type: 'bench.noop', payload: {} })));
    await all;
    await worker.stop(0);
  }
  const nowhere = new Publisher(pool, new MemoryQueue({ visibilityTimeoutSeconds: 60 }), silentLogger);
  const backlog = new JobClient({ pool, registry, publisher: nowhere, defaultMaxAttempts: 3 });
  for (let i = 0; i < BACKLOG; i += 500)
    await backlog.enqueueNow(
      Array.from({ length: 500 }, (_, k) => ({ type: 'ledger.post', payload: { batch: `growth-${i + k}`, entries: 5 } })),
    );
  await nowhere.flush();
  await publisher.flush();
  await pool.end();
}

/** Label, statement, parameters, and whether the platform runs it on the active jobs' plan (store/active-jobs.ts). */
const STATEMENTS: [string, string, unknown[], boolean][] = [
  ['rescuer jobRescueExpired', SQL.jobRescueExpired, [10, 100], true],
  ['reconciler reconcileCount', SQL.reconcileCount, [RECONCILER_LOCK_KEY, ['bulk', 'urgent']], true],
  ['reconciler jobRepublishLost', SQL.jobRepublishLost, [61, 240, 1000, ['bulk', 'urgent']], true],
  ['relay outboxLeaseDue', SQL.outboxLeaseDue, [2, 100, true, [], 30, []], false],
  ['stuck stuckJobCount', OPS_SQL.stuckJobCount, [[], [], 3600, 900], true],
  ['pruner jobPrune', SQL.jobPrune, [500, 30], false],
  ['live jobCountActive', SQL.jobCountActive, [], true],
  ['live jobCountByState', SQL.jobCountByState, [], false],
  ['live leases', LIVE_SQL.leases, [200], true],
  ['live waitingGroups', SQL.waitingGroups, [10], true],
];

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  Plans?: PlanNode[];
}
const scans = (n: PlanNode): string[] => [
  ...(n['Relation Name'] === 'job' || n['Index Name']?.startsWith('job_')
    ? [`${n['Node Type']}${n['Index Name'] ? ` ${n['Index Name']}` : ''} (${n['Actual Rows']} rows)`]
    : []),
  ...(n.Plans ?? []).flatMap(scans),
];

async function main(): Promise<void> {
  let adminUrl = args['pg-url'];
  let stop: (() => Promise<void>) | null = null;
  if (!adminUrl) {
    const embedded = await startEmbeddedPg({ durable: true });
    adminUrl = embedded.url;
    stop = () => embedded.stop();
  }
  try {
    for (const n of args.sizes!.split(',').map(Number)) {
      const name = `bench_growth_${n}`;
      const admin = new pg.Client({ connectionString: adminUrl });
      await admin.connect();
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.query(`CREATE DATABASE ${name}`);
      const url = withDatabase(adminUrl, name);
      const setup = createPool({ url, max: 1, applicationName: 'bench table-growth' });
      await migrate(setup);
      await setup.query('VACUUM ANALYZE');
      await setup.end();
      const t0 = performance.now();
      await populate(url, n);
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      const st = (
        await c.query(
          "SELECT n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count, pg_relation_size('jobs.job') / 8192 AS pages FROM pg_stat_user_tables WHERE relid = 'jobs.job'::regclass",
        )
      ).rows[0];
      process.stdout.write(
        `\n${n.toLocaleString('en-US')} finished + ${BACKLOG.toLocaleString('en-US')} pending (populated in ${((performance.now() - t0) / 1000).toFixed(0)} s): jobs.job ${st.pages} pages, ${st.n_live_tup} live and ${st.n_dead_tup} dead tuples, autovacuum ${st.autovacuum_count}×, autoanalyze ${st.autoanalyze_count}×\n`,
      );
      const ids = (
        await c.query("SELECT array_agg(id ORDER BY id) AS ids FROM (SELECT id FROM jobs.job WHERE state = 'pending' LIMIT 10) s")
      ).rows[0].ids;
      for (const [label, text, params, active] of [
        ...STATEMENTS,
        ['worker jobClaim (10 ids)', SQL.jobClaim, [ids, 'w', 30], false] as const,
      ]) {
        await c.query('BEGIN');
        if (active && !args['as-planned']) await c.query(ACTIVE_JOBS_PLAN);
        await c.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`, params as unknown[]); // warm
        const plan = (await c.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`, params as unknown[])).rows[0]['QUERY PLAN'][0];
        await c.query('ROLLBACK');
        const top = plan.Plan as PlanNode;
        process.stdout.write(
          `  ${label.padEnd(28)} ${(plan['Execution Time'] as number).toFixed(2).padStart(8)} ms ${String(top['Shared Hit Blocks'] + top['Shared Read Blocks']).padStart(6)} buffers  ${scans(top).join('; ')}\n`,
        );
      }
      await c.end();
      await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
      await admin.end();
    }
  } finally {
    await stop?.();
  }
}

await main();
