// Dead jobs for on-call: list and show them with their reason, redrive them (back to pending
// with a fresh attempt budget, re-published through the outbox, recorded with who asked and
// when), or discard them with a reason. The statements and why they are race-free are in sql.ts;
// this file adds the batching, the publish after COMMIT and the answers a person reads.
//
// What redrive never does: touch a job that is not dead. A succeeded, running, pending or
// cancelled job named by id is reported as skipped with its state, and nothing changes.

import type pg from 'pg';
import { ValidationError } from '../domain/errors.ts';
import type { Job, JobState } from '../domain/job.ts';
import type { Lane } from '../domain/lanes.ts';
import type { Publisher } from '../store/outbox.ts';
import { withTransaction } from '../db/transaction.ts';
import { run } from '../store/job-store.ts';
import { operatorName, rowToAction, rowToOpsJob, runOps, type OperatorAction, type OpsJob } from './db.ts';

export interface DeadJobFilter {
  /** These jobs only (explicit ids also reach discarded jobs). */
  ids?: string[];
  type?: string;
  /** Jobs of this lane only (the urgent DLQ's alarm: its dead jobs, not the bulk backlog's). */
  lane?: Lane;
  /** Died at or after. */
  since?: Date;
  /** Died before. */
  until?: Date;
}

export interface DeadJobListRequest extends DeadJobFilter {
  includeDiscarded?: boolean;
  limit: number;
  cursor?: string;
}

export interface RedriveRequest extends DeadJobFilter {
  /** Every dead job (not discarded); required when no id, type or time bound is given. */
  all?: boolean;
  by: string;
  reason?: string | null;
  /** The new attempt budget; default: the job's own max_attempts. */
  maxAttempts?: number | null;
  /** Drop the checkpoint (and progress) so the handler starts over instead of resuming. */
  fromScratch?: boolean;
  /** Report what would happen; change nothing. */
  dryRun?: boolean;
}

export interface DiscardRequest extends DeadJobFilter {
  all?: boolean;
  by: string;
  reason: string;
  /** Say which jobs would be discarded (at most one batch, REDRIVE_BATCH), change nothing. */
  dryRun?: boolean;
}

export interface Skipped {
  id: string;
  type: string | null;
  state: JobState | null;
  reason: string;
  /** The state asked for already holds (a discard of a job already discarded): not a failure. */
  alreadyDone?: true;
}

export interface RedriveReport {
  dryRun: boolean;
  /** Redriven (or, on a dry run, the dead jobs that would be). */
  jobs: OpsJob[];
  /** Dry run only: ids of the jobs that would be redriven. */
  wouldRedrive: string[];
  skipped: Skipped[];
  /** Of those redriven (or that would be), the ones an operator had discarded: by whom and why (reached only by id). */
  wereDiscarded: { id: string; by: string; reason: string }[];
}

export interface DiscardReport {
  /** Discarded (or, on a dry run, those that would be: `dryRun`). */
  jobs: OpsJob[];
  skipped: Skipped[];
  dryRun?: boolean;
}

/** Rows per transaction when a filter matches many dead jobs. */
export const REDRIVE_BATCH = 500;
const UNIQUE_VIOLATION = '23505';

export class DeadJobService {
  constructor(
    private readonly pool: pg.Pool,
    private readonly publisher: Publisher,
  ) {}

  async list(req: DeadJobListRequest): Promise<{ jobs: OpsJob[]; nextCursor: string | null }> {
    const cursor = req.cursor ? decodeDeadCursor(req.cursor) : null;
    const { rows } = await runOps(this.pool, 'deadJobList', [
      ...filterValues(req),
      req.includeDiscarded ?? false,
      cursor?.t ?? null,
      cursor?.i ?? null,
      req.limit + 1,
      req.lane ?? null,
    ]);
    const page = rows.slice(0, req.limit);
    const last = page.at(-1);
    return {
      jobs: page.map(rowToOpsJob),
      nextCursor: rows.length > req.limit && last ? encodeDeadCursor(last.dead_at_key as string, last.id as string) : null,
    };
  }

  /** A job (dead or not: a redriven job shows its history too) with what operators did to it. */
  async get(id: string): Promise<{ job: OpsJob; actions: OperatorAction[]; dbNow: Date } | null> {
    const { rows } = await runOps(this.pool, 'jobGetWithNow', [id]);
    if (!rows[0]) return null;
    const actions = await runOps(this.pool, 'operatorActionsForJob', [id]);
    return { job: rowToOpsJob(rows[0]), actions: actions.rows.map(rowToAction), dbNow: rows[0].db_now as Date };
  }

