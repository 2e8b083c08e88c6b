// The SQS dead-letter queue for on-call: look at its messages, move them back to the job queue,
// discard the ones nobody should run, each reconciled with the job table. Every dead letter is
// judged by its job row (dlq-reconcile.ts: resend, drop or keep); the SQS calls are in
// dlq-queue.ts. This file runs the passes over the DLQ and records what each did and why.
//
// Two ways to move: receive-and-resend (everywhere; the only way on the local endpoint, which
// lacks StartMessageMoveTask), message by message with those verdicts; and on AWS
// StartMessageMoveTask (--move), for a large DLQ, which SQS runs server-side and which cannot
// skip messages — so it is started only after a scan found nothing that must stay (keep), and
// whatever it moves is settled by the worker by the same job row (a terminal job's message is
// deleted, a live lease's duplicate ignored). A move started by mistake can be cancelled while it
// runs (CancelMessageMoveTask, by its task handle): what it moved stays moved, the rest stays in
// the DLQ.

import type pg from 'pg';
import { ValidationError } from '../domain/errors.ts';
import type { Verdict } from '../domain/settlement.ts';
import type { Lane } from '../domain/lanes.ts';
import type { Logger } from '../observability/log.ts';
import { jobMessageBody } from '../queue/message.ts';
import { chunk, SQS_BATCH_LIMIT, type JobQueue } from '../queue/types.ts';
import { resolvePoisonMessages } from '../store/poison.ts';
import { operatorName, recordActions, rowToOpsJob, runOps } from './db.ts';
import {
  MOVE_STATUS_HINT,
  MoveCancelError,
  type DeadLetter,
  type MoveCancelled,
  type MoveTask,
  type SqsDeadLetterQueue,
} from './dlq-queue.ts';
import { reconcile, reconcileJobId, type ReconciledLetter } from './dlq-reconcile.ts';

// What callers have always imported from here (the services, the routes, the CLI, the tests).
export { MoveCancelError, SqsDeadLetterQueue, type DeadLetter, type MoveCancelled, type MoveTask } from './dlq-queue.ts';
export { reconcile, type LetterKind, type ReconciledLetter, type Verdict } from './dlq-reconcile.ts';

/** How long a scan keeps a received dead letter invisible before it decides and acts. */
export const HOLD_SECONDS = 60;
/** Most dead letters one pass looks at unless told otherwise. */
export const DEFAULT_SCAN_LIMIT = 1000;
export const MAX_SCAN_LIMIT = 100_000;

export interface DlqPassReport {
  letters: ReconciledLetter[];
  /** True when the pass ended on an empty receive: it saw every visible dead letter (up to the limit). */
  complete: boolean;
  dryRun: boolean;
  method: 'resend' | 'move' | 'look' | 'discard';
  counts: Record<Verdict, number>;
  notes: string[];
  moveTask?: { taskHandle: string; dlqArn: string; queueArn: string };
  /** Set when the pass refused to act (e.g. --move with messages that must stay). */
  refused?: string;
}

export interface DeadLetterServiceOptions {
  pool: pg.Pool;
  dlq: SqsDeadLetterQueue;
  /** The job queue, for resending (LaneQueues: each job to its lane's queue). */
  queue: JobQueue;
  log: Logger;
  /** The lane whose DLQ this is (default bulk); dlq-lanes.ts runs one service per lane. */
  lane?: Lane;
}

export class DeadLetterService {
  constructor(private readonly opts: DeadLetterServiceOptions) {}

  get local(): boolean {
    return this.opts.dlq.opts.local;
  }

  /** Look at the dead letters and what a redrive would do with each; changes nothing. */
  async look(limit = DEFAULT_SCAN_LIMIT): Promise<DlqPassReport> {
    return this.pass({ limit, mode: 'look' });
  }

