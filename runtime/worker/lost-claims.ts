// Claims whose answer the database connection lost. A claim is one UPDATE in autocommit: when
// its connection resets or refuses mid-statement (a failover, a proxy restart, a read timeout)
// the UPDATE may have committed, and its jobs then run under this worker's lease with no handler.
// Left alone, each waited for its lease to run out and the rescuer, and spent an attempt without
// running: a job on its last attempt died (`LeaseExpired`) having never started. So the fetcher
// notes the jobs such a claim statement named (not those of a statement that answered: their
// attempts, even one whose completion then failed, are the worker's to settle), and once the
// database answers again, with no claim of its own in flight and before it receives anything
// more, releases the ones still running under this worker's id that it does not hold:
// back to pending unstarted (no attempt spent, attempt log "released" with the reason), with a
// fresh message through the outbox (the one handed back may meanwhile have met the unused lease
// and been deleted as a duplicate). The worker id is unique to the process (defaultWorkerId; a
// JOBS_WORKER_ID shared by two processes would let one release what the other claimed, fenced
// but wasted).
//
// The same befalls a job claimed ahead of a free slot when an outage outlasts its lease (the
// heartbeat gives it up unstarted, heartbeat.ts), and an attempt whose own transaction lost its
// connection (completer.ts releaseInterrupted): the worker releases them with no attempt spent,
// fenced by the attempt it knows (this worker may have claimed the job again since), now or,
// the database not answering, once it does. So does a worker stopping in an outage: the jobs it
// could not hand back are released once the database answers within the drain (worker.ts). An interrupted attempt is released so at most
// INTERRUPTED_RELEASE_LIMIT times a job (counted in its attempt log): past that, a handler that
// keeps losing its connection (one whose statement crashes the server) counts its attempts.

import { isDatabaseUnavailable } from '../db/unavailable.ts';
import type { NotedToken, ReleasedJob } from '../store/job-store.ts';
import type { WorkerContext } from './held.ts';

/**
 * Why a job is noted: its claim's answer was lost, it was given up unstarted when its lease ran out
 * in an outage, its attempt lost its connection, or the worker stopping could not hand it back.
 */
export type LostKind = 'answer-lost' | 'lease-ran-out' | 'connection-lost' | 'stopping' | 'hand-back-lost';

/**
 * The releases an attempt whose own transaction lost its connection gets per job, its attempt not
 * counted; past it, such an attempt counts as any failure (its cap ends a handler that keeps
 * cutting its connection).
 */
export const INTERRUPTED_RELEASE_LIMIT = 5;

const WHY: Record<LostKind, { reason: (workerId: string) => string; log: string; event: string }> = {
  'answer-lost': {
    reason: (w) => `claimed by worker ${w}, whose claim got no answer from the database (a failover or a reset); released unstarted`,
    log: 'a claim the database committed but whose answer was lost: job released unstarted (no attempt spent) and published again',
    event: 'claim answer lost in a database failover',
  },
  'lease-ran-out': {
    reason: (w) =>
      `claimed ahead by worker ${w}, whose lease on it ran out before it started while the database did not answer; released unstarted`,
    log: 'a job claimed ahead whose lease ran out in a database outage before it started: released unstarted (no attempt spent) and published again',
    event: 'lease ran out in a database outage before it started',
  },
  'hand-back-lost': {
    reason: (w) =>
      `claimed ahead by worker ${w}, which had no slot for it soon and handed it back; the answer was lost (a failover or a reset); released unstarted`,
    log: 'a job claimed ahead whose hand-back got no answer from the database: released unstarted (no attempt spent) and published again',
    event: 'hand-back answer lost in a database failover',
  },
  stopping: {
    reason: (w) => `worker ${w} stopped before the job finished (or started), the database not answering then; released once it answered`,
    log: 'a job the stopping worker could not hand back while the database did not answer: released (attempt not counted) and published again',
    event: 'worker stopping in a database outage',
  },
  'connection-lost': {
    reason: (w) => `worker ${w} lost the job's database connection (a failover or a reset); its attempt not counted`,
    log: 'an attempt whose database connection was lost: released (attempt not counted) and published again',
    event: "the job's database connection lost",
  },
};

export class LostClaims {
  /** Jobs noted, with why and the attempt they ran under where known, not yet checked. */
  private readonly ids = new Map<string, { kind: LostKind; attempt: number | null }>();

  constructor(private readonly ctx: WorkerContext) {}

  get pending(): boolean {
    return this.ids.size > 0;
  }

