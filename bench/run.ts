// The platform's benchmark (`npm run bench`): throughput through the full path — enqueue,
// publish, claim, heartbeat, fenced completion — at several worker concurrencies, over the
// in-process transport (the platform alone) and the local SQS endpoint; what each job costs
// PostgreSQL (commits, WAL bytes); enqueue→start latency under a steady load; kill -9 → resumption
// time; worker CPU per 1,000 jobs. Durable PostgreSQL (fsync and synchronous_commit on).
// Figures are medians of --runs runs with their range. A benchmark, not a test: it fails only
// when the platform does something wrong (a lost or doubled job), never on a number.
//
//   npm run bench                                 # defaults: 20,000 jobs, 3 runs, c = 1, 10, 50
//   npm run bench -- --runs 1 --jobs 5000 --concurrency 10 --transports memory
//   npm run bench -- --peers                      # also run ../shared/bench/peers on the same PostgreSQL
//   npm run bench -- --profile                    # WAL per statement (pg_stat_statements), a CPU and an allocation profile of the process phase, its GC pauses
//   npm run bench -- --keys 0,1,10                # keyed no-op jobs (limit 1 per key) over that many keys, 0 = unkeyed, same run
//   npm run bench -- --key-backlog 500,2000       # one key with N jobs waiting: does a key's backlog slow its claims?
//   npm run bench -- --sqs-latency-ms 0,15        # every SQS call 15 ms slower (a delaying proxy), beside 0 ms
//   npm run bench -- --workers 1,2,4,8            # also separate worker processes, as deployed (bench/deployed.ts), --worker-concurrency 10
//   npm run bench -- --matrix false --transports sqs --latency-shapes process   # enqueue → start with a separate worker process working
//   npm run bench -- --matrix false --transports sqs --latency-sqs-ms 0,15      # enqueue → start with every SQS call 15 ms slower too
//   npm run bench -- --workers 1 --rounds 4 --warm false   # consecutive drains on one database, new processes each: does the platform slow as tables grow?
//   npm run bench -- --workers 1 --rounds 4 --matrix false --warm false --profile   # only the drains, with each drain's statements by time

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { JobClient } from '../runtime/store/client.ts';
import { DEFAULT_JOB_TIMINGS, workerPoolSize, type JobTimings } from '../runtime/config/rules.ts';
import { migrate } from '../runtime/db/migrate.ts';
import { createPool, warmPool } from '../runtime/db/pool.ts';
import { parseJobMessage } from '../runtime/queue/message.ts';
import { ledgerPost } from '../runtime/handlers/ledger-post.ts';
import { JobRegistry } from '../runtime/handlers/registry.ts';
import { defineJob } from '../runtime/handlers/types.ts';
import { benchNoop } from './jobs.ts';
import { drainWithWorkers, startWorkers, workerEnv, type DrainResult } from './deployed.ts';
import { callsBetween, proxyCalls } from './sqs-proxy.ts';
import { type LoopStats, loopStats } from './loop-stats.ts';
import { laneQueues, startSqsChild, warmQueue, type LocalSqsEndpoint } from './sqs-local.ts';
import { METRIC } from '../runtime/observability/metric-names.ts';
import { startEmbeddedPg, withDatabase } from '../dev/embedded-pg.ts';
import { silentLogger } from '../runtime/observability/log.ts';
import { MemoryQueue } from '../runtime/queue/memory.ts';
import { SqsQueue } from '../runtime/queue/sqs.ts';
import type { JobQueue } from '../runtime/queue/types.ts';
import { Publisher } from '../runtime/store/outbox.ts';
import { Worker } from '../runtime/worker/worker.ts';
import { profileCpu } from './cpu-profile.ts';
import { CostMeter, type Cost, processCpuSeconds } from './pg-cost.ts';
import { runPeers, type PeerRow } from './peers.ts';

// Known and only noise here (the images run Node 22): the AWS SDK's Node 22 notice, off for this process and its children.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const { values: args } = parseArgs({
  options: {
    jobs: { type: 'string', default: '20000' },
    runs: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '1,10,50' },
    transports: { type: 'string', default: 'memory,sqs' },
    kinds: { type: 'string', default: 'noop,ledger' },
    'latency-seconds': { type: 'string', default: '10' },
    rate: { type: 'string', default: '200' },
    /**
     * Milliseconds added to every SQS call in the latency runs, comma-separated values each measured
     * (a delaying proxy that also counts the calls); 0, the default, is the endpoint itself.
     */
    'latency-sqs-ms': { type: 'string', default: '0' },
    /** Who works in the latency runs: in-bench (the benchmark's process), process (a separate worker process, SQS only), or both. */
    'latency-shapes': { type: 'string', default: 'in-bench,process' },
    kills: { type: 'string', default: '3' },
    'pg-url': { type: 'string' },
    peers: { type: 'boolean', default: false },
    profile: { type: 'boolean', default: false },
    out: { type: 'string' },
    /** Comma-separated JOBS_PREFETCH values to measure; empty = the worker's default (= concurrency). */
    prefetch: { type: 'string', default: '' },
    // Concurrency keys (issue 14): no-op jobs spread over K keys with limit 1 each (0 = no key, the
    // baseline), in-process transport, at --keyed-concurrency, --keyed-jobs per run. Fewer jobs than
    // the matrix: one key runs its jobs one after the other. Empty --keys skips the section.
    keys: { type: 'string', default: '0,1,10,100' },
    'keyed-jobs': { type: 'string', default: '1000' },
    'keyed-concurrency': { type: 'string', default: '10' },
    /** Comma-separated backlogs: one key, limit 1, N jobs enqueued at once (off by default). */
    'key-backlog': { type: 'string', default: '' },
    /** Milliseconds the proxy in front of the local SQS endpoint adds to every call; comma-separated values are each measured. */
    'sqs-latency-ms': { type: 'string', default: '0' },
    /** Comma-separated counts of separate worker processes (the deployed shape) to drain each backlog; empty skips it. */
    workers: { type: 'string', default: '' },
    /** Consecutive drains of --jobs jobs on one database and queue, fresh worker processes each (with --workers), each followed by a warm drain of --jobs more by the same processes. */
    rounds: { type: 'string', default: '1' },
    /** `--warm false`: no second (warm) drain by the same worker processes after each cold one (with --profile, the statements then are the cold drain's alone). */
    warm: { type: 'string', default: 'true' },
    /** JOBS_CONCURRENCY of each worker process (--workers); default 10, the production default. */
    'worker-concurrency': { type: 'string', default: '10' },
    /** SQS delay for the worker-process drains; default the largest of --sqs-latency-ms. */
    'worker-sqs-latency-ms': { type: 'string' },
    /** The worker processes' LOG_LEVEL (production: info). */
    'worker-log-level': { type: 'string', default: 'info' },
    /**
     * `--urgent-queue false`: the urgent lane shares the bulk queue (JOBS_URGENT_QUEUE_URL unset).
     * By default every SQS shape has a queue per lane, as the stack deploys them: the workers
     * receive lane by lane (runtime/worker/lane-choice.ts), the benchmark's jobs in the bulk lane.
     */
    'urgent-queue': { type: 'string', default: 'true' },
    /** `--matrix false` skips the in-bench drains (the first table), e.g. to measure only --workers rounds. */
    matrix: { type: 'string', default: 'true' },
  },
});