  /**
   * Move dead letters back to the job queue, reconciled with the job table (the verdicts of
   * dlq-reconcile.ts). `move` uses StartMessageMoveTask on AWS; on the local endpoint it falls
   * back to receive-and-resend, and says so.
   */
  async redrive(req: { by: string; dryRun?: boolean; move?: boolean; limit?: number; maxPerSecond?: number }): Promise<DlqPassReport> {
    const limit = req.limit ?? DEFAULT_SCAN_LIMIT;
    if (req.move && !this.local) return this.move({ ...req, limit });
    const report = await this.pass({ limit, mode: req.dryRun ? 'look' : 'resend', by: operatorName(req.by) });
    report.dryRun = req.dryRun ?? false;
    report.method = 'resend';
    if (req.move) report.notes.unshift('the local SQS endpoint has no StartMessageMoveTask: moved by receive and resend instead');
    return report;
  }

  /**
   * Delete the named dead letters for good, with a reason; poison messages among them are marked
   * resolved. A letter is named by its DLQ message id (jobs dlq list) or by the id of the message it
   * copies (`SourceMessageId`: what jobs poison list shows). A letter whose job still needs its
   * message (verdict resend: the job is pending or was orphaned) is not discarded but kept, with
   * what to do instead: deleting it would leave the job to wait for the reconciler.
   */
  async discard(req: {
    messageIds: string[];
    by: string;
    reason: string;
    limit?: number;
  }): Promise<DlqPassReport & { notFound: string[] }> {
    const reason = req.reason?.trim();
    if (!reason) throw new ValidationError('reason', 'is required: say why these dead letters are thrown away');
    if (req.messageIds.length === 0) throw new ValidationError('messageIds', 'must name at least one message id (see jobs dlq list)');
    const wanted = new Set(req.messageIds);
    const report = await this.pass({ limit: req.limit ?? MAX_SCAN_LIMIT, mode: 'discard', by: operatorName(req.by), reason, wanted });
    const found = new Set(report.letters.flatMap((l) => [l.messageId, l.attributes.SourceMessageId ?? l.messageId]));
    return { ...report, notFound: req.messageIds.filter((id) => !found.has(id)) };
  }

  async moveTasks(): Promise<MoveTask[]> {
    if (this.local) return [];
    return this.opts.dlq.listMoves();
  }

  /**
   * Cancel a running SQS move task of the DLQ (one started by mistake with `--move`): SQS stops
   * moving, what it already moved stays in the job queue (and the worker settles it by its job
   * row), the rest stays in the DLQ. Recorded with who asked, beside the 'dlq-move' that started it.
   */
  async cancelMove(req: { taskHandle: string; by: string }): Promise<MoveCancelled> {
    const taskHandle = req.taskHandle?.trim() ?? '';
    if (!taskHandle) throw new ValidationError('taskHandle', `is required: the handle of the move task to cancel (${MOVE_STATUS_HINT})`);
    if (this.local) {
      throw new MoveCancelError(
        'local',
        taskHandle,
        `cannot cancel move task ${taskHandle}: the local SQS endpoint has no message move tasks, so there is none to cancel (\`jobs dlq redrive --move\` moves by receive and resend there, within the command)`,
      );
    }
    const by = operatorName(req.by);
    const { moved } = await this.opts.dlq.cancelMove(taskHandle);
    await recordActions(this.opts.pool, [{ action: 'dlq-move-cancel', by, detail: { taskHandle, moved } }]);
    this.opts.log.info({ taskHandle, moved, by }, 'DLQ move task cancelled');
    return { taskHandle, moved, by };
  }

