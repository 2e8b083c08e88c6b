// Fault injection on the local stack's real processes: the live view's fault controls and the
// chaos run (scripts/chaos.ts) both act through this module, so what a person clicks is what the
// chaos run proves. Local only: it needs the stack's child processes and its database, and the
// API reaches it only when the stack passes JOBS_LIVE_FAULTS_URL (fault-control.ts).
//
// The faults, each on the real code path:
//   duplicate     — the message of a running job sent again, twice at once, while its owner works
//   kill          — SIGKILL of a worker holding jobs (no drain, no release), restarted after a while
//   pause         — SIGSTOP of a worker for longer than its lease, then SIGCONT: a zombie that
//                   wakes up believing it still owns jobs that others have reclaimed
//   rollback      — enqueue through JobClient in a transaction that rolls back
//   publisher-killed — a separate process commits an enqueue and is SIGKILLed before publishing
//   db-connections-dropped — pg_terminate_backend of every connection of a worker
//   db-failover   — every service connection reset and new ones refused for N seconds, through
//                   the stack's database proxy (db-proxy.ts): what an RDS Multi-AZ failover is
//   queue-purged  — PurgeQueue on the job queue: every message gone, the jobs still pending;
//                   the reconciler (store/reconciler.ts) must publish them again
// SQS errors come from a worker started with JOBS_FAULT_SQS_ERROR_RATE (queue/fault-injection.ts).

import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { PurgeQueueCommand } from '@aws-sdk/client-sqs';
import type pg from 'pg';
import type { EnqueueSpec, JobClient } from '../runtime/store/client.ts';
import { JOB_ID_SHAPE } from '../runtime/domain/ids.ts';
import type { LiveEvent } from '../runtime/live/events.ts';
import { jobMessageBody } from '../runtime/queue/message.ts';
import type { SqsQueue } from '../runtime/queue/sqs.ts';
import type { DbProxy } from './db-proxy.ts';

/** The injector's statements: reads that pick a target, and the one that drops connections. */
const FAULT_SQL = {
  /** What a worker holds right now: the jobs a kill or a pause interrupts. */
  heldBy: `SELECT id, type, attempt FROM jobs.job WHERE state = 'running' AND lease_owner = $1 ORDER BY lease_expires_at`,
  /** The live worker with the most live leases: the fault that hurts most. */
  busiestWorker: `
    SELECT lease_owner AS owner, count(*)::int AS n FROM jobs.job
     WHERE state = 'running' AND lease_owner = ANY($1::text[]) AND lease_expires_at > statement_timestamp()
     GROUP BY lease_owner ORDER BY n DESC, lease_owner LIMIT 1`,
  /** A running job whose lease has more than a second left: its owner is alive and working. */
  runningJob: `
    SELECT id, type, lease_owner FROM jobs.job
     WHERE state = 'running' AND lease_expires_at > statement_timestamp() + interval '1 second'
     ORDER BY random() LIMIT 1`,
  job: `SELECT id, type, lease_owner FROM jobs.job WHERE id = $1`,
  /** Every connection of one worker process (pools name theirs `jobs-worker <id>`), mid-transaction or idle. */
  pendingJobs: `SELECT count(*)::int AS n FROM jobs.job WHERE finished_at IS NULL AND state = 'pending'`,
  terminateWorkerConnections: `
    SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
     WHERE application_name = $1 AND pid <> pg_backend_pid()`,
} as const;

export type WorkerState = 'running' | 'paused' | 'exited';

export interface WorkerInfo {
  id: string;
  pid: number | null;
  state: WorkerState;
  /** Extra environment it was started with (e.g. SQS fault injection). */
  env: Record<string, string>;
  resumeAt: string | null;
}

interface Tracked {
  id: string;
  child: ChildProcess;
  env: Record<string, string>;
  paused: boolean;
  resumeTimer: NodeJS.Timeout | null;
  resumeAt: number | null;
  /** Settles the pending pause's `resumed`, however it ends (timer, resumeAll, kill). */
  onResumed: (() => void) | null;
  exited: Promise<void>;
}

/** The stack's worker processes by id, with the signals the faults need. */
export class LocalWorkers {
  private readonly byId = new Map<string, Tracked>();

  constructor(private readonly spawnWorker: (extraEnv: Record<string, string>) => { id: string; child: ChildProcess }) {}