  async redrive(req: RedriveRequest): Promise<RedriveReport> {
    checkScope(req, 'redrive');
    const maxAttempts = req.maxAttempts ?? null;
    if (maxAttempts !== null && (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 100)) {
      throw new ValidationError('maxAttempts', `must be a whole number from 1 to 100 (got ${String(maxAttempts)})`);
    }
    const by = operatorName(req.by);
    const reason = req.reason?.trim() ? req.reason.trim().slice(0, 1000) : null;
    const dryRun = req.dryRun ?? false;
    const explicit = req.ids !== undefined;
    const report: RedriveReport = { dryRun, jobs: [], wouldRedrive: [], skipped: [], wereDiscarded: [] };
    let cursor: { t: string; i: string } | null = null;
    for (;;) {
      const rows = await this.redriveBatch([
        ...filterValues(req),
        explicit,
        cursor?.t ?? null,
        cursor?.i ?? null,
        explicit ? Math.max(1, req.ids!.length) : REDRIVE_BATCH,
        by,
        reason,
        maxAttempts,
        req.fromScratch ?? false,
        dryRun,
        req.lane ?? null,
      ]);
      for (const r of rows) {
        if (r.skip_reason)
          report.skipped.push({ id: r.target_id as string, type: r.target_type as string, state: 'dead', reason: r.skip_reason as string });
        else if (dryRun) report.wouldRedrive.push(r.target_id as string);
        else report.jobs.push(rowToOpsJob(r));
        if (!r.skip_reason && r.was_discarded_at)
          report.wereDiscarded.push({
            id: r.target_id as string,
            by: r.was_discarded_by as string,
            reason: r.was_discard_reason as string,
          });
      }
      const last = rows.at(-1);
      if (explicit || !last || rows.length < REDRIVE_BATCH) break;
      cursor = { t: last.dead_at_key as string, i: last.target_id as string };
    }
    if (explicit) {
      const seen = new Set([...report.jobs.map((j) => j.id), ...report.wouldRedrive, ...report.skipped.map((s) => s.id)]);
      report.skipped.push(
        ...(await this.whyNot(
          req.ids!.filter((id) => !seen.has(id)),
          'redrive',
        )),
      );
    }
    return report;
  }

  /** One batch in its own transaction, published after COMMIT; a dry run rolls back. */
  private async redriveBatch(values: unknown[]): Promise<pg.QueryResultRow[]> {
    const dryRun = values[12] as boolean;
    for (let tries = 1; ; tries++) {
      let rows: pg.QueryResultRow[];
      try {
        rows = await withTransaction(this.pool, async (client) => (await run(client, 'deadJobRedrive', values)).rows, { rollback: dryRun });
      } catch (err) {
        // An enqueue took the idempotency key of a job in this batch between our check and our
        // UPDATE: run the batch again, which now skips that job with the reason.
        if ((err as { code?: string }).code === UNIQUE_VIOLATION && tries < 3) continue;
        throw err;
      }
      if (!dryRun) {
        await this.publisher.publish(
          rows
            .filter((r) => r.outbox_id != null)
            .map((r) => ({ outboxId: String(r.outbox_id), jobId: r.id as string, type: r.type as string, lane: r.lane as Lane })),
        );
      }
      return rows;
    }
  }

  async discard(req: DiscardRequest): Promise<DiscardReport> {
    checkScope(req, 'discard');
    const reason = req.reason?.trim();
    if (!reason) throw new ValidationError('reason', 'is required: say why these dead jobs will not be re-run');
    if (reason.length > 1000) throw new ValidationError('reason', 'must be at most 1000 characters');
    const by = operatorName(req.by);
    const explicit = req.ids !== undefined;
    const dryRun = req.dryRun ?? false;
    const report: DiscardReport = { jobs: [], skipped: [], ...(dryRun ? { dryRun } : {}) };
    for (;;) {
      const values = [...filterValues(req), by, reason, explicit ? Math.max(1, req.ids!.length) : REDRIVE_BATCH, req.lane ?? null];
      // A dry run discards in a transaction it rolls back: what it would do, nothing done.
      const rows = await withTransaction(this.pool, async (client) => (await run(client, 'deadJobDiscard', values)).rows, {
        rollback: dryRun,
      });
      report.jobs.push(...rows.map(rowToOpsJob));
      // Each batch leaves the discarded ones behind, so the next batch starts after them (not a
      // rolled-back one: a dry run looks at one batch).
      if (explicit || dryRun || rows.length < REDRIVE_BATCH) break;
    }
    if (explicit) {
      const done = new Set(report.jobs.map((j) => j.id));
      report.skipped.push(
        ...(await this.whyNot(
          req.ids!.filter((id) => !done.has(id)),
          'discard',
        )),
      );
    }
    return report;
  }