  private async move(req: { by: string; dryRun?: boolean; limit: number; maxPerSecond?: number }): Promise<DlqPassReport> {
    const by = operatorName(req.by);
    // Look first: a server-side move cannot skip a message, so refuse when one must stay.
    const held: ReconciledLetter[] = [];
    const receipts = new Map<string, string>();
    const { complete } = await this.walk(
      req.limit,
      async (batch, letters) => {
        for (const l of letters) held.push(l);
        for (const m of batch) receipts.set(m.messageId, m.receipt);
      },
      receipts,
    );
    const report = this.report(held, complete, 'move', req.dryRun ?? false);
    const keep = held.filter((l) => l.verdict === 'keep');
    if (keep.length > 0 || req.dryRun) {
      await this.opts.dlq.release([...receipts.values()]);
      if (keep.length > 0) {
        report.refused = `${keep.length} dead letter(s) must stay (dead jobs not redriven, poison): a move would resend them. Redrive or discard those first (jobs dlq list), or move without --move (receive and resend skips them)`;
      }
      return report;
    }
    // Drop what needs no message, hand back the rest, and let SQS move it.
    const drops = held.filter((l) => l.verdict === 'drop');
    await this.act(drops, receipts, by, 'dlq-drop');
    await this.opts.dlq.release(held.filter((l) => l.verdict === 'resend').map((l) => receipts.get(l.messageId)!));
    const task = await this.opts.dlq.startMove(req.maxPerSecond);
    await recordActions(this.opts.pool, [
      {
        action: 'dlq-move',
        by,
        detail: { taskHandle: task.taskHandle, scanned: held.length, complete, dlqArn: task.dlqArn, queueArn: task.queueArn },
      },
    ]);
    for (const l of held) l.done = l.verdict === 'drop' ? 'dropped' : 'moved';
    report.moveTask = task;
    report.notes.push(
      complete
        ? 'SQS moves the dead letters server-side; `jobs dlq move-status` shows its progress'
        : `the scan stopped at ${req.limit} dead letters; SQS moves the rest unseen, and the worker settles them by their job rows`,
    );
    return report;
  }

  /** One pass over the DLQ: receive (holding), judge each batch by its jobs, act, and hand back what stays. */
  private async pass(p: {
    limit: number;
    mode: 'look' | 'resend' | 'discard';
    by?: string;
    reason?: string;
    wanted?: Set<string>;
  }): Promise<DlqPassReport> {
    const letters: ReconciledLetter[] = [];
    const receipts = new Map<string, string>();
    const keepHeld: string[] = [];
    const { complete } = await this.walk(
      p.limit,
      async (_batch, judged) => {
        if (p.mode === 'look') {
          letters.push(...judged);
          keepHeld.push(...judged.map((l) => l.messageId));
          return;
        }
        if (p.mode === 'discard') {
          const named = judged.filter((l) => isNamed(l, p.wanted!));
          const needed = named.filter((l) => l.verdict === 'resend');
          const mine = named.filter((l) => l.verdict !== 'resend');
          keepHeld.push(...judged.filter((l) => !mine.includes(l)).map((l) => l.messageId));
          for (const l of needed) {
            l.done = 'kept';
            l.why = `not discarded: its job is ${l.jobState ?? '?'} and still needs a message (${l.why}); \`jobs dlq redrive\` resends it, or \`jobs cancel ${l.jobId}\` first if the job must not run`;
          }
          await this.act(mine, receipts, p.by!, 'dlq-discard', p.reason);
          for (const l of mine) l.done = 'discarded';
          letters.push(...named);
          const poison = mine.map((l) => l.attributes.SourceMessageId).filter((x): x is string => Boolean(x));
          await resolvePoisonMessages(this.opts.pool, poison, p.by!, `dead letter discarded: ${p.reason}`);
          return;
        }
        // resend
        letters.push(...judged);
        const resend = judged.filter((l) => l.verdict === 'resend');
        for (const batch of chunk(resend, SQS_BATCH_LIMIT)) {
          try {
            await this.opts.queue.send(
              batch.map((l) => ({ body: jobMessageBody(l.jobId!, l.jobType ?? undefined), lane: l.jobLane ?? l.lane })),
            );
          } catch (err) {
            for (const l of batch) {
              l.verdict = 'keep';
              l.why = `resend failed (${String(err).slice(0, 200)}); it stays in the DLQ`;
            }
          }
        }
        await this.act(
          judged.filter((l) => l.verdict === 'resend'),
          receipts,
          p.by!,
          'dlq-resend',
        );
        await this.act(
          judged.filter((l) => l.verdict === 'drop'),
          receipts,
          p.by!,
          'dlq-drop',
        );
        for (const l of judged) {
          l.done = l.verdict === 'resend' ? 'resent' : l.verdict === 'drop' ? 'dropped' : 'kept';
          if (l.verdict === 'keep') keepHeld.push(l.messageId);
        }
      },
      receipts,
      p.mode === 'discard' ? p.wanted : undefined,
    );
    // What stays goes back into view at once (with its newest receipt handle).
    await this.opts.dlq.release(keepHeld.map((id) => receipts.get(id)!).filter(Boolean));
    return this.report(letters, complete, p.mode, p.mode === 'look');
  }