  start(extraEnv: Record<string, string> = {}): { id: string; child: ChildProcess } {
    const w = this.spawnWorker(extraEnv);
    const exited = new Promise<void>((resolve) => {
      if (w.child.exitCode !== null || w.child.signalCode !== null) resolve();
      else w.child.once('exit', () => resolve());
    });
    this.byId.set(w.id, {
      id: w.id,
      child: w.child,
      env: extraEnv,
      paused: false,
      resumeTimer: null,
      resumeAt: null,
      onResumed: null,
      exited,
    });
    return w;
  }

  list(): WorkerInfo[] {
    return [...this.byId.values()].map((t) => ({
      id: t.id,
      pid: t.child.pid ?? null,
      state: exited(t.child) ? 'exited' : t.paused ? 'paused' : 'running',
      env: t.env,
      resumeAt: t.resumeAt ? new Date(t.resumeAt).toISOString() : null,
    }));
  }

  /** Workers that are running and not paused. */
  live(): string[] {
    return this.list()
      .filter((w) => w.state === 'running')
      .map((w) => w.id);
  }

  child(id: string): ChildProcess | undefined {
    return this.byId.get(id)?.child;
  }

  /** SIGKILL, and wait for the process to be gone. */
  async kill(id: string): Promise<void> {
    const t = this.require(id);
    if (t.resumeTimer) clearTimeout(t.resumeTimer);
    t.paused = false;
    t.resumeAt = null;
    t.onResumed?.();
    t.onResumed = null;
    t.child.kill('SIGKILL');
    await t.exited;
  }

  /** SIGSTOP now, SIGCONT after `seconds`. Resolves once stopped; `resumed` once continued. */
  pause(id: string, seconds: number, onResume?: () => void): { resumed: Promise<void> } {
    const t = this.require(id);
    if (t.paused) throw new Error(`${id} is already paused`);
    t.child.kill('SIGSTOP');
    t.paused = true;
    t.resumeAt = Date.now() + seconds * 1000;
    const resumed = new Promise<void>((resolve) => {
      t.onResumed = () => {
        onResume?.();
        resolve();
      };
      t.resumeTimer = setTimeout(() => this.resume(id), seconds * 1000);
    });
    return { resumed };
  }

  resume(id: string): void {
    const t = this.byId.get(id);
    if (!t?.paused) return;
    if (t.resumeTimer) clearTimeout(t.resumeTimer);
    t.resumeTimer = null;
    t.paused = false;
    t.resumeAt = null;
    if (!exited(t.child)) t.child.kill('SIGCONT');
    const done = t.onResumed;
    t.onResumed = null;
    done?.();
  }

  /** SIGCONT every paused worker (before stopping the stack: a stopped process cannot drain). */
  resumeAll(): void {
    for (const id of this.byId.keys()) this.resume(id);
  }

  private require(id: string): Tracked {
    const t = this.byId.get(id);
    if (!t) throw new FaultError(404, `no worker ${id} (workers: ${[...this.byId.keys()].join(', ') || 'none'})`);
    if (exited(t.child)) throw new FaultError(409, `worker ${id} has exited`);
    return t;
  }
}

function exited(c: ChildProcess): boolean {
  return c.exitCode !== null || c.signalCode !== null;
}

/** A fault request that cannot be carried out; `status` is what the control endpoint answers. */
export class FaultError extends Error {
  override name = 'FaultError';
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export interface FaultInjectorOptions {
  pool: pg.Pool;
  /** The job queue, for duplicate deliveries and the purge. */
  queue: SqsQueue;
  /** The proxy the services reach PostgreSQL through (the failover fault); absent: no such fault. */
  dbProxy?: DbProxy;
  client: JobClient;
  workers: LocalWorkers;
  leaseSeconds: number;
  /** Environment for the publisher child (the stack's DATABASE_URL, queue, endpoint). */
  env: Record<string, string>;
  repoRoot: string;
  /** Where fault events go (the live event bus). */
  emit?: (e: LiveEvent) => void;
}

export interface HeldJob {
  id: string;
  type: string;
  attempt: number;
}

export const FAULT_KINDS = [
  'duplicate',
  'kill',
  'pause',
  'rollback',
  'publisher-killed',
  'db-connections-dropped',
  'db-failover',
  'queue-purged',
  'enqueue',
] as const;
export type FaultRequest = (typeof FAULT_KINDS)[number];

export class FaultInjector {
  constructor(private readonly o: FaultInjectorOptions) {}

