// Enqueue from ERP code without assembling the platform (issue 18 §3): createJobClient() reads the
// same environment as the services (DATABASE_URL or the RDS secret, with DATABASE_SECRET_ARN to
// follow its rotation: the process's role must be one the secret's policy admits; JOBS_QUEUE_URL and JOBS_URGENT_QUEUE_URL, AWS_REGION,
// JOBS_SQS_ENDPOINT, JOBS_MAX_ATTEMPTS), refuses a bad or missing setting with its variable, value
// and rule as they do, and builds the pool, the queue, the publisher and the client behind one
// object whose `enqueue` is typed by the registered job definitions:
//
//   const jobs = createJobClient();                        // process.env
//   const { afterCommit } = await jobs.enqueue(tx, { type: 'ledger.post', payload: { batch: 'B-7', entries: 40 } });
//   await tx.query('COMMIT'); await afterCommit();
//   await jobs.close();                                    // a script: nothing is lost
//
// `{ type: 'ledger.post', payload: { batch: 1 } }` does not compile (batch is a string), and
// neither does a type nobody registered; the payload type is the z.input of the type's schema.
// close() waits for the publishes in flight, publishes what this client enqueued in a committed
// transaction whose afterCommit() was never called (its outbox rows are still there), deletes the outbox rows of what was sent
// (otherwise the relay would publish them again) and closes the pool.

import type * as z from 'zod';
import { databaseSecretArnFromEnv, databaseUrlFromEnv, ENV, jobTimingsFromEnv } from '../config/env.ts';
import { keepFinishedDaysFromEnv } from '../config/retention.ts';
import { ConfigError, type RuleViolation } from '../config/rules.ts';
import { liveLocalEnvFile } from '../support/local-env.ts';
import { sqsFromEnv } from '../config/sqs.ts';
import { databaseCredentialSource } from '../db/credentials.ts';
import { createPool } from '../db/pool.ts';
import { JOB_DEFINITIONS, type RegisteredJob } from '../handlers/index.ts';
import { JobRegistry } from '../handlers/registry.ts';
import type { JobDefinition } from '../handlers/types.ts';
import { createLogger, type Logger } from '../observability/log.ts';
import { sqsLanes } from '../queue/lanes.ts';
import type { JobQueue } from '../queue/types.ts';
import type { Job } from '../domain/job.ts';
import { JobClient, type EnqueueResult, type EnqueueSpec } from './client.ts';
import type { Queryable } from './job-store.ts';
import { Publisher, type PublishEntry } from './outbox.ts';

type Env = Record<string, string | undefined>;

/** The payload a job definition accepts: its schema's input (defaults may be left out), else anything its parse takes. */
export type PayloadOf<D> = D extends { schema: infer S extends z.ZodType } ? z.input<S> : unknown;

/**
 * One enqueue of a job of definition `D` (a union of definitions gives a union of specs, told
 * apart by `type`): the payload is required unless every field of it is optional.
 */
export type JobSpec<D extends { type: string }> = D extends unknown
  ? { type: D['type'] } & (Record<never, never> extends PayloadOf<D> ? { payload?: PayloadOf<D> } : { payload: PayloadOf<D> }) &
      Omit<EnqueueSpec, 'type' | 'payload'>
  : never;

export interface TypedJobClient<D extends { type: string }> {
  /**
   * Enqueue in the caller's transaction `tx` (a client inside BEGIN). Call `afterCommit()` after
   * the COMMIT to publish at once; if the transaction rolls back, nothing is ever published.
   */
  enqueue(tx: Queryable, specs: JobSpec<D> | JobSpec<D>[]): Promise<{ jobs: EnqueueResult[]; afterCommit: () => Promise<void> }>;
  /** A one-off outside a transaction: enqueue in a transaction of its own, then publish. */
  enqueueNow(specs: JobSpec<D> | JobSpec<D>[]): Promise<EnqueueResult[]>;
  /** Publish what is still to go (see the top of this file), then close the pool. Enqueue refuses after it. */
  close(): Promise<void>;
  /** The untyped client underneath (cancel, the job store's reads). */
  readonly client: JobClient;
}

export interface CreateJobClientOptions<D extends JobDefinition<any, any, any>> {
  /** The job types to accept; default every registered one (runtime/handlers/index.ts). */
  jobs?: readonly D[];
  /** The queue to publish to; default SqsQueue on JOBS_QUEUE_URL (tests may pass a MemoryQueue). */
  queue?: JobQueue;
  /** Default: a logger named jobs-client (LOG_LEVEL); the client logs only publish failures. */
  log?: Logger;
  /** Connections the client may hold; default 4. */
  poolSize?: number;
}

/**
 * A client that enqueues jobs from ERP code, configured from `env` as the services are. Throws
 * ConfigError naming every bad or missing setting at once, before connecting to anything.
 */