const N = Number(args.jobs);
const RUNS = Number(args.runs);
const CONCURRENCIES = args.concurrency!.split(',').map(Number);
const TRANSPORTS = args.transports!.split(',') as ('memory' | 'sqs')[];
const KINDS = args.kinds!.split(',') as ('noop' | 'ledger')[];
const PREFETCHES: (number | null)[] = args.prefetch ? args.prefetch.split(',').map(Number) : [null];
const KEYS = args.keys ? args.keys.split(',').map(Number) : [];
const KEYED_N = Number(args['keyed-jobs']);
const KEYED_C = Number(args['keyed-concurrency']);
const KEY_BACKLOGS = args['key-backlog'] ? args['key-backlog'].split(',').map(Number) : [];
const SQS_LATENCIES = args['sqs-latency-ms']!.split(',').map(Number);
const LATENCY_SQS_MS = args['latency-sqs-ms']!.split(',').map(Number);
const LATENCY_SHAPES = args['latency-shapes']!.split(',').map((x) => x.trim()) as ('in-bench' | 'process')[];
for (const x of LATENCY_SHAPES)
  if (x !== 'in-bench' && x !== 'process') throw new Error(`--latency-shapes: "${x}" is neither in-bench nor process`);
const WORKERS = args.workers ? args.workers.split(',').map(Number) : [];
const ROUNDS = Number(args.rounds);
const WORKER_C = Number(args['worker-concurrency']);
const URGENT_QUEUE = args['urgent-queue'] !== 'false';
const WORKER_DELAY = args['worker-sqs-latency-ms'] !== undefined ? Number(args['worker-sqs-latency-ms']) : Math.max(...SQS_LATENCIES);
const log = (s: string) => process.stderr.write(`${s}\n`);

// Timings for the benchmark: production-like lease and heartbeat.
const TIMINGS: JobTimings = {
  ...DEFAULT_JOB_TIMINGS,
  leaseSeconds: 30,
  heartbeatSeconds: 5,
  visibilityTimeoutSeconds: 60,
  maxAttempts: 3,
  maxReceiveCount: 10,
};

let onStart: ((seq: number) => void) | null = null;
const probe = defineJob<{ seq: number }, null>({
  type: 'bench.probe',
  description: 'records when it started',
  parse: (p) => p as { seq: number },
  run: async (p) => {
    onStart?.(p.seq);
    return null;
  },
});
const registry = new JobRegistry([benchNoop, probe, ledgerPost]);

/** One drain by separate worker processes (bench/deployed.ts). */
type Drain = DrainResult & {
  kind: string;
  sqsLatencyMs: number;
  round: number;
  /** cold: processes started with the backlog queued; warm: the same processes' second drain. */
  phase: 'cold' | 'warm';
};

interface Sample {
  kind: string;
  /** Concurrency keys the jobs were spread over (limit 1 each); 0 = no key. */
  keys: number;
  prefetch: number;
  transport: string;
  /** Milliseconds added to every SQS call (local SQS only). */
  sqsLatencyMs: number;
  /** SQS calls per job in the process phase (local SQS only). */
  sqsCallsPerJob: number | null;
  sqsCalls: Record<string, number> | null;
  concurrency: number;
  jobs: number;
  enqueuePerSec: number;
  processPerSec: number;
  /** The rate between the 10th and the 90th percent of the drain: without the worker's start and the last stragglers. */
  steadyPerSec: number;
  /** Each tenth of the drain's rate, jobs/s, first to last; and when the first job succeeded, ms after the worker started. */
  tenths: number[];
  firstMs: number;
  commitsPerJob: number;
  walBytesPerJob: number;
  enqueueCost: Cost;
  processCost: Cost;
  cpuSecondsPer1000: number;
  /** The part of cpuSecondsPer1000 spent in the kernel (system time): socket writes and, on loopback, the receiver's TCP work. */
  kernelCpuSecondsPer1000: number;
  /** PostgreSQL's CPU in the process phase, when the server is local (the enqueue's is in enqueueCost). */
  pgCpuSecondsPer1000: number | null;
  /** The local SQS endpoint's process (emulator and delaying proxy) in the process phase: CPU the worker's calls cost on the same cores. */
  endpointCpuSecondsPer1000: number | null;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};

async function freshDb(adminUrl: string, name: string): Promise<string> {
  const c = new pg.Client({ connectionString: adminUrl });
  await c.connect();
  await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await c.query(`CREATE DATABASE ${name}`);
  await c.end();
  const url = withDatabase(adminUrl, name);
  const pool = createPool({ url, max: 1, applicationName: 'bench setup' });
  await migrate(pool);
  // Like the peer harness: settle the catalogs so autovacuum has nothing to do mid-window.
  await pool.query('VACUUM ANALYZE');
  await pool.query('CHECKPOINT');
  await pool.end();
  return url;
}

function spec(kind: 'noop' | 'ledger', i: number, keys: number) {
  const job = kind === 'noop' ? { type: 'bench.noop', payload: {} } : { type: 'ledger.post', payload: { batch: `bench-${i}`, entries: 5 } };
  // Round robin, so every key has a backlog from the start.
  return keys > 0 ? { ...job, concurrencyKey: `bench:key-${i % keys}` } : job;
}

/** Enqueue `n` jobs, numbered from `from` (a ledger batch's name), in transactions of 500. */
async function enqueueAll(url: string, queue: JobQueue, kind: 'noop' | 'ledger', n: number, keys: number, from = 0): Promise<number> {
  const pool = createPool({ url, max: 2, applicationName: 'bench enqueue' });
  const publisher = new Publisher(pool, queue, silentLogger, { deleteBatchDelayMs: 50 });
  const client = new JobClient({ pool, registry, publisher, defaultMaxAttempts: TIMINGS.maxAttempts });
  const t0 = performance.now();
  const batch = 500;
  for (let i = 0; i < n; i += batch) {
    const c = await pool.connect();
    let after: () => Promise<void>;
    try {
      await c.query('BEGIN');
      const r = await client.enqueue(
        c,
        Array.from({ length: Math.min(batch, n - i) }, (_, k) => spec(kind, from + i + k, keys)),
      );
      await c.query('COMMIT');
      after = r.afterCommit;
    } finally {
      c.release();
    }
    await after();
  }
  await publisher.flush();
  const seconds = (performance.now() - t0) / 1000;
  await pool.end();
  return n / seconds;
}

async function processAll(
  url: string,
  queue: JobQueue,
  dlq: JobQueue,
  n: number,
  concurrency: number,
  prefetch: number | null,
): Promise<{ perSec: number; steadyPerSec: number; tenths: number[]; firstMs: number; cpuSeconds: number; kernelCpuSeconds: number }> {
  const pool = createPool({ url, max: workerPoolSize(concurrency), applicationName: 'bench worker' });
  let done = 0;
  // When each tenth of the drain ended (and the first job): where a drain's time goes, start to
  // end; the steady rate is between the first tenth's end and the ninth's.
  const tenthEnds: number[] = [];
  let firstAt = 0;
  let resolveDone!: () => void;
  const allDone = new Promise<void>((r) => (resolveDone = r));
  const worker = new Worker({
    pool,
    queue,
    dlq,
    registry,
    publisher: new Publisher(pool, queue, silentLogger),
    timings: { ...TIMINGS, concurrency },
    log: silentLogger,
    receiveWaitSeconds: 1,
    ...(prefetch !== null ? { prefetch } : {}),
    // Counted through the metrics sink the worker feeds anyway (no event objects per job).
    metrics: {
      count: (name, k = 1) => {
        if (name !== METRIC.jobsSucceeded) return;
        done += k;
        if (firstAt === 0) firstAt = performance.now();
        while (tenthEnds.length < 10 && done >= ((tenthEnds.length + 1) * n) / 10) tenthEnds.push(performance.now());
        if (done >= n) resolveDone();
      },
      timing: () => undefined,
    },
  });
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  worker.start();
  await allDone;
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  await worker.stop(0);
  await pool.end();
  return {
    perSec: n / seconds,
    steadyPerSec: (0.8 * n * 1000) / (tenthEnds[8]! - tenthEnds[0]!),
    tenths: tenthEnds.map((t, i) => (n / 10 / (t - (i === 0 ? t0 : tenthEnds[i - 1]!))) * 1000),
    firstMs: firstAt - t0,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    kernelCpuSeconds: cpu.system / 1e6,
  };
}