  get workers(): LocalWorkers {
    return this.o.workers;
  }

  /** Run one fault by name (the control endpoint's entry point). */
  async inject(kind: string, body: Record<string, unknown> = {}): Promise<unknown> {
    const str = (k: string) => (typeof body[k] === 'string' && body[k] ? (body[k] as string) : undefined);
    const num = (k: string) => (typeof body[k] === 'number' && Number.isFinite(body[k]) ? (body[k] as number) : undefined);
    switch (kind) {
      case 'duplicate':
        return this.duplicate(str('jobId'), num('copies'));
      case 'kill':
        return this.kill(str('workerId'), { restartAfterMs: num('restartAfterMs') ?? 2000 });
      case 'pause':
        return this.pause(str('workerId'), num('seconds'));
      case 'rollback':
        return this.rollback();
      case 'publisher-killed':
        return this.publisherKilled();
      case 'db-connections-dropped':
        return this.dropDbConnections(str('workerId'));
      case 'db-failover':
        return this.dbFailover(num('seconds'));
      case 'queue-purged':
        return this.purgeQueue();
      case 'enqueue':
        return this.enqueueSome(num('count') ?? 6);
      default:
        throw new FaultError(404, `no fault "${kind}" (faults: ${FAULT_KINDS.join(', ')})`);
    }
  }

  /** Jobs a worker holds right now (running, lease owner). */
  async heldBy(workerId: string): Promise<HeldJob[]> {
    const { rows } = await this.o.pool.query<HeldJob>(FAULT_SQL.heldBy, [workerId]);
    return rows;
  }

  /** The live worker holding the most running jobs (null if none holds any). */
  async busiestWorker(exclude: string[] = []): Promise<string | null> {
    const live = this.o.workers.live().filter((w) => !exclude.includes(w));
    if (live.length === 0) return null;
    const { rows } = await this.o.pool.query<{ owner: string; n: number }>(FAULT_SQL.busiestWorker, [live]);
    return rows[0]?.owner ?? null;
  }

  /** Send a running job's message again, `copies` at once, while its owner holds a live lease. */
  async duplicate(jobId?: string, copies = 2): Promise<{ jobId: string; type: string; owner: string | null; copies: number }> {
    const { rows } = await this.o.pool.query<{ id: string; type: string; lease_owner: string | null }>(
      jobId ? FAULT_SQL.job : FAULT_SQL.runningJob,
      jobId ? [jobId] : [],
    );
    const job = rows[0];
    if (!job) throw new FaultError(409, jobId ? `no job ${jobId}` : 'no running job to duplicate right now; enqueue some work first');
    const n = Math.max(1, Math.min(10, Math.round(copies)));
    const body = jobMessageBody(job.id, job.type);
    await Promise.all(Array.from({ length: n }, () => this.o.queue.send([{ body }])));
    this.emit({
      fault: 'duplicate',
      jobId: job.id,
      type: job.type,
      detail: `${n} extra copies of the message sent while ${job.lease_owner ?? 'nobody'} holds the job`,
    });
    return { jobId: job.id, type: job.type, owner: job.lease_owner, copies: n };
  }

  /** SIGKILL a worker (default: the busiest), noting the jobs it held; restart a worker in its place later. */
  async kill(
    workerId?: string,
    opts: { restartAfterMs?: number } = {},
  ): Promise<{ workerId: string; pid: number | null; jobs: HeldJob[]; killedAt: number; restarted: Promise<string | null> }> {
    const id = workerId ?? (await this.busiestWorker()) ?? this.o.workers.live()[0];
    if (!id) throw new FaultError(409, 'no running worker to kill');
    const jobs = await this.heldBy(id);
    const info = this.o.workers.list().find((w) => w.id === id);
    await this.o.workers.kill(id);
    const killedAt = Date.now();
    this.emit({
      fault: 'kill',
      detail: `kill -9 ${id} (pid ${info?.pid ?? '?'}) holding ${jobs.length} job${jobs.length === 1 ? '' : 's'}`,
      workerId: id,
      ...(jobs[0] ? { jobId: jobs[0].id, type: jobs[0].type, attempt: jobs[0].attempt } : {}),
    });
    const restartAfterMs = opts.restartAfterMs ?? 2000;
    const restarted =
      restartAfterMs < 0
        ? Promise.resolve(null)
        : new Promise<string | null>((resolve) =>
            setTimeout(() => {
              try {
                const w = this.o.workers.start(info?.env ?? {});
                this.emit({ fault: 'restart', detail: `started ${w.id} in place of ${id}`, workerId: w.id });
                resolve(w.id);
              } catch {
                resolve(null);
              }
            }, restartAfterMs),
          );
    return { workerId: id, pid: info?.pid ?? null, jobs, killedAt, restarted };
  }

