// The chaos run: a local stack of real processes (embedded PostgreSQL, the local SQS endpoint,
// the API, `jobs worker` processes, one of them with SQS errors injected), a mixed load through
// the API, and faults on a schedule through the stack's fault injector (dev/faults.ts):
// duplicate deliveries, kill -9 and restarts, SIGSTOP past the lease, enqueue-and-rollback, a
// publisher killed after COMMIT, dropped database connections. Then it lets the system drain,
// collects the database and the queues, and hands them to verify.ts.

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import type { JobTimings } from '../../runtime/config/rules.ts';
import { createPool } from '../../runtime/db/pool.ts';
import { LiveFeed } from '../../runtime/live/feed.ts';
import { FaultError } from '../../dev/faults.ts';
import { startLocalStack } from '../../dev/stack.ts';
import { SQS_FAULTS_ENV } from '../../runtime/queue/fault-injection.ts';
import { jobMessageBody } from '../../runtime/queue/message.ts';
import { SqsQueue } from '../../runtime/queue/sqs.ts';
import { deadReportTimings } from '../../runtime/maintenance/dead-reports.ts';
import { countUnreportedDeaths } from '../../runtime/store/dead-reports.ts';
import { collectEffects, collectJobs } from './collect.ts';
import { KeySampler } from './keys-sampler.ts';
import { enqueueViaApi, groupSize, pickKind, seeded, specFor } from './load.ts';
import {
  TERMINAL,
  verify,
  type KeyBurst,
  type KillRecord,
  type Observations,
  type PlannedJob,
  type RolledBack,
  type TrackedJob,
  type Verdict,
} from './verify.ts';

/** Short enough to see many leases expire in a short run; sound by the same rules as production. */
export const CHAOS_TIMINGS: JobTimings = {
  leaseSeconds: 3,
  heartbeatSeconds: 1,
  visibilityTimeoutSeconds: 4,
  maxAttempts: 6,
  maxReceiveCount: 10,
  backoffBaseSeconds: 0.3,
  backoffMaxSeconds: 2,
  concurrency: 4,
  drainSeconds: 2,
};

export interface ChaosOptions {
  /** Seconds of load and faults (the drain comes after). */
  seconds: number;
  /** Plain worker processes; one more runs with SQS errors. */
  workers: number;
  /** Jobs enqueued per second. */
  rate: number;
  seed: number;
  /** Share of the SQS calls the faulty worker fails. */
  sqsErrorRate: number;
  drainTimeoutSeconds: number;
  log: (line: string) => void;
  /** Show the services' warnings (otherwise they run with LOG_LEVEL=silent). */
  verbose?: boolean;
  /** Ctrl-C: stop injecting, skip the drain, clean up. */
  signal?: AbortSignal;
  /** How long the database failover refuses connections. */
  failoverSeconds: number;
}

export const DEFAULT_CHAOS: Omit<ChaosOptions, 'log'> = {
  seconds: 30,
  workers: 2,
  rate: 3,
  seed: Date.now() % 1_000_000,
  sqsErrorRate: 0.15,
  drainTimeoutSeconds: 90,
  failoverSeconds: 8,
};

