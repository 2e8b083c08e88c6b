// The deployed shape (`npm run bench -- --workers 1,2,4,8`): separate worker processes, as ECS
// runs them (bench/worker-child.ts: the worker service, production log level, configuration from
// the environment), draining a backlog already in the queue, against one PostgreSQL: once just
// started (cold), then, with `refill`, a second backlog with the same processes (warm).
//
// What is measured, and how:
//  - throughput: the jobs that finished after the last worker said it was ready (warm: after
//    the processes were thawed), over the time from that moment to the last job's finished_at
//    (the database's clock), so process start-up (loading the code, opening the pool) is not
//    counted but everything after it is;
//  - the drain in tenths: each tenth's rate, so a slowdown as the drain goes on shows, and the
//    steady rate, from the 10th to the 90th percent of the jobs (the in-bench drains' measure);
//  - worker CPU per 1,000 jobs: every worker process's user + system time from /proc over the
//    same span, and PostgreSQL's (every server process, when the server is local);
//  - database connections: the most the workers held at once (pg_stat_activity, sampled);
//  - SQS calls per job: counted by the benchmark's proxy over the whole drain.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import pg from 'pg';
import { ACTIVE_JOBS_PLAN } from '../runtime/store/active-jobs.ts';
import { processCpuSeconds } from './pg-cost.ts';
import type { LocalSqsEndpoint } from './sqs-local.ts';
import { callsBetween, proxyCalls } from './sqs-proxy.ts';

export interface DrainResult {
  workers: number;
  concurrency: number;
  /** Jobs of the drain (pending when the workers started). */
  jobs: number;
  /** Rows in jobs.job when the drain started (earlier rounds' jobs included). */
  tableRows: number;
  perSec: number;
  /**
   * The rate between the 10th and the 90th percent of the jobs, as the in-bench drains report it:
   * a fresh process runs its first jobs in V8's interpreter and baseline tiers (the first tenth
   * of a 5,000-job drain at a third of the later ones), which a task running for hours pays once.
   */
  steadyPerSec: number;
  /** Rate in each tenth of the jobs finished after the workers were ready (NaN: the tenth finished at one instant). */
  tenths: number[];
  /** From the first spawn to the last worker ready. */
  startMs: number;
  windowJobs: number;
  windowSeconds: number;
  workerCpuSecondsPer1000: number;
  /** PostgreSQL's CPU over the same span (null: the server is not local). */
  pgCpuSecondsPer1000: number | null;
  /**
   * Jobs of the drain that took more than one claim: a job handed back (a stopping worker, or
   * jobs claimed ahead handed to idle peers) and claimed again, or a failed attempt retried.
   */
  retried: number;
  /**
   * How those claims came about, from each job's row (a job can count in several): `released`, a
   * worker handed it back unstarted or stopped (releases); `leaseRanOut`, an attempt ended with no
   * record, so its lease expired and another claim took the job (the owner stalled past its
   * lease); `rescued`, the rescuer re-queued it; `failed`, an attempt failed and was retried.
   */
  retriedBy: { released: number; leaseRanOut: number; rescued: number; failed: number };
  /** The most connections the worker processes held at once. */
  connectionsPeak: number;
  sqsCallsPerJob: number;
  sqsCalls: Record<string, number>;
}

/** A worker process's CPU seconds so far (0 once it is gone). */
const cpuSeconds = (pid: number): number => processCpuSeconds(pid) ?? 0;

/** The environment of a worker process on the benchmark's database and local SQS endpoint, as the stack sets it. */
export function workerEnv(o: {
  url: string;
  sqs: LocalSqsEndpoint;
  /** The urgent lane on its own queue, as deployed (else it shares the bulk queue). */
  urgentQueue: boolean;
  concurrency: number;
  logLevel: string;
}): Record<string, string> {
  return {
    DATABASE_URL: o.url,
    JOBS_QUEUE_URL: o.sqs.queueUrl,
    JOBS_DLQ_URL: o.sqs.dlqUrl,
    ...(o.urgentQueue ? { JOBS_URGENT_QUEUE_URL: o.sqs.urgentQueueUrl, JOBS_URGENT_DLQ_URL: o.sqs.urgentDlqUrl } : {}),
    JOBS_SQS_ENDPOINT: o.sqs.endpoint,
    AWS_REGION: 'us-east-1',
    JOBS_CONCURRENCY: String(o.concurrency),
    // As the stack sets them (lib/config.ts): the queue's visibility timeout is the child's 60 s.
    JOBS_VISIBILITY_TIMEOUT_SECONDS: '60',
    LOG_LEVEL: o.logLevel,
    AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
  };
}