  /** Delete dead letters and record why, one row per message. */
  private async act(
    letters: ReconciledLetter[],
    receipts: Map<string, string>,
    by: string,
    action: 'dlq-resend' | 'dlq-drop' | 'dlq-discard',
    reason?: string,
  ): Promise<void> {
    if (letters.length === 0) return;
    const failed = await this.opts.dlq.delete(letters.map((l) => receipts.get(l.messageId)!));
    if (failed.length > 0) {
      // A stale handle: someone else received it meanwhile. It stays and is judged again next time (a resend twice is harmless).
      this.opts.log.warn({ failed }, 'some dead letters could not be deleted; they stay in the DLQ');
    }
    await recordActions(
      this.opts.pool,
      letters.map((l) => ({
        action,
        by,
        jobId: l.jobId && l.jobState ? l.jobId : null,
        messageId: l.messageId,
        reason: reason ?? l.why,
        detail: {
          kind: l.kind,
          reason: l.reason,
          jobState: l.jobState,
          ...(action === 'dlq-discard' ? { body: l.body.slice(0, 2000) } : {}),
        },
      })),
    );
  }

  /**
   * Receive until the DLQ has no visible message left (or `limit` distinct messages were seen),
   * judging each new batch by its jobs. A message seen again (its hold ran out during a long
   * pass) only refreshes its receipt handle. `stopWhenFound`: stop once all of these were seen.
   */
  private async walk(
    limit: number,
    onBatch: (batch: DeadLetter[], judged: ReconciledLetter[]) => Promise<void>,
    receipts: Map<string, string>,
    stopWhenFound?: Set<string>,
  ): Promise<{ complete: boolean }> {
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_SCAN_LIMIT)
      throw new ValidationError('limit', `must be a whole number from 1 to ${MAX_SCAN_LIMIT}`);
    const seen = new Set<string>();
    const seenSources = new Set<string>();
    for (;;) {
      if (seen.size >= limit) return { complete: false };
      if (stopWhenFound && [...stopWhenFound].every((id) => seen.has(id) || seenSources.has(id))) return { complete: false };
      // On SQS an empty answer is only trustworthy from a long poll (a short one samples a subset
      // of servers); the local endpoint is one process, so it need not wait.
      const got = await this.opts.dlq.receive(Math.min(SQS_BATCH_LIMIT, limit - seen.size), this.local ? 0 : 1, HOLD_SECONDS);
      if (got.length === 0) return { complete: true };
      for (const m of got) receipts.set(m.messageId, m.receipt);
      const fresh = got.filter((m) => !seen.has(m.messageId));
      for (const m of fresh) seen.add(m.messageId);
      for (const m of fresh) if (m.attributes.SourceMessageId) seenSources.add(m.attributes.SourceMessageId);
      if (fresh.length === 0) continue;
      const ids = [...new Set(fresh.map((m) => reconcileJobId(m)).filter((x): x is string => Boolean(x)))];
      const { rows } = ids.length > 0 ? await runOps(this.opts.pool, 'jobsForDeadLetters', [ids]) : { rows: [] as pg.QueryResultRow[] };
      const jobs = new Map(rows.map((r) => [r.id as string, rowToOpsJob(r)]));
      const dbNow = (rows[0]?.db_now as Date | undefined) ?? new Date();
      await onBatch(
        fresh,
        fresh.map((m) => reconcile(m, jobs.get(reconcileJobId(m) ?? ''), dbNow, this.opts.lane)),
      );
    }
  }

  private report(letters: ReconciledLetter[], complete: boolean, method: DlqPassReport['method'], dryRun: boolean): DlqPassReport {
    const counts: Record<Verdict, number> = { resend: 0, drop: 0, keep: 0 };
    for (const l of letters) counts[l.verdict]++;
    return { letters, complete, dryRun, method, counts, notes: [] };
  }
}

/** A letter named by its DLQ message id or by the source message id it copies (jobs poison list). */
function isNamed(l: ReconciledLetter, wanted: Set<string>): boolean {
  return wanted.has(l.messageId) || (l.attributes.SourceMessageId !== undefined && wanted.has(l.attributes.SourceMessageId));
}