  /** SIGSTOP a worker (default: the busiest) for longer than the lease, then SIGCONT. */
  async pause(
    workerId?: string,
    seconds?: number,
  ): Promise<{ workerId: string; jobs: HeldJob[]; seconds: number; resumed: Promise<void> }> {
    const id = workerId ?? (await this.busiestWorker()) ?? this.o.workers.live()[0];
    if (!id) throw new FaultError(409, 'no running worker to pause');
    const s = seconds ?? this.o.leaseSeconds + 3;
    if (!(s > 0 && s <= 600)) throw new FaultError(400, `seconds: must be from 0 to 600 (got ${s})`);
    const jobs = await this.heldBy(id);
    const { resumed } = this.o.workers.pause(id, s, () =>
      this.emit({
        fault: 'resume',
        workerId: id,
        detail: `SIGCONT ${id} after ${s} s: it wakes up believing it holds ${jobs.length} job${jobs.length === 1 ? '' : 's'}`,
      }),
    );
    this.emit({
      fault: 'pause',
      workerId: id,
      detail: `SIGSTOP ${id} for ${s} s (lease ${this.o.leaseSeconds} s) holding ${jobs.length} job${jobs.length === 1 ? '' : 's'}`,
      ...(jobs[0] ? { jobId: jobs[0].id, type: jobs[0].type, attempt: jobs[0].attempt } : {}),
    });
    return { workerId: id, jobs, seconds: s, resumed };
  }

  /** Enqueue through JobClient in a transaction that then rolls back: the job must never exist or run. */
  async rollback(spec?: EnqueueSpec): Promise<{ jobIds: string[]; batch: string }> {
    const batch = `RB-${randomUUID().slice(0, 8)}`;
    const s = spec ?? { type: 'ledger.post', payload: { batch, entries: 5 } };
    const tx = await this.o.pool.connect();
    let jobIds: string[];
    try {
      await tx.query('BEGIN');
      const { jobs } = await this.o.client.enqueue(tx, s);
      jobIds = jobs.map((j) => j.job.id);
      await tx.query('ROLLBACK');
    } catch (err) {
      await tx.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      tx.release();
    }
    this.emit({
      fault: 'rollback',
      jobId: jobIds[0]!,
      type: s.type,
      detail: `enqueued ${jobIds.length} job${jobIds.length === 1 ? '' : 's'} and rolled back: nothing may be published or run`,
    });
    return { jobIds, batch: (s.payload as { batch?: string }).batch ?? batch };
  }