/** Start `n` worker processes; resolves when every one has logged that it started. */
export async function startWorkers(
  n: number,
  env: Record<string, string>,
): Promise<{ children: ChildProcess[]; ready: Promise<void>; exited: Promise<unknown>[]; stop: () => void }> {
  const children: ChildProcess[] = [];
  const readies: Promise<void>[] = [];
  const exited: Promise<unknown>[] = [];
  for (let i = 0; i < n; i++) {
    const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'worker-child.ts')], {
      env: { ...process.env, ...env, JOBS_WORKER_ID: `bench-worker-${i + 1}` },
      stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
    });
    children.push(child);
    exited.push(new Promise((r) => child.once('exit', r)));
    // The log goes where ECS sends it (a pipe read by the log driver); here it is read and dropped.
    child.stdout!.resume();
    readies.push(
      new Promise<void>((resolve, reject) => {
        child.on('message', (m) => {
          if (m === 'ready') resolve();
        });
        child.once('exit', (code) => reject(new Error(`worker process ${i + 1} exited with ${code} before it was ready`)));
      }),
    );
  }
  // SIGTERM (graceful), and SIGCONT for a frozen one. Also when this process exits first (Ctrl-C,
  // a failure): they must not outlive it, nor stay frozen holding connections.
  const stop = () => {
    for (const c of children) {
      c.kill('SIGTERM');
      c.kill('SIGCONT');
    }
  };
  process.once('exit', stop);
  void Promise.all(exited).then(() => process.off('exit', stop));
  return { children, ready: Promise.all(readies).then(() => undefined), exited, stop };
}

export interface DeployedDrains {
  /** Processes started with the backlog already queued: a deploy in the middle of a backlog. */
  cold: DrainResult;
  /**
   * The same processes, after that drain, given a second backlog of the same size: a task that
   * has been running (connections open, code compiled by V8's optimizing tier), which is what
   * ECS runs for hours and what the in-bench drains (one long-lived process) compare with.
   * null without `refill`.
   */
  warm: DrainResult | null;
}

/**
 * Drain what the queue holds with `workers` worker processes of `concurrency` each, then, with
 * `refill`, a second backlog with the same processes; resolves when no job is pending or running,
 * the processes stopped (SIGTERM, graceful).
 *
 * The processes are frozen (SIGSTOP) while `refill` enqueues the second backlog and thawed
 * (SIGCONT) once it is all queued: the backlog is there at once, as it was for the first drain,
 * and the enqueue's CPU does not compete with the drain it precedes. A frozen process loses
 * nothing: a receive answered meanwhile waits in its socket, its jobs' leases (30 s) and the
 * messages' visibility (60 s) outlast the second or two the enqueue takes.
 */
export async function drainWithWorkers(opts: {
  url: string;
  sqs: LocalSqsEndpoint;
  urgentQueue: boolean;
  workers: number;
  concurrency: number;
  logLevel: string;
  refill?: () => Promise<void>;
  /** PostgreSQL's CPU seconds so far (CostMeter.pgCpuSeconds). */
  pgCpu: () => Promise<number | null>;
}): Promise<DeployedDrains> {
  const db = new pg.Client({ connectionString: opts.url, application_name: 'bench drain' });
  db.on('error', () => undefined);
  await db.connect();
  const pending = async () =>
    (await db.query('SELECT count(*) FILTER (WHERE finished_at IS NULL)::int AS jobs, count(*)::int AS total FROM jobs.job')).rows[0] as {
      jobs: number;
      total: number;
    };
  const before = await pending();
  const calls0 = await proxyCalls(opts.sqs.endpoint);
  const t0 = performance.now();
  const { children, ready, exited, stop } = await startWorkers(opts.workers, workerEnv(opts));
  try {
    await ready;
    const startMs = performance.now() - t0;
    const cold = await measure(db, children, opts, { calls0, before, startMs });
    if (!opts.refill) return { cold, warm: null };
    for (const c of children) c.kill('SIGSTOP');
    await opts.refill();
    const again = await pending();
    const calls1 = await proxyCalls(opts.sqs.endpoint);
    // Thawed once the CPU counters are read.
    const thaw = () => {
      for (const c of children) c.kill('SIGCONT');
    };
    const warm = await measure(db, children, opts, { calls0: calls1, before: again, startMs: 0, go: thaw });
    return { cold, warm };
  } finally {
    // A frozen process (refill failed) gets its SIGTERM only once thawed.
    stop();
    await Promise.all(exited);
    await db.end();
  }
}