async function verify(url: string, kind: 'noop' | 'ledger', n: number): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  const { rows } = await c.query(
    "SELECT count(*) FILTER (WHERE state = 'succeeded')::int AS ok, count(*) FILTER (WHERE attempt <> 1)::int AS retried, count(*)::int AS total FROM jobs.job",
  );
  const ledger =
    kind === 'ledger'
      ? (await c.query('SELECT count(*)::int AS n, count(DISTINCT (job_id, line_no))::int AS d FROM ledger_entries')).rows[0]
      : null;
  await c.end();
  const r = rows[0];
  if (r.ok !== n || r.total !== n) throw new Error(`benchmark run wrong: ${r.ok}/${n} succeeded of ${r.total}`);
  if (ledger && (ledger.n !== n * 5 || ledger.d !== n * 5))
    throw new Error(`ledger wrong: ${ledger.n} rows, ${ledger.d} distinct, expected ${n * 5}`);
  if (r.retried > 0) log(`  note: ${r.retried} jobs needed more than one attempt`);
}

async function throughput(
  adminUrl: string,
  dbName: string,
  meter: CostMeter,
  kind: 'noop' | 'ledger',
  transport: 'memory' | 'sqs',
  concurrency: number,
  prefetch: number | null,
  profileTo: string | null,
  { n = N, keys = 0, sqsLatencyMs = 0 }: { n?: number; keys?: number; sqsLatencyMs?: number } = {},
): Promise<Sample> {
  const url = await freshDb(adminUrl, dbName);
  let queue: JobQueue;
  let dlq: JobQueue;
  let child: ChildProcess | null = null;
  let endpoint: string | null = null;
  if (transport === 'memory') {
    const d = new MemoryQueue({ visibilityTimeoutSeconds: 60 });
    queue = new MemoryQueue({
      visibilityTimeoutSeconds: TIMINGS.visibilityTimeoutSeconds,
      maxReceiveCount: TIMINGS.maxReceiveCount,
      deadLetterQueue: d,
    });
    dlq = d;
  } else {
    const s = await startSqsChild(60, sqsLatencyMs);
    child = s.child;
    endpoint = s.endpoint;
    ({ queue, dlq } = laneQueues(s, URGENT_QUEUE));
  }
  try {
    const enq = await meter.measure(() => enqueueAll(url, queue, kind, n, keys), { statements: args.profile });
    const calls0 = endpoint ? await proxyCalls(endpoint) : null;
    const endpointCpu0 = processCpuSeconds(child?.pid);
    const work = () => processAll(url, queue, dlq, n, concurrency, prefetch);
    const proc = await meter.measure(
      profileTo
        ? async () => {
            const { result, summary } = await profileCpu(profileTo, work);
            log(`${summary}\n  (the whole profile: ${profileTo})`);
            return result;
          }
        : work,
      { statements: args.profile },
    );
    const endpointCpu1 = processCpuSeconds(child?.pid);
    const calls = endpoint && calls0 ? callsBetween(calls0, await proxyCalls(endpoint)) : null;
    await verify(url, kind, n);
    const commits = enq.cost.commits + proc.cost.commits;
    const wal = enq.cost.walBytes + proc.cost.walBytes;
    return {
      kind,
      keys,
      prefetch: prefetch ?? concurrency,
      transport,
      sqsLatencyMs: transport === 'sqs' ? sqsLatencyMs : 0,
      sqsCallsPerJob: calls ? calls.total / n : null,
      sqsCalls: calls?.byOp ?? null,
      concurrency,
      jobs: n,
      enqueuePerSec: enq.result,
      processPerSec: proc.result.perSec,
      steadyPerSec: proc.result.steadyPerSec,
      tenths: proc.result.tenths,
      firstMs: proc.result.firstMs,
      commitsPerJob: commits / n,
      walBytesPerJob: wal / n,
      enqueueCost: enq.cost,
      processCost: proc.cost,
      cpuSecondsPer1000: (proc.result.cpuSeconds / n) * 1000,
      kernelCpuSecondsPer1000: (proc.result.kernelCpuSeconds / n) * 1000,
      pgCpuSecondsPer1000: proc.cost.pgCpuSeconds !== undefined ? (proc.cost.pgCpuSeconds / n) * 1000 : null,
      endpointCpuSecondsPer1000: endpointCpu0 !== null && endpointCpu1 !== null ? ((endpointCpu1 - endpointCpu0) / n) * 1000 : null,
    };
  } finally {
    child?.kill('SIGTERM');
  }
}

/** Enqueue → start latency at a steady rate, in-process transport, concurrency 10. */
/** How long a process's first jobs count as warm-up (new connections, statements parsed, code compiled): reported apart. */
const WARMUP_MS = 1000;

interface Latency {
  transport: 'memory' | 'sqs';
  /**
   * in-bench: the benchmark's process enqueues and works; process: it enqueues (as the API does)
   * and a separate worker process works (the worker service, LOG_LEVEL=info, warmed on 2,000 jobs
   * first: a task that has been running), as ECS runs them.
   */
  shape: 'in-bench' | 'process';
  /** Milliseconds the proxy added to every SQS call (0: no proxy). */
  sqsLatencyMs: number;
  /** SQS calls per job over the measured load, counted by the proxy (null without one). */
  sqsCallsPerJob: number | null;
  rate: number;
  seconds: number;
  /** Every job. */
  p50: number;
  p99: number;
  max: number;
  n: number;
  /** The jobs enqueued after the first WARMUP_MS: the steady state. */
  steady: { n: number; p50: number; p99: number; p999: number; max: number };
  /** The jobs enqueued in the first WARMUP_MS. */
  warmup: { n: number; max: number };
  /**
   * Where a slow job's time went, in the process that enqueues and works (after the warm-up):
   * how late its event loop ran (p99 and max, ms) and its garbage collector's pauses over 5 ms.
   * A late loop with no long pause is the process waiting for a core, not doing its own work.
   */
  loop: LoopStats;
  /** The same for the separate worker process (shape 'process'), over the same window; null in-bench. */
  workerLoop: LoopStats | null;
  /**
   * The steady jobs at the p99 and slower: medians of where their time went, ms. `transaction`:
   * from the enqueue call to its COMMIT (a pool connection, the job and outbox rows, the WAL
   * flush); `send`: the publish (SQS: the SendMessage call; in-process: nothing); `toStart`: from
   * the publish to the handler's start (the receive, the claim and its COMMIT, a free slot).
   */
  slowest: Split | null;
  /** The same medians over every steady job, to compare with. */
  typical: Split | null;
}

interface Split {
  n: number;
  transaction: number;
  send: number;
  toStart: number;
}