  /** Why each of these jobs was not redriven or discarded, in words on-call can act on. */
  private async whyNot(ids: string[], action: 'redrive' | 'discard'): Promise<Skipped[]> {
    if (ids.length === 0) return [];
    const { rows } = await runOps(this.pool, 'jobStates', [ids]);
    const byId = new Map(rows.map((r) => [r.id as string, r]));
    return ids.map((id) => {
      const r = byId.get(id);
      if (!r) return { id, type: null, state: null, reason: `no job ${id}` };
      const state = r.state as JobState;
      const at = (r.finished_at as Date | null)?.toISOString();
      const reasons: Record<JobState, string> = {
        succeeded: `job succeeded at ${at}: ${action} never touches a succeeded job`,
        running: `job is running: ${action} never touches a running job (cancel it first if it must stop)`,
        pending: `job is pending: it will run; ${action} applies to dead jobs only`,
        cancelled: `job was cancelled${r.cancelled_by ? ` by ${r.cancelled_by as string}` : ''} at ${at}: enqueue a new job to run it again`,
        dead: r.discarded_at
          ? `job was already discarded by ${r.discarded_by as string}: ${r.discard_reason as string}`
          : 'job is dead but was locked by another operator action; try again',
      };
      const skipped: Skipped = { id, type: r.type as string, state, reason: reasons[state] };
      return action === 'discard' && state === 'dead' && r.discarded_at ? { ...skipped, alreadyDone: true } : skipped;
    });
  }
}

function filterValues(f: DeadJobFilter): unknown[] {
  return [f.ids ?? null, f.type ?? null, f.since ?? null, f.until ?? null];
}

/** Refuse a request that names no scope: "redrive everything" must be said out loud (all: true). */
function checkScope(req: DeadJobFilter & { all?: boolean }, action: string): void {
  if (req.ids !== undefined) {
    if (req.ids.length === 0) throw new ValidationError('ids', 'must name at least one job id');
    if (req.all || req.type || req.lane || req.since || req.until)
      throw new ValidationError('ids', `name job ids or a filter (type, lane, since, until, all), not both`);
    if (req.ids.length > 1000) throw new ValidationError('ids', `at most 1000 ids per ${action}; use a filter for more`);
    return;
  }
  if (!req.all && !req.type && !req.lane && !req.since && !req.until) {
    throw new ValidationError(
      'filter',
      `${action} needs job ids, a type, a lane, a time range (since, until), or all to ${action} every dead job`,
    );
  }
  if (req.since && req.until && req.since >= req.until) throw new ValidationError('until', 'must be after since');
}

export function encodeDeadCursor(deadAtKey: string, id: string): string {
  return Buffer.from(JSON.stringify({ t: deadAtKey, i: id })).toString('base64url');
}

export function decodeDeadCursor(raw: string): { t: string; i: string } {
  const bad = () => new ValidationError('cursor', 'is not a cursor this listing returned (pass nextCursor unchanged)');
  if (raw.length > 300 || !/^[A-Za-z0-9_-]+$/.test(raw)) throw bad();
  try {
    const o = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8')) as { t?: unknown; i?: unknown };
    if (
      typeof o.t !== 'string' ||
      typeof o.i !== 'string' ||
      !/^[0-9a-f-]{36}$/i.test(o.i) ||
      !/^\d{4}-\d{2}-\d{2} [\d:.]+[+-]\d{2}(:\d{2})?$/.test(o.t)
    )
      throw bad();
    return { t: o.t, i: o.i };
  } catch {
    throw bad();
  }
}

/** The reason a dead job died, as on-call reads it: the last error and the last attempt's owner. */
export function deathSummary(job: Job): { error: string; lastOwner: string | null; attemptsUsed: number } {
  const lastDeath = [...job.attemptLog].reverse().find((a) => a.outcome === 'dead');
  return {
    error: job.lastError ? `${job.lastError.name}: ${job.lastError.message}` : '(no error recorded)',
    lastOwner: lastDeath?.owner ?? job.attemptLog.at(-1)?.owner ?? null,
    attemptsUsed: job.attempt - job.releases,
  };
}
