// What a worker does before its first claim (worker.ts start; its first receive overlaps it):
// record its job types and their fleet limits, then open the connections every worker uses from
// its first job.

import { workerPoolSize } from '../config/rules.ts';
import { warmPool } from '../db/pool.ts';
import type { JobStore } from '../store/job-store.ts';
import { registerJobTypes } from '../store/job-types.ts';
import type { WorkerContext } from './held.ts';

/** Connections a worker opens before its first claim (warm). */
const WARM_CONNECTIONS = 4;

/**
 * This worker's job types are registered (what SQL callers may enqueue, migration 0012; their
 * payload fields, 0020) and their fleet limits (`defineJob({ maxRunning })`) put in force before
 * its first claim; unreachable, the last worker's stay.
 */
export async function registerTypes(ctx: WorkerContext, store: JobStore): Promise<void> {
  const { registry, pool, timings, keepFinishedDays } = ctx.opts;
  const limits = registry.types().map((type) => ({ type, maxRunning: registry.get(type)!.maxRunning ?? null }));
  try {
    await registerJobTypes(
      pool,
      registry,
      { maxAttempts: timings.maxAttempts, ...(keepFinishedDays ? { keepFinishedDays } : {}) },
      ctx.workerId,
    );
    const changed = await store.syncTypeLimits(limits, ctx.workerId);
    if (changed.length > 0) {
      ctx.log.info({ types: changed, limits: limits.filter((l) => changed.includes(l.type)) }, 'job type fleet limits changed');
      ctx.keyWake.nudge();
    }
  } catch (err) {
    ctx.log.warn({ err }, "could not write the job types' fleet limits; the limits in force stay as the last worker wrote them");
  }
}

/**
 * Open the connections every worker uses from its first job before the first claim
 * (db/pool.ts warmPool): the claims, the batched completions, the heartbeat and one handler's
 * transaction. The rest of the pool opens on demand and stays open (SERVICE_IDLE_TIMEOUT_MS). Not
 * the whole pool: a backend costs PostgreSQL ~30 ms of CPU to start here, and a worker of
 * no-op or short jobs never uses more than a few; measured (20,000 no-op jobs in-process,
 * prefetch 490), warming all 12 took PostgreSQL's CPU per 1,000 jobs from 0.035 s to 0.055 s.
 */
export async function warm(ctx: WorkerContext): Promise<void> {
  if (ctx.stopping) return;
  const { pool, timings } = ctx.opts;
  const n = Math.min(pool.options.max ?? 10, workerPoolSize(timings.concurrency), WARM_CONNECTIONS);
  const { opened, ms } = await warmPool(pool, n);
  ctx.log.debug({ opened, ms: Math.round(ms) }, 'database connections opened');
}