export interface ChaosResult {
  verdict: Verdict;
  observations: Observations;
  options: Omit<ChaosOptions, 'log'>;
  timings: JobTimings;
  /** Extra figures the checks do not need. */
  notes: {
    zombieRefusals: number;
    heldAtKill: number;
    heldAtPause: number;
    connectionsDropped: number;
    faultsSkipped: number;
    drainSeconds: number;
    failoverSeconds: number;
    purgedPending: number;
  };
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((r) => {
    if (signal?.aborted) return r();
    // The listener goes with the timer: one per sleep left behind would pile up on the run's signal.
    const onAbort = () => {
      clearTimeout(t);
      r();
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      r();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/** Polls the jobs a fault interrupted until their next attempt is claimed (or they had ended). */
class ResumptionTracker {
  private readonly open: TrackedJob[] = [];
  private timer: NodeJS.Timeout | null = null;
  private busy = false;

  constructor(private readonly db: Pick<pg.Pool, 'query'>) {}

  track(jobs: { id: string; attempt: number }[]): TrackedJob[] {
    const recs = jobs.map((j) => ({ id: j.id, attempt: j.attempt, resumedAt: null, outcome: 'not-resumed' as TrackedJob['outcome'] }));
    this.open.push(...recs);
    return recs;
  }

  start(): void {
    this.timer = setInterval(() => void this.poll(), 100);
  }

  private async poll(): Promise<void> {
    const waiting = this.open.filter((t) => t.outcome === 'not-resumed');
    if (this.busy || waiting.length === 0) return;
    this.busy = true;
    try {
      const { rows } = await this.db.query<{ id: string; attempt: number; state: string; last_error: { name?: string } | null }>(
        'SELECT id, attempt, state, last_error FROM jobs.job WHERE id = ANY($1::uuid[])',
        [[...new Set(waiting.map((t) => t.id))]],
      );
      const now = Date.now();
      const byId = new Map(rows.map((r) => [r.id, r]));
      for (const t of waiting) {
        const r = byId.get(t.id);
        if (!r) continue;
        if (r.attempt > t.attempt) {
          t.resumedAt = now;
          t.outcome = 'resumed';
        } else if (TERMINAL.includes(r.state)) {
          t.outcome = r.state === 'dead' && r.last_error?.name === 'LeaseExpired' ? 'dead-on-final-attempt' : 'finished-before';
        }
      }
    } catch {
      /* the next poll tries again */
    } finally {
      this.busy = false;
    }
  }

  async stop(): Promise<void> {
    await this.poll();
    if (this.timer) clearInterval(this.timer);
  }
}

export async function runChaos(opts: ChaosOptions): Promise<ChaosResult> {
  const o = opts;
  const log = o.log;
  const signal = o.signal;
  const aborted = () => signal?.aborted === true;
  const started = Date.now();
  const dir = await mkdtemp(join(tmpdir(), 'jobs-chaos-'));
  log(
    `starting the local stack: embedded PostgreSQL, local SQS, the API, ${o.workers} workers and 1 worker with ${Math.round(o.sqsErrorRate * 100)} % SQS errors…`,
  );
  const stack = await startLocalStack({
    workers: o.workers,
    dir,
    timings: CHAOS_TIMINGS,
    log: o.verbose ? log : () => undefined,
    env: { LOG_LEVEL: o.verbose ? 'warn' : 'silent', ...(o.verbose ? {} : { NODE_NO_WARNINGS: '1' }) },
  });
  let db: pg.Pool | null = null;
  let feed: LiveFeed | null = null;
  try {
    const workers = stack.faults.workers;
    const injector = stack.faults.injector;
    workers.start({ [SQS_FAULTS_ENV]: String(o.sqsErrorRate) });
    db = createPool({ url: stack.env.DATABASE_URL!, max: 4, applicationName: 'jobs-chaos' });
    const queue = new SqsQueue({ queueUrl: stack.env.JOBS_QUEUE_URL!, endpoint: stack.env.JOBS_SQS_ENDPOINT!, region: 'us-east-1' });

    // What the event bus shows: SQS errors (only the faulty worker knows), claims, zombie refusals.
    const faults: Record<string, number> = {};
    const events: Record<string, number> = {};
    const claimed = new Set<string>();
    const paused = new Set<string>();
    let zombieRefusals = 0;
    feed = new LiveFeed({ url: stack.env.DATABASE_URL!, capacity: 100, applicationName: 'jobs-chaos events' });
    feed.subscribe((list) => {
      for (const e of list) {
        events[e.kind] = (events[e.kind] ?? 0) + 1;
        if (e.kind === 'fault' && e.fault === 'sqs-error') faults['sqs-error'] = (faults['sqs-error'] ?? 0) + 1;
        if ((e.kind === 'claimed' || e.kind === 'reclaimed') && e.jobId) claimed.add(e.jobId);
        if (e.kind === 'lease-lost' && paused.has(e.workerId)) zombieRefusals++;
      }
    });
    await feed.start();
    const count = (k: string, n = 1) => (faults[k] = (faults[k] ?? 0) + n);

    // Every worker up and announced before the clock starts.
    const upBy = Date.now() + 60_000;
    while (Date.now() < upBy && !aborted() && workers.live().some((id) => !feed!.workers.has(id))) await sleep(200, signal);
    log(`workers up: ${workers.live().join(', ')}; ${o.seconds} s of load at ${o.rate} jobs/s with faults (seed ${o.seed})`);

    const random = seeded(o.seed);
    const planned: PlannedJob[] = [];
    const bursts: KeyBurst[] = [];
    const rolledBack: RolledBack[] = [];
    const kills: KillRecord[] = [];
    const pauses: KillRecord[] = [];
    const unpublished: KillRecord[] = [];
    const background: Promise<unknown>[] = [];
    let enqueueErrors = 0;
    let faultsSkipped = 0;
    let connectionsDropped = 0;
    let n = 0;
    const tracker = new ResumptionTracker(db);
    tracker.start();
    const keySampler = new KeySampler(db);
    keySampler.start();
    const loadEnd = Date.now() + o.seconds * 1000;

    const enqueue = async (kind = pickKind(random)) => {
      const id = ++n;
      const specs = Array.from({ length: groupSize(kind) }, (_, part) => specFor(kind, id, random, CHAOS_TIMINGS.maxAttempts, part));
      const rs = await Promise.all(specs.map((spec) => enqueueViaApi(stack.apiUrl, spec, kind === 'key-burst' ? 4 : 1)));
      for (const r of rs) {
        planned.push(...r.planned);
        if (r.burst) bursts.push(r.burst);
        enqueueErrors += r.errors;
      }
      return rs[0]!.planned[0];
    };

    const loadLoop = (async () => {
      const every = 1000 / o.rate;
      for (let next = Date.now(); Date.now() < loadEnd && !aborted(); next += every) {
        background.push(enqueue());
        await sleep(Math.max(0, next + every - Date.now()), signal);
      }
    })();

    type Fault =
      | 'kill'
      | 'duplicate'
      | 'duplicate-at-enqueue'
      | 'rollback'
      | 'pause'
      | 'publisher-killed'
      | 'db-connections-dropped'
      | 'db-failover'
      | 'queue-purged';
    const cycle: Fault[] = [
      'duplicate',
      'kill',
      'queue-purged',
      'rollback',
      'pause',
      'publisher-killed',
      'db-failover',
      'db-connections-dropped',
      'duplicate-at-enqueue',
      'kill',
      'duplicate',
      'rollback',
      'pause',
      'duplicate-at-enqueue',
    ];
    // Seconds from a failover's end to the first claim after it, and from a purge to every job
    // that was pending then having been claimed again (or ended).
    const failovers: number[] = [];
    const purges: number[] = [];
    let purgedPending = 0;
    const untilTrue = async (q: () => Promise<boolean>, timeoutMs: number): Promise<boolean> => {
      for (const end = Date.now() + timeoutMs; Date.now() < end; await sleep(100)) if (await q().catch(() => false)) return true;
      return false;
    };
    const inject = async (f: Fault): Promise<void> => {
      switch (f) {
        case 'duplicate': {
          await injector.duplicate(undefined, 2);
          count('duplicate');
          return;
        }
        case 'duplicate-at-enqueue': {
          // The same message three times at once, before anyone claimed: workers race for the claim.
          const p = await enqueue('ledger-ok');
          if (!p) throw new FaultError(409, 'enqueue failed');
          const body = jobMessageBody(p.id, p.type);
          await Promise.all([queue.send([{ body }]), queue.send([{ body }])]);
          count('duplicate');
          return;
        }
        case 'kill': {
          if (workers.live().length < 2) throw new FaultError(409, 'too few live workers to kill one');
          const k = await injector.kill(undefined, { restartAfterMs: 1500 });
          count('kill');
          kills.push({ workerId: k.workerId, at: k.killedAt, jobs: tracker.track(k.jobs) });
          background.push(k.restarted.then((id) => id && count('restart')));
          return;
        }
        case 'pause': {
          if (workers.live().length < 2 || paused.size > 0) throw new FaultError(409, 'a pause is running or too few live workers');
          const target = await injector.busiestWorker();
          if (!target) throw new FaultError(409, 'no worker holds a job');
          paused.add(target);
          // Long enough for another worker to reclaim its jobs before it wakes up.
          const p = await injector.pause(target, CHAOS_TIMINGS.leaseSeconds + 4);
          count('pause');
          pauses.push({ workerId: p.workerId, at: Date.now(), jobs: tracker.track(p.jobs) });
          // Zombie refusals arrive in the seconds after SIGCONT.
          background.push(p.resumed.then(() => sleep(3000)).then(() => paused.delete(p.workerId)));
          return;
        }
        case 'rollback': {
          rolledBack.push(await injector.rollback());
          count('rollback');
          return;
        }
        case 'publisher-killed': {
          const r = await injector.publisherKilled();
          count('publisher-killed');
          planned.push({ id: r.jobId, type: r.spec.type, expect: 'succeeded', via: 'publisher-killed' });
          unpublished.push({ workerId: 'publisher', at: r.committedAt, jobs: tracker.track([{ id: r.jobId, attempt: 0 }]) });
          return;
        }
        case 'db-connections-dropped': {
          const r = await injector.dropDbConnections();
          count('db-connections-dropped');
          connectionsDropped += r.terminated;
          return;
        }
        case 'db-failover': {
          const r = await injector.dbFailover(o.failoverSeconds);
          count('db-failover');
          background.push(
            r.over.then(async () => {
              const back = new Date();
              const resumed = await untilTrue(
                async () => (await db!.query('SELECT 1 FROM jobs.job WHERE claimed_at > $1 LIMIT 1', [back])).rowCount === 1,
                60_000,
              );
              if (resumed) failovers.push(Date.now() - back.getTime());
            }),
          );
          return;
        }
        case 'queue-purged': {
          const { rows } = await db!.query<{ id: string }>("SELECT id FROM jobs.job WHERE finished_at IS NULL AND state = 'pending'");
          if (rows.length === 0) throw new FaultError(409, 'no pending job whose message a purge would lose');
          const at = new Date();
          await injector.purgeQueue();
          count('queue-purged');
          purgedPending += rows.length;
          const ids = rows.map((r) => r.id);
          background.push(
            untilTrue(
              async () =>
                (
                  await db!.query(
                    "SELECT 1 FROM jobs.job WHERE id = ANY($1::uuid[]) AND state = 'pending' AND (claimed_at IS NULL OR claimed_at < $2) LIMIT 1",
                    [ids, at],
                  )
                ).rowCount === 0,
              o.drainTimeoutSeconds * 1000,
            ).then((healed) => {
              if (healed) purges.push(Date.now() - at.getTime());
            }),
          );
          return;
        }
      }
    };
    const faultLoop = (async () => {
      const every = Math.max(1000, Math.min(3000, (o.seconds * 1000) / 12));
      await sleep(Math.min(2000, every), signal);
      // A fault that found nothing to act on (no running job yet, a pause under way) is tried
      // again at the next slot until it has happened once: a run must inject every kind.
      const again: Fault[] = [];
      for (let i = 0; Date.now() < loadEnd && !aborted(); ) {
        const f = again.shift() ?? cycle[i++ % cycle.length]!;
        const t0 = Date.now();
        try {
          await inject(f);
        } catch (err) {
          faultsSkipped++;
          const kind = f === 'duplicate-at-enqueue' ? 'duplicate' : f;
          if (!(faults[kind]! > 0) && !again.includes(f)) again.push(f);
          if (o.verbose) log(`fault ${f} skipped: ${(err as Error).message}`);
        }
        await sleep(Math.max(0, every - (Date.now() - t0)), signal);
      }
    })();

    await Promise.all([loadLoop, faultLoop]);
    const drainStart = Date.now();
    log(`load done: ${planned.length} jobs committed so far, ${Object.values(faults).reduce((a, b) => a + b, 0)} faults; draining…`);
    workers.resumeAll();
    await Promise.allSettled(background);
    const ids = planned.map((p) => p.id);
    const drainBy = Date.now() + o.drainTimeoutSeconds * 1000;
    for (;;) {
      const { rows } = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM jobs.job WHERE id = ANY($1::uuid[]) AND state NOT IN ('succeeded', 'dead', 'cancelled')`,
        [ids],
      );
      if (rows[0]!.n === 0 || Date.now() > drainBy || aborted()) break;
      await sleep(500, signal);
    }
    const drainSeconds = (Date.now() - drainStart) / 1000;
    // Dead-letter reports follow the state change: wait until every death is marked reported
    // (by its worker, or by a sweeper a grace period later when its worker could not send it).
    const reportGrace = deadReportTimings(CHAOS_TIMINGS).graceSeconds;
    const reportsBy = Date.now() + (reportGrace + 20) * 1000;
    while ((await countUnreportedDeaths(db)) > 0 && Date.now() < reportsBy && !aborted()) await sleep(500, signal);
    // A sweeper reports only deaths older than its grace; a worker reports its own within seconds.
    const { rows: late } = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM jobs.dead_job WHERE reported_at >= dead_at + $1::float8 * interval '1 second'`,
      [reportGrace],
    );
    await tracker.stop();
    await keySampler.stop();

    const [jobs, effects] = await Promise.all([collectJobs(db), collectEffects(db)]);
    const observations: Observations = {
      planned,
      bursts,
      rolledBack,
      kills,
      pauses,
      unpublished,
      jobs,
      ...effects,
      // Both priority lanes' queues and DLQs (the load is bulk; an urgent message would be a misroute to see).
      dlq: [...stack.sqs.inspect(stack.sqs.dlqName).bodies, ...stack.sqs.inspect(stack.sqs.urgentDlqName).bodies],
      queue: [...stack.sqs.inspect(stack.sqs.queueName).bodies, ...stack.sqs.inspect(stack.sqs.urgentQueueName).bodies],
      claimedJobIds: [...claimed],
      faults,
      events,
      enqueueErrors,
      failoverToClaim: failovers,
      purgeToHealed: purges,
      keySamples: keySampler.result(),
      deadReportedBySweeper: late[0]!.n,
      // Every worker that exited was one the kill fault SIGKILLed; the API never exits.
      unexpectedExits: [
        ...workers
          .list()
          .filter((w) => w.state === 'exited' && !kills.some((k) => k.workerId === w.id))
          .map((w) => `worker ${w.id} exited without being killed`),
        ...(stack.api.exitCode !== null || stack.api.signalCode !== null
          ? [`the API process exited (${stack.api.exitCode ?? stack.api.signalCode})`]
          : []),
      ],
    };
    const { log: _log, signal: _signal, ...options } = o;
    return {
      verdict: verify(observations),
      observations,
      options,
      timings: CHAOS_TIMINGS,
      notes: {
        zombieRefusals,
        heldAtKill: kills.reduce((s, k) => s + k.jobs.length, 0),
        heldAtPause: pauses.reduce((s, k) => s + k.jobs.length, 0),
        connectionsDropped,
        faultsSkipped,
        drainSeconds,
        failoverSeconds: o.failoverSeconds,
        purgedPending,
      },
    };
  } finally {
    await feed?.stop();
    await db?.end().catch(() => undefined);
    await stack.stop();
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    log(`stack stopped after ${Math.round((Date.now() - started) / 1000)} s`);
  }
}