/**
 * Read the baselines (the processes' CPU, PostgreSQL's, the clock), then `go` (thaw the
 * processes), wait until no job is pending or running, and give the figures for the jobs that
 * finished after the baselines were read.
 */
async function measure(
  db: pg.Client,
  children: ChildProcess[],
  opts: { sqs: LocalSqsEndpoint; workers: number; concurrency: number; pgCpu: () => Promise<number | null> },
  at: { calls0: Record<string, number>; before: { jobs: number; total: number }; startMs: number; go?: () => void },
): Promise<DrainResult> {
  const { calls0, before, startMs } = at;
  const cpu0 = children.map((c) => cpuSeconds(c.pid!));
  const pg0 = await opts.pgCpu();
  const readyAt = (await db.query('SELECT clock_timestamp() AS t')).rows[0].t as Date;
  at.go?.();
  let connectionsPeak = 0;
  for (;;) {
    // On the active jobs' plan, as the platform's own periodic reads (store/active-jobs.ts): a
    // count every 200 ms through the dead entries of job_active cost PostgreSQL up to 18 ms a
    // time by the fourth round of a soak, CPU the drain it measures competes for.
    await db.query('BEGIN');
    await db.query(ACTIVE_JOBS_PLAN);
    const { rows } = await db.query(
      `SELECT EXISTS (SELECT 1 FROM jobs.job WHERE finished_at IS NULL) AS active,
              (SELECT count(*)::int FROM pg_stat_activity WHERE application_name LIKE 'jobs-worker%') AS connections`,
    );
    await db.query('COMMIT');
    connectionsPeak = Math.max(connectionsPeak, rows[0].connections);
    if (!rows[0].active) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const cpu = children.reduce((s, c, i) => s + cpuSeconds(c.pid!) - cpu0[i]!, 0);
  const pg1 = await opts.pgCpu();
  const calls = callsBetween(calls0, await proxyCalls(opts.sqs.endpoint));
  const { rows } = await db.query(
    `SELECT extract(epoch FROM finished_at - $1::timestamptz)::float8 AS s, attempt <> 1 AS again,
            releases > 0 AS released,
            attempt - 1 > jsonb_array_length(attempt_log) AS lease_ran_out,
            attempt_log @> '[{"outcome": "rescued"}]' AS rescued,
            attempt_log @> '[{"outcome": "retry"}]' AS failed
       FROM jobs.job
      WHERE finished_at > $1 ORDER BY finished_at`,
    [readyAt],
  );
  const secs = rows.map((r) => r.s as number);
  const retried = rows.filter((r) => r.again).length;
  const count = (k: string) => rows.filter((r) => r[k]).length;
  const retriedBy = {
    released: count('released'),
    leaseRanOut: count('lease_ran_out'),
    rescued: count('rescued'),
    failed: count('failed'),
  };
  const windowSeconds = secs.at(-1) ?? 0;
  const tenths: number[] = [];
  for (let k = 0; k < 10 && secs.length >= 10; k++) {
    const from = k === 0 ? 0 : secs[Math.floor((k * secs.length) / 10) - 1]!;
    const to = secs[Math.floor(((k + 1) * secs.length) / 10) - 1]!;
    // A tenth whose jobs all finished in one batched completion has no span (one timestamp): no rate.
    tenths.push(to > from ? secs.length / 10 / (to - from) : Number.NaN);
  }
  return {
    workers: opts.workers,
    concurrency: opts.concurrency,
    jobs: before.jobs,
    tableRows: before.total,
    perSec: secs.length / Math.max(windowSeconds, 1e-6),
    steadyPerSec:
      secs.length >= 10
        ? (0.8 * secs.length) / Math.max(secs[Math.floor(0.9 * secs.length) - 1]! - secs[Math.floor(0.1 * secs.length) - 1]!, 1e-6)
        : 0,
    tenths,
    startMs,
    windowJobs: secs.length,
    windowSeconds,
    workerCpuSecondsPer1000: (cpu / Math.max(secs.length, 1)) * 1000,
    pgCpuSecondsPer1000: pg0 !== null && pg1 !== null ? ((pg1 - pg0) / Math.max(secs.length, 1)) * 1000 : null,
    connectionsPeak,
    retried,
    retriedBy,
    sqsCallsPerJob: calls.total / Math.max(before.jobs, 1),
    sqsCalls: calls.byOp,
  };
}