  /** A separate process commits an enqueue and is SIGKILLed before it publishes. */
  async publisherKilled(spec?: EnqueueSpec): Promise<{ jobId: string; committedAt: number; spec: EnqueueSpec }> {
    const s = spec ?? { type: 'ledger.post', payload: { batch: `PK-${randomUUID().slice(0, 8)}`, entries: 7 } };
    const child = spawn(process.execPath, ['--import', 'tsx', join(this.o.repoRoot, 'dev/publisher-child.ts'), JSON.stringify(s)], {
      cwd: this.o.repoRoot,
      env: { ...process.env, ...this.o.env, JOBS_LOCAL_ENV: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-2000);
    });
    const jobId = await new Promise<string>((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new FaultError(500, `the publisher process did not commit within 30 s: ${stderr.slice(-500)}`));
      }, 30_000);
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = new RegExp(`committed (${JOB_ID_SHAPE})`, 'i').exec(out);
        if (m) {
          // Between COMMIT and publish: now.
          child.kill('SIGKILL');
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new FaultError(500, `the publisher process exited (${code ?? signal}) before committing: ${stderr.slice(-500)}`));
      });
    });
    const committedAt = Date.now();
    await new Promise<void>((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once('exit', () => r())));
    this.emit({
      fault: 'publisher-killed',
      jobId,
      type: s.type,
      detail: `publisher pid ${child.pid} killed -9 after COMMIT, before publishing: the outbox relay must publish it`,
    });
    return { jobId, committedAt, spec: s };
  }

  /** pg_terminate_backend every connection of a worker (default: the busiest live one). */
  async dropDbConnections(workerId?: string): Promise<{ workerId: string; terminated: number }> {
    const id = workerId ?? (await this.busiestWorker()) ?? this.o.workers.live()[0];
    if (!id) throw new FaultError(409, 'no running worker whose connections to drop');
    const { rows } = await this.o.pool.query<{ n: number }>(FAULT_SQL.terminateWorkerConnections, [`jobs-worker ${id}`.slice(0, 63)]);
    const n = rows[0]?.n ?? 0;
    this.emit({
      fault: 'db-connections-dropped',
      workerId: id,
      detail: `pg_terminate_backend: ${n} connection${n === 1 ? '' : 's'} of ${id} dropped`,
    });
    return { workerId: id, terminated: n };
  }

  /**
   * A database failover: every connection of the API and the workers reset, new ones refused for
   * `seconds` (default 20, at most 120). Nothing may exit; afterwards every job ends exactly once.
   */
  async dbFailover(seconds = 20): Promise<{ seconds: number; reset: number; endsAt: number; over: Promise<void> }> {
    const proxy = this.o.dbProxy;
    if (!proxy) throw new FaultError(409, 'this stack has no database proxy to fail over');
    if (proxy.down) throw new FaultError(409, 'a database failover is already under way');
    if (!(seconds > 0 && seconds <= 120)) throw new FaultError(400, `seconds: must be from 0 to 120 (got ${seconds})`);
    const { reset, endsAt, over } = proxy.failover(seconds);
    this.emit({
      fault: 'db-failover',
      detail: `database failover: ${reset} connection${reset === 1 ? '' : 's'} reset, new ones refused for ${seconds} s`,
    });
    void over.then(() => this.emit({ fault: 'db-failover-over', detail: `database reachable again after ${seconds} s` }));
    return { seconds, reset, endsAt, over };
  }

  /** PurgeQueue on the job queue: every message is gone while their jobs still need them. */
  async purgeQueue(): Promise<{ pendingJobs: number; purgedAt: number }> {
    const { rows } = await this.o.pool.query<{ n: number }>(FAULT_SQL.pendingJobs);
    await this.o.queue.client.send(new PurgeQueueCommand({ QueueUrl: this.o.queue.queueUrl }));
    const n = rows[0]?.n ?? 0;
    this.emit({
      fault: 'queue-purged',
      detail: `PurgeQueue on the job queue with ${n} pending job${n === 1 ? '' : 's'}: the reconciler must publish them again`,
    });
    return { pendingJobs: n, purgedAt: Date.now() };
  }

  /** Some work to watch: ledger batches and a costing run of a few seconds each. */
  async enqueueSome(count: number): Promise<{ jobIds: string[] }> {
    const n = Math.max(1, Math.min(50, Math.round(count)));
    const tag = randomUUID().slice(0, 6);
    const specs: EnqueueSpec[] = Array.from({ length: n }, (_, i) =>
      i % 4 === 3
        ? {
            type: 'inventory.cost',
            payload: { store: `S${tag}-${i}`, period: '2026-10', skus: 120, movementsPerSku: 50, chunkSize: 10, workMsPerChunk: 600 },
          }
        : {
            type: 'ledger.post',
            payload: {
              batch: `LV-${tag}-${i}`,
              entries: 10 + i,
              workMs: 4000 + 1500 * (i % 4),
              ...(i % 5 === 4 ? { failAttempts: 1 } : {}),
            },
          },
    );
    const res = await this.o.client.enqueueNow(specs);
    this.emit({ fault: 'enqueue', detail: `enqueued ${n} jobs` });
    return { jobIds: res.map((r) => r.job.id) };
  }

  private emit(e: Omit<LiveEvent, 'kind' | 'workerId' | 'at'> & { workerId?: string }): void {
    this.o.emit?.({ kind: 'fault', workerId: 'faults', at: new Date().toISOString(), ...e } as LiveEvent);
  }
}