  /**
   * Run `claim`, a statement claiming `ids` for this worker; when it fails with the database
   * unavailable (it may have committed, its answer lost), note them. Statements that answered, and
   * jobs this worker started since, are not noted: their attempts are the worker's to settle.
   */
  async watch<T>(ids: readonly string[], claim: () => Promise<T>): Promise<T> {
    try {
      return await claim();
    } catch (err) {
      if (isDatabaseUnavailable(err))
        this.note(
          ids.map((id) => ({ id, attempt: null })),
          'answer-lost',
        );
      throw err;
    }
  }

  /** Note jobs to release once the database answers (those still running under this worker, at that attempt where given, that it does not hold). */
  note(tokens: readonly NotedToken[], kind: LostKind): void {
    // The first note says why (a stop's release failing after an interrupted attempt was noted keeps its `interrupted` mark).
    for (const t of tokens) if (!this.ids.has(t.id)) this.ids.set(t.id, { kind, attempt: t.attempt });
  }

  /** A noted job this worker claimed since (a later claim answered): not lost. */
  forget(id: string): void {
    this.ids.delete(id);
  }

  /**
   * Release these jobs now (fenced as the statement says: sql-lost-claims.ts), log and publish
   * them; throws when the database could not be asked. Returns those released.
   */
  async releaseNow(
    tokens: NotedToken[],
    kind: LostKind,
    /** Called as soon as the database has answered, before the publish: a held job is settled in that turn (a renewal answered meanwhile must not read it as a lost lease). */
    answered: (released: ReleasedJob[]) => void = () => undefined,
  ): Promise<ReleasedJob[]> {
    const { ctx } = this;
    const why = WHY[kind];
    const limit = kind === 'connection-lost' ? INTERRUPTED_RELEASE_LIMIT : null;
    const released = await ctx.store.releaseLostClaims(tokens, ctx.workerId, why.reason(ctx.workerId), limit);
    answered(released);
    for (const j of released) {
      ctx.log.warn({ jobId: j.id, type: j.type, attempt: j.attempt }, why.log);
      ctx.emit('released', j, why.event);
    }
    if (released.length > 0) {
      // Durable in the outbox already: a publish failing here is the relay's to repeat.
      await ctx.opts.publisher
        .publish(released.map((j) => ({ outboxId: j.outboxId, jobId: j.id, type: j.type, lane: j.lane })))
        .catch((err: unknown) => ctx.log.warn({ err }, 'publish after a release failed; the outbox relay sends them'));
      // Their key's or type's next job may start now (key-wake.ts; the row as released no longer says whether it held a type's slot).
      ctx.keyWake.nudge();
    }
    return released;
  }

  /**
   * Release the noted jobs left running under this worker. Returns the error when the database
   * is unavailable again (the ids stay noted, for the next time it answers), else null; any other
   * failure is logged and the ids dropped (their leases run out and the rescuer takes them).
   */
  async release(): Promise<unknown> {
    if (this.ids.size === 0) return null;
    const { ctx } = this;
    const noted = [...this.ids];
    // A job this worker holds was claimed again (the answer came, or a later claim took it): not
    // lost; one it gave up at a stop (released) is.
    const byKind = new Map<LostKind, NotedToken[]>();
    for (const [id, n] of noted)
      if (!ctx.held.get(id) || ctx.held.get(id)!.released) byKind.set(n.kind, [...(byKind.get(n.kind) ?? []), { id, attempt: n.attempt }]);
    const done = () => {
      // Only those asked about: a claim failing meanwhile noted others.
      for (const [id, n] of noted) if (this.ids.get(id) === n) this.ids.delete(id);
    };
    try {
      for (const [kind, tokens] of byKind) await this.releaseNow(tokens, kind);
      done();
      return null;
    } catch (err) {
      if (isDatabaseUnavailable(err)) return err;
      done();
      ctx.log.error(
        { err },
        'could not release the jobs left running under this worker; their leases run out and the rescuer re-queues them',
      );
      return null;
    }
  }

  /** At a graceful stop: release what is noted, or say what is left (the database not answering) for the rescuer. */
  async releaseAtStop(): Promise<void> {
    if (this.ids.size === 0) return;
    const err = await this.release();
    if (this.ids.size > 0)
      this.ctx.log.warn(
        { err, jobs: [...this.ids.keys()] },
        'stopping with jobs left running under this worker that the database could not be asked to release: their leases run out and the rescuer re-queues them, their attempts counted',
      );
  }
}