export function createJobClient<D extends JobDefinition<any, any, any> = RegisteredJob>(
  env: Env = process.env,
  opts: CreateJobClientOptions<D> = {},
): TypedJobClient<D> {
  const violations: RuleViolation[] = [];
  const check = <T>(read: () => T): T | undefined => {
    try {
      return read();
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      violations.push(...err.violations);
      return undefined;
    }
  };
  const databaseUrl = check(() => databaseUrlFromEnv(env));
  const secretArn = check(() => databaseSecretArnFromEnv(env));
  // No queue given: the job queue's settings, a missing region refused as the services refuse it.
  const sqs = opts.queue ? null : check(() => sqsFromEnv(env));
  // The attempt cap of a job that sets none: the JOBS_* timings the worker checks.
  const timings = check(() => jobTimingsFromEnv(env));
  const keepFinishedDays = check(() => keepFinishedDaysFromEnv(env));
  if (violations.length > 0) throw new ConfigError('environment', violations.map(localStackHint));

  const log = opts.log ?? createLogger('jobs-client', env[ENV.logLevel] || 'info', env.JOBS_LOG_FORMAT);
  // DATABASE_SECRET with its ARN, as the services have them: a rotated password needs no restart here either.
  const credentials = secretArn ? databaseCredentialSource({ secretArn, databaseUrl: databaseUrl!, log }) : undefined;
  credentials?.start();
  const pool = createPool({
    url: databaseUrl!,
    ...(credentials ? { credentials } : {}),
    max: opts.poolSize ?? 4,
    applicationName: 'jobs-client',
    onError: (err) => log.warn({ err }, 'database connection dropped; it will be replaced'),
  });
  // Each lane's queue (JOBS_URGENT_QUEUE_URL beside JOBS_QUEUE_URL), so an urgent job goes to the urgent queue.
  const sqsClient = opts.queue ? null : sqsLanes(sqs!);
  const queue = opts.queue ?? sqsClient!.queue;
  const publisher = new Publisher(pool, queue, log);
  const registry = new JobRegistry([...(opts.jobs ?? (JOB_DEFINITIONS as readonly JobDefinition<any, any, any>[]))]);
  const client = new JobClient({
    pool,
    registry,
    publisher,
    defaultMaxAttempts: timings!.maxAttempts,
    defaultKeepFinishedDays: keepFinishedDays!,
  });

  // The jobs enqueue() made whose afterCommit() has not run yet (what close() publishes), and the
  // publishes in flight. Only the last UNPUBLISHED_KEEP_MS, and no payloads: a transaction that
  // rolled back never calls afterCommit(), and a long-running ERP server kept every such job
  // (API review); an older one that committed is the outbox relay's by now.
  const unpublished = new Map<object, { at: number; jobs: Pick<Job, 'id' | 'type' | 'lane' | 'runAfter'>[] }>();
  const inFlight = new Set<Promise<void>>();
  let closed: Promise<void> | null = null;
  const open = () => {
    if (closed) throw new Error('createJobClient: this client is closed (close() was called); create another to enqueue');
  };
  const track = (p: Promise<void>) => {
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
    return p;
  };

  return {
    client,
    async enqueue(tx, specs) {
      open();
      const r = await client.enqueue(tx, specs as EnqueueSpec | EnqueueSpec[]);
      // A duplicate made no outbox row: its job was published by whoever enqueued it first.
      const now = performance.now();
      for (const [k, u] of unpublished) {
        if (now - u.at < UNPUBLISHED_KEEP_MS) break;
        unpublished.delete(k);
      }
      const entries = {};
      const jobs = r.jobs.filter((j) => !j.duplicate).map(({ job: { id, type, lane, runAfter } }) => ({ id, type, lane, runAfter }));
      unpublished.set(entries, { at: now, jobs });
      return {
        jobs: r.jobs,
        afterCommit: () => {
          unpublished.delete(entries);
          return track(r.afterCommit());
        },
      };
    },
    async enqueueNow(specs) {
      open();
      return client.enqueueNow(specs as EnqueueSpec | EnqueueSpec[]);
    },
    close() {
      closed ??= (async () => {
        await Promise.all(inFlight);
        // Enqueued in a transaction that committed, but afterCommit() was never called: publish
        // now rather than wait for a relay. Rows of a transaction that rolled back (or is still
        // open) are not visible here and are left alone.
        try {
          const pending = new Map([...unpublished.values()].flatMap((u) => u.jobs).map((j) => [j.id, j]));
          unpublished.clear();
          if (pending.size > 0) {
            const { rows } = await pool.query<{ id: string; job_id: string }>(
              'SELECT id::text AS id, job_id::text AS job_id FROM jobs.outbox WHERE job_id = ANY($1::uuid[])',
              [[...pending.keys()]],
            );
            await publisher.publish(
              rows.map((r): PublishEntry => {
                const job = pending.get(r.job_id)!;
                return { outboxId: r.id, jobId: job.id, type: job.type, lane: job.lane, runAfter: job.runAfter };
              }),
            );
          }
          await publisher.drain();
        } finally {
          // Closed whether or not the publishes went out (what did not stays in the outbox for the relay).
          await credentials?.stop();
          await pool.end();
          sqsClient?.client.destroy();
          for (const w of sqsClient?.wires ?? []) w.destroy();
        }
      })();
      return closed;
    },
  };
}

/** How long the client remembers a job whose afterCommit() has not run, to publish it at close() (the relay publishes it after 2 s). */
const UNPUBLISHED_KEEP_MS = 60_000;

/**
 * The jobs command reads a running local stack's settings itself; an ERP script's client takes
 * only its environment. Beside a running stack whose settings are not exported, a missing
 * database says so, rather than that no stack runs.
 */
function localStackHint(v: RuleViolation): RuleViolation {
  if (v.rule !== 'database-configured') return v;
  const file = liveLocalEnvFile();
  const local = file
    ? `Locally: a stack runs in this directory, but its settings are not in this process's environment: export them first (set -a; . ${file}; set +a)`
    : 'Locally: `npm start` runs a stack and writes its settings to .jobs-local/env; export them first (set -a; . .jobs-local/env; set +a)';
  return { ...v, message: v.message.replace(/ Locally: .*$/, ` ${local}`) };
}