/** The wall clock in ms with sub-millisecond precision: the same in the benchmark and its worker process. */
const clock = () => performance.timeOrigin + performance.now();
/** Jobs a worker process drains before it is measured, so it runs as a task that has been running. */
const PROCESS_WARMUP_JOBS = 2000;

async function latency(
  adminUrl: string,
  transport: 'memory' | 'sqs',
  shape: 'in-bench' | 'process' = 'in-bench',
  sqsLatencyMs = 0,
): Promise<Latency> {
  if (shape === 'process' && transport !== 'sqs') throw new Error('a separate worker process works through SQS only');
  const url = await freshDb(adminUrl, 'bench_latency');
  let queue: JobQueue;
  let d: JobQueue;
  let child: ChildProcess | null = null;
  let endpoint: LocalSqsEndpoint | null = null;
  if (transport === 'memory') {
    const dead = new MemoryQueue({ visibilityTimeoutSeconds: 60 });
    d = dead;
    queue = new MemoryQueue({ visibilityTimeoutSeconds: 60, deadLetterQueue: dead, maxReceiveCount: 10 });
  } else {
    // The endpoint itself: at 0 ms the counting proxy is only an extra hop production does not have.
    const s = await startSqsChild(60, sqsLatencyMs, sqsLatencyMs > 0);
    child = s.child;
    endpoint = s;
    const lanes = laneQueues(s, URGENT_QUEUE);
    ({ queue, dlq: d } = lanes);
    // The endpoint's child warmed the emulator (sqs-local.ts warmQueue); this warms the client this
    // process sends and works with (through the proxy when it delays: fewer rounds, 45 ms each).
    await warmQueue(lanes.queue.queue('bulk') as SqsQueue, sqsLatencyMs > 0 ? 30 : 300);
  }
  const pool = createPool({ url, max: workerPoolSize(10) + 4, applicationName: 'bench latency' });
  // When each job's message was sent: the publish of the enqueue that made it (Latency.slowest).
  const sendAt = new Map<string, [number, number]>();
  const origSend = queue.send.bind(queue);
  queue.send = async (msgs) => {
    const a = clock();
    await origSend(msgs);
    const b = clock();
    for (const m of msgs) {
      const p = parseJobMessage(m.body);
      // The first send is the enqueue's publish (a relay's re-send would come later).
      if (p.ok && !sendAt.has(p.message.jobId)) sendAt.set(p.message.jobId, [a, b]);
    }
  };
  const seqJob = new Map<number, string>();
  /** When each job's handler started, by its seq. */
  const startAt = new Map<number, number>();
  const publisher = new Publisher(pool, queue, silentLogger);
  const client = new JobClient({ pool, registry, publisher, defaultMaxAttempts: 3 });
  const worker =
    shape === 'in-bench'
      ? new Worker({
          pool,
          queue,
          dlq: d,
          registry,
          publisher,
          timings: { ...TIMINGS, concurrency: 10 },
          log: silentLogger,
          // As deployed (the worker process's too): an idle lane's long poll is one call per 20 s.
          receiveWaitSeconds: 20,
        })
      : null;
  const t0s = new Map<number, number>();
  onStart = (seq) => {
    startAt.set(seq, clock());
  };
  // As the API does before it listens (the worker does the same for its own before its first receive).
  await warmPool(pool, workerPoolSize(10) + 4);
  let proc: Awaited<ReturnType<typeof startWorkers>> | null = null;
  if (shape === 'process') {
    proc = await startWorkers(1, workerEnv({ url, sqs: endpoint!, urgentQueue: URGENT_QUEUE, concurrency: 10, logLevel: 'info' }));
    proc.children[0]!.on('message', (m: { probe?: number; at?: number }) => {
      if (typeof m === 'object' && m.probe !== undefined && m.at !== undefined && !startAt.has(m.probe)) startAt.set(m.probe, m.at);
    });
    await proc.ready;
    await client.enqueueNow(Array.from({ length: PROCESS_WARMUP_JOBS }, () => ({ type: 'bench.noop', payload: {} })));
    for (let left = 1; left > 0; ) {
      await new Promise((r) => setTimeout(r, 100));
      left = (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM jobs.job WHERE finished_at IS NULL')).rows[0]!.n;
    }
    sendAt.clear();
  }
  const calls0 = transport === 'sqs' && sqsLatencyMs > 0 ? await proxyCalls(endpoint!.endpoint) : null;
  worker?.start();
  let start = clock();
  const rate = Number(args.rate);
  const seconds = Number(args['latency-seconds']);
  const total = rate * seconds;
  start = clock();
  const loopDelay = monitorEventLoopDelay({ resolution: 5 });
  const gcPauses: number[] = [];
  const gcWatch = new PerformanceObserver((list) => {
    for (const e of list.getEntries())
      if (e.duration > 5 && performance.timeOrigin + e.startTime - start > WARMUP_MS) gcPauses.push(Math.round(e.duration));
  });
  gcWatch.observe({ entryTypes: ['gc'] });
  const watchLoop = setTimeout(() => {
    loopDelay.enable();
    proc?.children[0]?.send('watch');
  }, WARMUP_MS);
  const inflight: Promise<unknown>[] = [];
  for (let seq = 0; seq < total; seq++) {
    const due = start + (seq * 1000) / rate;
    const wait = due - clock();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    t0s.set(seq, clock());
    inflight.push(client.enqueueNow({ type: 'bench.probe', payload: { seq } }).then((r) => seqJob.set(seq, r[0]!.job.id)));
  }
  await Promise.all(inflight);
  const deadline = Date.now() + 30_000;
  while (startAt.size < total && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  const sqsCalls = calls0 ? callsBetween(calls0, await proxyCalls(endpoint!.endpoint)).total : null;
  clearTimeout(watchLoop);
  loopDelay.disable();
  gcWatch.disconnect();
  let workerLoop: Latency['workerLoop'] = null;
  if (proc) {
    const child = proc.children[0]!;
    workerLoop = await new Promise<Latency['workerLoop']>((resolve) => {
      const onReport = (m: { loop?: Latency['workerLoop'] }) => {
        if (typeof m !== 'object' || !m.loop) return;
        child.off('message', onReport);
        resolve(m.loop);
      };
      child.on('message', onReport);
      child.send('report');
    });
  }
  await worker?.stop(0);
  if (proc) {
    proc.stop();
    await Promise.all(proc.exited);
  }
  await pool.end();
  child?.kill('SIGTERM');
  onStart = null;
  // Every started job: its enqueue → start, and whether it was enqueued after the warm-up.
  const jobs = [...startAt].map(([seq, started]) => ({
    seq,
    t0: t0s.get(seq)!,
    started,
    ms: started - t0s.get(seq)!,
    steady: t0s.get(seq)! - start >= WARMUP_MS,
  }));
  const lat = jobs.map((j) => j.ms);
  const steady = jobs.filter((j) => j.steady).map((j) => j.ms);
  const warm = jobs.filter((j) => !j.steady).map((j) => j.ms);
  const p99 = pct(steady, 99);
  const split = (slowerThan: number): Split | null => {
    const js = jobs
      .filter((j) => j.steady && j.ms >= slowerThan)
      .map((j) => ({ ...j, sent: sendAt.get(seqJob.get(j.seq)!) }))
      .filter((x): x is typeof x & { sent: [number, number] } => x.sent !== undefined);
    return js.length === 0
      ? null
      : {
          n: js.length,
          transaction: median(js.map((x) => x.sent[0] - x.t0)),
          send: median(js.map((x) => x.sent[1] - x.sent[0])),
          toStart: median(js.map((x) => x.started - x.sent[1])),
        };
  };
  return {
    transport,
    shape,
    sqsLatencyMs: transport === 'sqs' ? sqsLatencyMs : 0,
    sqsCallsPerJob: sqsCalls === null ? null : sqsCalls / total,
    rate,
    seconds,
    n: lat.length,
    p50: pct(lat, 50),
    p99: pct(lat, 99),
    max: Math.max(...lat),
    steady:
      steady.length > 0
        ? { n: steady.length, p50: pct(steady, 50), p99: pct(steady, 99), p999: pct(steady, 99.9), max: Math.max(...steady) }
        : { n: 0, p50: NaN, p99: NaN, p999: NaN, max: NaN },
    warmup: { n: warm.length, max: Math.max(...warm) },
    loop: loopStats(loopDelay, gcPauses),
    workerLoop,
    slowest: split(p99),
    typical: split(0),
  };
}

/** kill -9 of a worker process mid-job → another worker process resumes it. */
async function killToResume(
  adminUrl: string,
  kills: number,
): Promise<{ leaseSeconds: number; heartbeatSeconds: number; samplesMs: number[] }> {
  const leaseSeconds = 5;
  const heartbeatSeconds = 1;
  const url = await freshDb(adminUrl, 'bench_kill');
  const sqs = await startSqsChild(6);
  const env = {
    ...process.env,
    DATABASE_URL: url,
    JOBS_QUEUE_URL: sqs.queueUrl,
    JOBS_DLQ_URL: sqs.dlqUrl,
    ...(URGENT_QUEUE ? { JOBS_URGENT_QUEUE_URL: sqs.urgentQueueUrl, JOBS_URGENT_DLQ_URL: sqs.urgentDlqUrl } : {}),
    JOBS_SQS_ENDPOINT: sqs.endpoint,
    AWS_REGION: 'us-east-1',
    JOBS_LEASE_SECONDS: String(leaseSeconds),
    JOBS_HEARTBEAT_SECONDS: String(heartbeatSeconds),
    JOBS_VISIBILITY_TIMEOUT_SECONDS: '6',
    LOG_LEVEL: 'error',
    JOBS_LOCAL_ENV: '0',
  };
  const spawnWorker = (id: string) =>
    spawn(process.execPath, ['--import', 'tsx', 'bin/jobs.ts', 'worker'], { env: { ...env, JOBS_WORKER_ID: id }, stdio: 'ignore' });
  const pool = createPool({ url, max: 2, applicationName: 'bench kill' });
  const client = new JobClient({
    pool,
    registry,
    publisher: new Publisher(pool, laneQueues(sqs, URGENT_QUEUE).queue, silentLogger),
    defaultMaxAttempts: 5,
  });
  const workers = new Map<string, ChildProcess>();
  const samples: number[] = [];
  try {
    for (let k = 0; k < kills; k++) {
      for (const id of [`kill-a-${k}`, `kill-b-${k}`]) workers.set(id, spawnWorker(id));
      const [r] = await client.enqueueNow({
        type: 'ledger.post',
        payload: { batch: `kill-${k}`, entries: 1, workMs: 60_000 },
        maxAttempts: 5,
      });
      let owner: string | null = null;
      while (!owner) {
        const { rows } = await pool.query("SELECT lease_owner FROM jobs.job WHERE id = $1 AND state = 'running'", [r!.job.id]);
        owner = rows[0]?.lease_owner ?? null;
        if (!owner) await new Promise((res) => setTimeout(res, 50));
      }
      // Kill at a random point of the heartbeat cycle.
      await new Promise((res) => setTimeout(res, 1500 + Math.random() * 1000));
      const t0 = performance.now();
      workers.get(owner)!.kill('SIGKILL');
      for (;;) {
        const { rows } = await pool.query('SELECT attempt, state FROM jobs.job WHERE id = $1', [r!.job.id]);
        if (rows[0].attempt >= 2 && rows[0].state === 'running') break;
        await new Promise((res) => setTimeout(res, 20));
      }
      samples.push(performance.now() - t0);
      await client.cancel(r!.job.id, 'bench');
      for (const w of workers.values()) w.kill('SIGKILL');
      workers.clear();
    }
  } finally {
    for (const w of workers.values()) w.kill('SIGKILL');
    await pool.end();
    sqs.child.kill('SIGTERM');
  }
  return { leaseSeconds, heartbeatSeconds, samplesMs: samples };
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}
/** The cost columns of a table row, one table or another: commits and WAL per job, worker and PostgreSQL CPU per 1,000 jobs. */
function costCells(
  ss: { commitsPerJob: number; walBytesPerJob: number; cpuSecondsPer1000: number; pgCpuSecondsPer1000: number | null }[],
): string {
  const pg = ss.every((s) => s.pgCpuSecondsPer1000 !== null)
    ? range(
        ss.map((s) => s.pgCpuSecondsPer1000!),
        3,
      )
    : 'n/a (remote)';
  return `${range(
    ss.map((s) => s.commitsPerJob),
    3,
  )} | ${range(ss.map((s) => s.walBytesPerJob))} | ${range(
    ss.map((s) => s.cpuSecondsPer1000),
    3,
  )} | ${pg}`;
}

function range(xs: number[], digits = 0): string {
  return `${fmt(median(xs), digits)} (${fmt(Math.min(...xs), digits)}–${fmt(Math.max(...xs), digits)})`;
}

async function main(): Promise<void> {
  let adminUrl = args['pg-url'];
  let stopPg: (() => Promise<void>) | null = null;
  let peerRows: PeerRow[] = [];
  if (args.peers) {
    const peers = await runPeers({ runs: RUNS, jobs: N, log });
    peerRows = peers.rows;
    adminUrl ??= peers.pgUrl;
    stopPg = peers.stopPg;
  }
  // Ctrl-C or a SIGTERM stops the embedded PostgreSQL, then exits: the exit stops the local SQS
  // endpoints and the worker processes (sqs-local.ts, deployed.ts), which would otherwise outlive
  // the benchmark, holding their ports and connections.
  for (const signal of ['SIGINT', 'SIGTERM'] as const)
    process.once(signal, () => {
      interrupted = true;
      log(`${signal}: stopping PostgreSQL and the benchmark's processes…`);
      void (stopPg?.() ?? Promise.resolve()).finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
    });
  if (!adminUrl) {
    log('starting embedded PostgreSQL (durable: fsync=on, synchronous_commit=on, full_page_writes=on)…');
    const embedded = await startEmbeddedPg({
      durable: true,
      settings: { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track': 'all' },
    });
    adminUrl = embedded.url;
    stopPg = () => embedded.stop();
  }
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  const server = (await admin.query('SHOW server_version')).rows[0].server_version as string;
  const settings = (
    await admin.query(
      "SELECT name, setting FROM pg_settings WHERE name IN ('fsync','synchronous_commit','full_page_writes','shared_buffers')",
    )
  ).rows;
  if (args.profile)
    await admin
      .query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements')
      .catch(() => log('pg_stat_statements is not loaded: no per-statement WAL profile'));
  await admin.end();
  const meter = new CostMeter(adminUrl, 'bench_tp');
  await meter.connect();

  const samples: Sample[] = [];
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const resultsDir = join('bench', 'results');
  await mkdir(resultsDir, { recursive: true });
  try {
    // One run of the in-bench matrix: one worker in this process, every kind, transport and setting.
    const matrixRun = async (run: number): Promise<void> => {
      for (const kind of KINDS) {
        for (const transport of TRANSPORTS) {
          for (const delay of transport === 'sqs' ? SQS_LATENCIES : [0])
            for (const c of CONCURRENCIES)
              for (const pf of PREFETCHES) {
                const via = transport === 'sqs' ? `local SQS + ${delay} ms` : transport;
                log(`run ${run + 1}/${RUNS}: ${kind} via ${via}, concurrency ${c}, prefetch ${pf ?? c}, ${N} jobs…`);
                const profileTo =
                  args.profile && run === 0
                    ? join(
                        resultsDir,
                        `${stamp}-${kind}-${transport}${transport === 'sqs' ? `-${delay}ms` : ''}-c${c}-p${pf ?? c}.cpuprofile`,
                      )
                    : null;
                const s = await throughput(adminUrl, 'bench_tp', meter, kind, transport, c, pf, profileTo, { sqsLatencyMs: delay });
                const pgCpu = s.pgCpuSecondsPer1000 === null ? '' : `, PostgreSQL ${s.pgCpuSecondsPer1000.toFixed(3)} CPU s/1000`;
                const calls =
                  s.sqsCallsPerJob === null
                    ? ''
                    : `, ${s.sqsCallsPerJob.toFixed(3)} SQS calls/job, local endpoint ${s.endpointCpuSecondsPer1000?.toFixed(3) ?? '?'} CPU s/1000`;
                log(
                  `  ${fmt(s.processPerSec)} jobs/s (steady ${fmt(s.steadyPerSec)}; first job at ${s.firstMs.toFixed(0)} ms, tenths ${s.tenths.map((t) => fmt(t)).join(' ')}), ${s.commitsPerJob.toFixed(3)} commits/job, ${fmt(s.walBytesPerJob)} WAL B/job, worker ${s.cpuSecondsPer1000.toFixed(3)} CPU s/1000 (kernel ${s.kernelCpuSecondsPer1000.toFixed(3)})${pgCpu}${calls}`,
                );
                if (args.profile && run === 0) {
                  for (const [phase, cost] of [
                    ['enqueue', s.enqueueCost],
                    ['process', s.processCost],
                  ] as const) {
                    for (const st of cost.statements ?? [])
                      log(
                        `    [${phase}] ${fmt(st.walBytes / N)} WAL B/job  ${st.walRecords} rec  ${st.walFpi} fpi  ${st.calls} calls  ${fmt(st.totalMs)} ms  ${st.query}`,
                      );
                  }
                }
                samples.push(s);
              }
        }
      }
    };
    // The deployed shape: separate worker processes draining a backlog through the local SQS endpoint.
    const drains: Drain[] = [];
    const drainRun = async (run: number): Promise<void> => {
      for (const kind of KINDS)
        for (const delay of [WORKER_DELAY])
          for (const c of [WORKER_C])
            for (const w of WORKERS) {
              const url = await freshDb(adminUrl, 'bench_tp');
              const sqs = await startSqsChild(60, delay);
              try {
                const { queue } = laneQueues(sqs, URGENT_QUEUE);
                let queued = 0;
                const fill = async () => {
                  await enqueueAll(url, queue, kind, N, 0, queued);
                  queued += N;
                };
                for (let round = 0; round < ROUNDS; round++) {
                  const what = `${kind} via local SQS + ${delay} ms, ${w} worker process${w === 1 ? '' : 'es'} × concurrency ${c}`;
                  log(
                    `run ${run + 1}/${RUNS}: ${what}, ${N} jobs${ROUNDS > 1 ? `, round ${round + 1}/${ROUNDS}` : ''}${args.warm === 'false' ? '' : `, then ${N} more`}…`,
                  );
                  await fill();
                  const { result, cost } = await meter.measure(
                    () =>
                      drainWithWorkers({
                        url,
                        sqs,
                        urgentQueue: URGENT_QUEUE,
                        workers: w,
                        concurrency: c,
                        logLevel: args['worker-log-level']!,
                        refill: args.warm === 'false' ? undefined : fill,
                        pgCpu: () => meter.pgCpuSeconds(),
                      }),
                    { statements: args.profile ? 'time' : false },
                  );
                  await verify(url, kind, queued);
                  for (const [phase, d] of [
                    ['cold', result.cold],
                    ['warm', result.warm],
                  ] as const) {
                    if (!d) continue;
                    const pgCpu = d.pgCpuSecondsPer1000 !== null ? `, PostgreSQL ${d.pgCpuSecondsPer1000.toFixed(3)} CPU s/1000` : '';
                    const started = phase === 'cold' ? `started in ${fmt(d.startMs)} ms` : 'the same processes again';
                    log(
                      `  ${phase}: ${fmt(d.perSec)} jobs/s (steady ${fmt(d.steadyPerSec)}; tenths ${d.tenths.map((t) => (Number.isFinite(t) ? fmt(t) : '–')).join(' ')}), ${started}, worker ${d.workerCpuSecondsPer1000.toFixed(3)} CPU s/1000${pgCpu}, ${d.sqsCallsPerJob.toFixed(3)} SQS calls/job, ${d.connectionsPeak} connections, ${d.retried} jobs claimed more than once${d.retried > 0 ? ` (released ${d.retriedBy.released}, lease ran out ${d.retriedBy.leaseRanOut}, rescued ${d.retriedBy.rescued}, failed ${d.retriedBy.failed})` : ''}`,
                    );
                    drains.push({ ...d, kind, sqsLatencyMs: delay, round, phase });
                  }
                  for (const st of cost.statements ?? [])
                    log(
                      `    ${fmt(st.totalMs)} ms  ${st.calls} calls  ${fmt(st.totalMs / Math.max(st.calls, 1), 3)} ms/call  ${fmt(st.rows / Math.max(st.calls, 1), 1)} rows/call  ${st.query}`,
                    );
                }
              } finally {
                sqs.child.kill('SIGTERM');
              }
            }
    };
    // The matrix and the drains run by turns, so a drain's figure and the in-bench one it is
    // compared with ("of in-bench") are minutes apart, not a quarter of an hour: this machine's
    // speed drifts more than that between the first phase and the last.
    for (let run = 0; run < RUNS; run++) {
      if (args.matrix !== 'false') await matrixRun(run);
      await drainRun(run);
    }
    // Keyed jobs against unkeyed, same run: no-op, in-process, one worker at KEYED_C.
    const keyed: Sample[] = [];
    const backlog: Sample[] = [];
    for (let run = 0; run < RUNS; run++) {
      for (const k of KEYS) {
        log(
          `run ${run + 1}/${RUNS}: noop via memory, concurrency ${KEYED_C}, ${k ? `${k} key${k === 1 ? '' : 's'} (limit 1)` : 'no key'}, ${KEYED_N} jobs…`,
        );
        const s = await throughput(adminUrl, 'bench_tp', meter, 'noop', 'memory', KEYED_C, null, null, { n: KEYED_N, keys: k });
        log(`  ${fmt(s.processPerSec)} jobs/s, ${s.commitsPerJob.toFixed(3)} commits/job, ${fmt(s.walBytesPerJob)} WAL B/job`);
        keyed.push(s);
      }
      for (const b of KEY_BACKLOGS) {
        log(`run ${run + 1}/${RUNS}: one key (limit 1) with a backlog of ${b} jobs, concurrency ${KEYED_C}…`);
        const s = await throughput(adminUrl, 'bench_tp', meter, 'noop', 'memory', KEYED_C, null, null, { n: b, keys: 1 });
        log(`  ${fmt(s.processPerSec)} jobs/s, ${fmt(1000 / s.processPerSec, 2)} ms/job`);
        backlog.push(s);
      }
    }
    const lats: Latency[] = [];
    // --latency-seconds 0: no latency runs.
    for (let run = 0; run < (Number(args['latency-seconds']) > 0 ? RUNS : 0); run++)
      for (const transport of TRANSPORTS)
        for (const delay of transport === 'sqs' ? LATENCY_SQS_MS : [0])
          for (const shape of LATENCY_SHAPES) {
            if (shape === 'process' && transport !== 'sqs') continue;
            log(
              `run ${run + 1}/${RUNS}: latency, ${args.rate} jobs/s for ${args['latency-seconds']} s via ${transport === 'sqs' ? `local SQS${delay > 0 ? ` + ${delay} ms` : ''}` : 'in-process'}${shape === 'process' ? ', a separate worker process' : ''}…`,
            );
            lats.push(await latency(adminUrl, transport, shape, delay));
          }
    if (Number(args.kills) > 0) log('kill -9 → resumption…');
    const kill = Number(args.kills) > 0 ? await killToResume(adminUrl, Number(args.kills)) : null;

    // ---- report
    const groups = new Map<string, Sample[]>();
    for (const s of samples) {
      const key = `${s.kind}|${s.transport}|${s.sqsLatencyMs}|${s.concurrency}|${s.prefetch}`;
      groups.set(key, [...(groups.get(key) ?? []), s]);
    }
    const out: string[] = [];
    out.push(
      `PostgreSQL ${server} (${settings.map((r) => `${r.name}=${r.setting}`).join(', ')}), Node ${process.version}, ${N} jobs per run, ${RUNS} run(s); median (min–max)`,
    );
    out.push('');
    out.push(
      '| job | transport | concurrency | prefetch | jobs/s | enqueue jobs/s | SQS calls/job | commits/job | WAL bytes/job | worker CPU s/1000 jobs | PostgreSQL CPU s/1000 jobs |',
    );
    out.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const [key, ss] of groups) {
      const [kind, transport, delay, c, pf] = key.split('|');
      const via = transport === 'memory' ? 'in-process' : `local SQS${delay === '0' ? '' : ` + ${delay} ms`}`;
      const calls =
        transport === 'memory'
          ? '–'
          : range(
              ss.map((s) => s.sqsCallsPerJob ?? 0),
              3,
            );
      out.push(
        `| ${kind} | ${via} | ${c} | ${pf} | ${range(ss.map((s) => s.processPerSec))} | ${range(ss.map((s) => s.enqueuePerSec))} | ${calls} | ${costCells(ss)} |`,
      );
    }
    const delayed = SQS_LATENCIES.filter((d) => d > 0);
    if (TRANSPORTS.includes('sqs') && SQS_LATENCIES.includes(0) && delayed.length > 0) {
      out.push('');
      out.push(
        'Hiding SQS latency: one worker through the local SQS endpoint, every call delayed, against the same without delay (medians):',
      );
      out.push('');
      out.push(
        '| job | concurrency | SQS delay | jobs/s | of 0 ms | steady jobs/s (10–90 % of the drain) | steady, of 0 ms | SQS calls/job | local endpoint CPU s/1000 jobs, 0 ms → delayed | worker + PostgreSQL + endpoint, cores busy |',
      );
      out.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
      for (const kind of KINDS)
        for (const c of CONCURRENCIES)
          for (const d of delayed) {
            const at = (ms: number) =>
              samples.filter((s) => s.kind === kind && s.transport === 'sqs' && s.concurrency === c && s.sqsLatencyMs === ms);
            const base = median(at(0).map((s) => s.processPerSec));
            const ss = at(d);
            if (ss.length === 0) continue;
            const m = median(ss.map((s) => s.processPerSec));
            const steady = median(ss.map((s) => s.steadyPerSec));
            const steadyBase = median(at(0).map((s) => s.steadyPerSec));
            // The endpoint shares the machine's cores with the worker and PostgreSQL: how busy all three kept them.
            const endpointCpu = (xs: Sample[]) => median(xs.map((s) => s.endpointCpuSecondsPer1000 ?? NaN));
            const busy = median(
              ss.map(
                (s) => ((s.cpuSecondsPer1000 + (s.pgCpuSecondsPer1000 ?? 0) + (s.endpointCpuSecondsPer1000 ?? 0)) * s.processPerSec) / 1000,
              ),
            );
            out.push(
              `| ${kind} | ${c} | ${d} ms | ${range(ss.map((s) => s.processPerSec))} | ${Math.round((100 * m) / base)} % | ${range(
                ss.map((s) => s.steadyPerSec),
              )} | ${Math.round((100 * steady) / steadyBase)} % | ${range(
                ss.map((s) => s.sqsCallsPerJob ?? 0),
                3,
              )} | ${fmt(endpointCpu(at(0)), 3)} → ${fmt(endpointCpu(ss), 3)} | ${fmt(busy, 2)} |`,
            );
          }
    }
    if (drains.length > 0) {
      out.push('');
      out.push(
        `Separate worker processes, as deployed (bench/worker-child.ts: the worker service, LOG_LEVEL=${args['worker-log-level']}), each drain ${fmt(N)} jobs already in the local SQS queue; jobs/s from the last process ready to the last job finished. cold: processes started with the backlog queued (a deploy in the middle of a backlog); warm: the same processes given a second backlog once the first is done (a task that has been running, as ECS keeps them and as the in-bench drains run):`,
      );
      out.push('');
      out.push(
        '| job | SQS delay | concurrency | processes | round | drain | rows before | jobs/s | of in-bench | steady jobs/s (10–90 %) | steady, of in-bench steady | per process | worker CPU s/1000 jobs | PostgreSQL CPU s/1000 jobs | connections held | SQS calls/job | jobs claimed more than once |',
      );
      out.push('|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
      const keyOf = (x: Drain) => `${x.kind}|${x.sqsLatencyMs}|${x.concurrency}|${x.workers}|${x.round}|${x.phase}`;
      const seen = new Set<string>();
      for (const d of drains) {
        const key = keyOf(d);
        if (seen.has(key)) continue;
        seen.add(key);
        const ds = drains.filter((x) => keyOf(x) === key);
        const inBench = samples.filter(
          (s) => s.kind === d.kind && s.transport === 'sqs' && s.sqsLatencyMs === d.sqsLatencyMs && s.concurrency === d.concurrency,
        );
        const m = median(ds.map((x) => x.perSec));
        const ofBench = inBench.length > 0 ? `${Math.round((100 * m) / median(inBench.map((s) => s.processPerSec)))} %` : 'n/a';
        const steady = median(ds.map((x) => x.steadyPerSec));
        const steadyOfBench = inBench.length > 0 ? `${Math.round((100 * steady) / median(inBench.map((s) => s.steadyPerSec)))} %` : 'n/a';
        const pgCpu = ds.every((x) => x.pgCpuSecondsPer1000 !== null)
          ? range(
              ds.map((x) => x.pgCpuSecondsPer1000!),
              3,
            )
          : 'n/a (remote)';
        out.push(
          `| ${d.kind} | ${d.sqsLatencyMs} ms | ${d.concurrency} | ${d.workers} | ${d.round + 1} | ${d.phase} | ${fmt(d.tableRows)} | ${range(ds.map((x) => x.perSec))} | ${ofBench} | ${range(ds.map((x) => x.steadyPerSec))} | ${steadyOfBench} | ${fmt(m / d.workers)} | ${range(
            ds.map((x) => x.workerCpuSecondsPer1000),
            3,
          )} | ${pgCpu} | ${range(ds.map((x) => x.connectionsPeak))} | ${range(
            ds.map((x) => x.sqsCallsPerJob),
            3,
          )} | ${range(ds.map((x) => x.retried))} |`,
        );
      }
    }
    if (keyed.length > 0) {
      const base = keyed.filter((s) => s.keys === 0).map((s) => s.processPerSec);
      out.push('');
      out.push(
        `Concurrency keys: no-op jobs, in-process, concurrency ${KEYED_C}, ${KEYED_N} jobs per run spread round robin over the keys, limit 1 per key:`,
      );
      out.push('');
      out.push('| keys | jobs/s | vs no key | commits/job | WAL bytes/job | worker CPU s/1000 jobs | PostgreSQL CPU s/1000 jobs |');
      out.push('|---:|---:|---:|---:|---:|---:|---:|');
      for (const k of KEYS) {
        const ss = keyed.filter((s) => s.keys === k);
        const ratio = base.length > 0 ? `${(median(ss.map((s) => s.processPerSec)) / median(base)).toFixed(2)}×` : 'n/a';
        out.push(`| ${k === 0 ? 'none' : fmt(k)} | ${range(ss.map((s) => s.processPerSec))} | ${ratio} | ${costCells(ss)} |`);
      }
    }
    if (backlog.length > 0) {
      out.push('');
      out.push(`One key (limit 1) with every job enqueued at once, no-op, in-process, concurrency ${KEYED_C}:`);
      out.push('');
      out.push('| jobs on the key | jobs/s | ms per job | PostgreSQL CPU s/1000 jobs |');
      out.push('|---:|---:|---:|---:|');
      for (const b of KEY_BACKLOGS) {
        const ss = backlog.filter((s) => s.jobs === b);
        out.push(
          `| ${fmt(b)} | ${range(ss.map((s) => s.processPerSec))} | ${range(
            ss.map((s) => 1000 / s.processPerSec),
            2,
          )} | ${
            ss.every((s) => s.pgCpuSecondsPer1000 !== null)
              ? range(
                  ss.map((s) => s.pgCpuSecondsPer1000!),
                  3,
                )
              : 'n/a (remote)'
          } |`,
        );
      }
    }
    out.push('');
    if (lats.length > 0) {
      // A run no longer than the warm-up has no steady state: "–" rather than NaN.
      const ms = (v: number | undefined) => (v === undefined || Number.isNaN(v) ? '–' : v.toFixed(1));
      // With a delaying proxy in some runs, the calls it counted (the others have no proxy).
      const delayed = lats.some((l) => l.sqsCallsPerJob !== null);
      const splitCell = (x: Split | null) => (x ? `${ms(x.transaction)} / ${ms(x.send)} / ${ms(x.toStart)}, ${x.n} jobs` : '–');
      out.push('');
      out.push(
        `Enqueue → start at a steady ${lats[0]!.rate} jobs/s for ${lats[0]!.seconds} s per run (concurrency 10, one transaction per enqueue), ms; steady state = jobs enqueued after the first ${WARMUP_MS / 1000} s, warm-up = the first ${WARMUP_MS / 1000} s of a fresh process (in-bench) or of the load (worker process: a separate worker service, LOG_LEVEL=info, that has run ${fmt(PROCESS_WARMUP_JOBS)} jobs first; the benchmark's process enqueues, as the API does: its event loop and GC are the first columns', the worker process's the next):`,
      );
      out.push('');
      out.push(
        `| transport | run | steady p50 | steady p99 | steady p99.9 | steady max | warm-up max | whole run p99 | event loop late, p99 / max | GC pauses > 5 ms | worker process: event loop late, p99 / max; GC pauses > 5 ms | enqueue transaction / send / send to start, median of the p99 and slower (of all) |${delayed ? ' SQS calls/job |' : ''}`,
      );
      out.push(`|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|${delayed ? '---:|' : ''}`);
      const runOf = new Map<string, number>();
      for (const lat of lats) {
        const label = `${lat.transport === 'sqs' ? `local SQS${lat.sqsLatencyMs > 0 ? ` + ${lat.sqsLatencyMs} ms` : ''}` : 'in-process'}${lat.shape === 'process' ? ', worker process' : ''}`;
        const k = (runOf.get(label) ?? 0) + 1;
        runOf.set(label, k);
        out.push(
          `| ${label} | ${k} | ${ms(lat.steady?.p50)} | ${ms(lat.steady?.p99)} | ${ms(lat.steady?.p999)} | ${ms(lat.steady?.max)} | ${ms(lat.warmup?.max)} | ${ms(lat.p99)} | ${ms(lat.loop?.delayP99)} / ${ms(lat.loop?.delayMax)} | ${lat.loop ? lat.loop.gcPausesOver5.join(', ') || 'none' : '–'} | ${lat.workerLoop ? `${ms(lat.workerLoop.delayP99)} / ${ms(lat.workerLoop.delayMax)}; ${lat.workerLoop.gcPausesOver5.join(', ') || 'none'}` : '–'} | ${splitCell(lat.slowest)} (${splitCell(lat.typical)}) |${delayed ? ` ${lat.sqsCallsPerJob === null ? '–' : lat.sqsCallsPerJob.toFixed(2)} |` : ''}`,
        );
      }
    }
    if (kill)
      out.push(
        `kill -9 of a worker process → its job running again on another (lease ${kill.leaseSeconds} s, heartbeat ${kill.heartbeatSeconds} s, local SQS): median ${(median(kill.samplesMs) / 1000).toFixed(1)} s, max ${(Math.max(...kill.samplesMs) / 1000).toFixed(1)} s over ${kill.samplesMs.length} kills.`,
      );
    if (peerRows.length > 0) {
      out.push('');
      out.push('Peers, same machine and PostgreSQL, same run (../shared/bench/peers, concurrency 10):');
      out.push('');
      out.push('| peer | jobs/s | commits/job | WAL bytes/job |');
      out.push('|---|---:|---:|---:|');
      for (const r of peerRows)
        out.push(`| ${r.label} | ${fmt(r.jobsPerSec)} | ${r.commitsPerJob.toFixed(3)} | ${fmt(r.walBytesPerJob)} |`);
    }
    process.stdout.write(`${out.join('\n')}\n`);
    const file = args.out ?? join(resultsDir, `${stamp}.json`);
    await mkdir(join(file, '..'), { recursive: true });
    await writeFile(
      file,
      JSON.stringify(
        {
          server,
          settings,
          node: process.version,
          jobs: N,
          runs: RUNS,
          samples,
          keyed,
          keyBacklog: backlog,
          drains,
          latency: lats,
          kill,
          peers: peerRows,
        },
        null,
        2,
      ),
    );
    log(`wrote ${file}`);
  } finally {
    await meter.close();
    await stopPg?.();
  }
}

/** A signal is stopping the benchmark: what fails meanwhile (the server going away) is expected. */
let interrupted = false;
// Interrupted, the signal handler exits once PostgreSQL has stopped; until then, wait.
await main().catch((err: unknown) => (interrupted ? new Promise(() => undefined) : Promise.reject(err)));
