// The dead-letter queues of every priority lane as one on-call service: each lane's DLQ is its own
// DeadLetterService (dlq.ts, with the lane's queue as the destination of a move), and this runs a
// request over every lane's DLQ, or over the one named (`--lane`, `lane` in the API), and merges
// the reports. Every dead letter carries the lane whose DLQ held it; a resend goes to its job's
// lane's queue. Without an urgent DLQ of its own the urgent lane shares the bulk one: one service.

import type { Lane } from '../domain/lanes.ts';
import { ValidationError } from '../domain/errors.ts';
import type { Verdict } from '../domain/settlement.ts';
import type { DeadLetterService, DlqPassReport, MoveCancelled, MoveTask } from './dlq.ts';

export interface LaneDlqReport extends DlqPassReport {
  /** The move tasks started (--move): one per lane's DLQ. `moveTask` is the first of them. */
  moveTasks?: (NonNullable<DlqPassReport['moveTask']> & { lane: Lane })[];
}

export class LaneDeadLetters {
  constructor(readonly lanes: { lane: Lane; service: DeadLetterService }[]) {}

  get local(): boolean {
    return this.lanes[0]!.service.local;
  }

  /** The lanes a request covers: the one named (refused when it has no DLQ of its own), else all. */
  private pick(lane: Lane | undefined): { lane: Lane; service: DeadLetterService }[] {
    if (!lane) return this.lanes;
    const one = this.lanes.filter((l) => l.lane === lane);
    if (one.length === 0) {
      throw new ValidationError(
        'lane',
        `the ${lane} lane has no DLQ of its own here (its dead letters are in the ${this.lanes.map((l) => l.lane).join(' and ')} DLQ); name that lane or none`,
      );
    }
    return one;
  }

  async look(limit?: number, lane?: Lane): Promise<LaneDlqReport> {
    return merge(await each(this.pick(lane), (s) => s.look(limit)));
  }

  async redrive(req: Parameters<DeadLetterService['redrive']>[0] & { lane?: Lane }): Promise<LaneDlqReport> {
    return merge(await each(this.pick(req.lane), (s) => s.redrive(req)));
  }

  async discard(req: Parameters<DeadLetterService['discard']>[0] & { lane?: Lane }): Promise<LaneDlqReport & { notFound: string[] }> {
    const parts = await each(this.pick(req.lane), (s) => s.discard(req));
    const found = new Set(parts.flatMap((p) => p.report.letters.map((l) => l.messageId)));
    return { ...merge(parts), notFound: req.messageIds.filter((id) => !found.has(id)) };
  }

  async moveTasks(): Promise<(MoveTask & { lane: Lane })[]> {
    const parts = await each(this.lanes, (s) => s.moveTasks());
    return parts.flatMap((p) => p.report.map((t) => ({ ...t, lane: p.lane })));
  }

  /** A move task is cancelled by its handle alone (SQS knows which queue it moves). */
  cancelMove(req: { taskHandle: string; by: string }): Promise<MoveCancelled> {
    return this.lanes[0]!.service.cancelMove(req);
  }
}

async function each<R>(
  lanes: { lane: Lane; service: DeadLetterService }[],
  fn: (s: DeadLetterService) => Promise<R>,
): Promise<{ lane: Lane; report: R }[]> {
  const out: { lane: Lane; report: R }[] = [];
  for (const l of lanes) out.push({ lane: l.lane, report: await fn(l.service) });
  return out;
}

function merge(parts: { lane: Lane; report: DlqPassReport }[]): LaneDlqReport {
  const several = parts.length > 1;
  const counts: Record<Verdict, number> = { resend: 0, drop: 0, keep: 0 };
  for (const p of parts) for (const v of Object.keys(counts) as Verdict[]) counts[v] += p.report.counts[v];
  const first = parts[0]!.report;
  const moveTasks = parts.flatMap((p) => (p.report.moveTask ? [{ ...p.report.moveTask, lane: p.lane }] : []));
  const refused = parts.filter((p) => p.report.refused).map((p) => (several ? `${p.lane} DLQ: ${p.report.refused}` : p.report.refused!));
  return {
    letters: parts.flatMap((p) => p.report.letters),
    complete: parts.every((p) => p.report.complete),
    dryRun: first.dryRun,
    method: first.method,
    counts,
    // A note that every lane's pass gave once is said once.
    notes: [...new Set(parts.flatMap((p) => p.report.notes))],
    ...(moveTasks.length > 0 ? { moveTask: moveTasks[0]!, moveTasks } : {}),
    ...(refused.length > 0 ? { refused: refused.join('; ') } : {}),
  };
}
