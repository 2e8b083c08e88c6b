// `jobs show ID --watch`: a job's progress, live, until it ends — a progress bar with the
// handler's fraction and message, the attempt, the lease owner and the time left on the lease.
// On a terminal the view redraws in place; piped (a CI log, a test) it prints a line whenever
// something a person would notice changes, so the output stays readable. Times come from the
// database's clock (statement_timestamp), so a skewed laptop clock does not lie about the lease.
// A job blocked behind its concurrency key or its type's slots says so, in `jobs show`'s words
// (domain/reading.ts waitingFor), with the jobs holding them when the caller reads those (the CLI
// passes `jobs show`'s own reading, runtime/cli/format.ts blockers): it is not waiting for a worker.
//
// Exit code: 0 when the job succeeded, 1 when it ended dead or cancelled (or does not exist).

import type pg from 'pg';
import { rowToOpsJob, runOps, type OpsJob } from './db.ts';
import { formatDuration } from '../domain/reading.ts';
import { attemptReading, waitingFor } from '../domain/reading.ts';

/** What a blocked job waits on: its key's running jobs, its type's slots and their holders. */
export interface WatchBlockers {
  keyHolders?: string[];
  typeSlots?: { limit: number; holders: string[] } | null;
}

export interface WatchFrame {
  job: OpsJob;
  dbNow: Date;
  /** Read only while the job is blocked; without it the status still names the key or the type, not who holds it. */
  blockers?: WatchBlockers;
}

/** Pending, but passed over by a claim because its key or its type's slots were full. */
function isBlocked(j: OpsJob): boolean {
  return j.state === 'pending' && j.blockedSince !== null;
}

/** A bar of `width` cells for a fraction in 0..1. Unicode blocks on a terminal, ASCII when piped. */
export function progressBar(fraction: number, width: number, ascii: boolean): string {
  const f = Math.min(1, Math.max(0, Number.isFinite(fraction) ? fraction : 0));
  const filled = Math.round(f * width);
  return `[${(ascii ? '#' : '█').repeat(filled)}${(ascii ? '-' : '░').repeat(width - filled)}]`;
}

function percent(fraction: number | undefined): string {
  return `${String(Math.floor(Math.min(1, Math.max(0, fraction ?? 0)) * 100)).padStart(3)}%`;
}

function seconds(ms: number): string {
  return `${(Math.max(0, ms) / 1000).toFixed(1)} s`;
}

function attemptText(j: OpsJob): string {
  return `attempt ${attemptReading(j)}`;
}

/** Where the job stands, without the bar: state, attempt, and the lease or the due time. */
export function statusText(f: WatchFrame): string {
  const j = f.job;
  const now = f.dbNow.getTime();
  if (j.state === 'running') {
    const left = (j.leaseExpiresAt?.getTime() ?? now) - now;
    const lease = left > 0 ? `${seconds(left)} left` : `expired ${seconds(-left)} ago`;
    const since = j.claimedAt ?? j.startedAt;
    return `running · ${attemptText(j)} · lease ${j.leaseOwner} ${lease}${since ? ` · running for ${formatDuration((now - since.getTime()) / 1000)}` : ''}`;
  }
  if (isBlocked(j)) return `pending · ${attemptText(j)} · waiting ${waitingFor(j, f.blockers?.keyHolders, f.blockers?.typeSlots)}`;
  if (j.state === 'pending') {
    const due = j.runAfter.getTime() - now;
    const dueIn = due < 120_000 ? seconds(due) : formatDuration(due / 1000);
    return `pending · ${attemptText(j)} · ${due > 0 ? `due in ${dueIn}` : `waiting for a worker (due ${formatDuration(-due / 1000)} ago)`}`;
  }
  return `${j.state} · ${attemptText(j)}`;
}

/**
 * The view on a terminal, redrawn in place: three lines, or more for a blocked job, whose status
 * (the key or type, since when, the holders) is wrapped at the terminal's `columns`: the redraw
 * moves up one row per line, so no line may wrap by itself.
 */
export function renderFrame(f: WatchFrame, width = 40, columns = 80): string[] {
  const j = f.job;
  return [
    `${j.type} ${j.id}`,
    `${progressBar(j.progress?.fraction ?? 0, width, false)} ${percent(j.progress?.fraction)}  ${j.progress?.message ?? ''}`.trimEnd(),
    ...(isBlocked(j) ? wrap(statusText(f), columns - 1) : [statusText(f)]),
  ];
}

/** `text` in lines of at most `max` characters, broken at spaces (a longer word is cut). */
function wrap(text: string, max: number): string[] {
  const limit = Math.max(20, max);
  const lines: string[] = [];
  let line = '';
  for (let word of text.split(' ')) {
    while ([...word].length > limit) {
      if (line) lines.push(line);
      line = '';
      lines.push([...word].slice(0, limit).join(''));
      word = [...word].slice(limit).join('');
    }
    if (!word) continue;
    if (line && [...line].length + 1 + [...word].length > limit) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(line);
  return lines;
}

/** The view when piped: one line per change. */
export function renderLine(f: WatchFrame): string {
  const j = f.job;
  const t = f.dbNow.toISOString().slice(11, 19);
  return `${t}  ${progressBar(j.progress?.fraction ?? 0, 20, true)} ${percent(j.progress?.fraction)}  ${statusText(f)}${j.progress?.message ? `  — ${j.progress.message}` : ''}`;
}

/** What changed enough to print a new line (not the lease ticking down). */
function changeKey(f: WatchFrame): string {
  const j = f.job;
  const waiting = isBlocked(j) ? statusText(f) : '';
  return [j.state, j.attempt, j.leaseOwner, Math.floor((j.progress?.fraction ?? 0) * 100), j.progress?.message ?? '', waiting].join('|');
}

/** The last word: how the job ended, and where to look next. */
export function renderEnd(f: WatchFrame): string {
  const j = f.job;
  const took = j.finishedAt && j.createdAt ? ` after ${formatDuration((j.finishedAt.getTime() - j.createdAt.getTime()) / 1000)}` : '';
  switch (j.state) {
    case 'succeeded':
      return `succeeded${took} on ${attemptText(j)}${j.result !== null ? `: ${JSON.stringify(j.result).slice(0, 300)}` : ''}`;
    case 'dead':
      return `dead${took}: ${j.lastError ? `${j.lastError.name}: ${j.lastError.message}` : 'no error recorded'} (${attemptText(j)}); see \`jobs dead show ${j.id}\``;
    case 'cancelled':
      return `cancelled${j.cancelledBy ? ` by ${j.cancelledBy}` : ''}${took}`;
    default:
      return statusText(f);
  }
}

export interface WatchOptions {
  pool: pg.Pool;
  id: string;
  write: (s: string) => void;
  /** Redraw in place (a terminal) or print a line per change (piped). */
  tty: boolean;
  intervalMs?: number;
  columns?: number;
  signal?: AbortSignal;
  /** What a blocked job waits on (`jobs show`'s reading); asked on each poll while the job is blocked. */
  blockers?: (job: OpsJob) => Promise<WatchBlockers>;
}

/** Watch until the job ends. Returns the exit code: 0 succeeded, 1 dead, cancelled or missing, 130 when aborted. */
export async function watchJob(o: WatchOptions): Promise<number> {
  const interval = o.intervalMs ?? 1000;
  const width = Math.max(10, Math.min(60, (o.columns ?? 80) - 20));
  // A pseudo-terminal without a size reports 0 columns.
  const columns = o.columns || 80;
  let drawn = 0;
  let lastKey = '';
  for (;;) {
    const { rows } = await runOps(o.pool, 'jobGetWithNow', [o.id]);
    if (!rows[0]) {
      o.write(`no job ${o.id}\n`);
      return 1;
    }
    const job = rowToOpsJob(rows[0]);
    const frame: WatchFrame = {
      job,
      dbNow: rows[0].db_now as Date,
      ...(o.blockers && isBlocked(job) ? { blockers: await o.blockers(job) } : {}),
    };
    const ended = frame.job.state === 'succeeded' || frame.job.state === 'dead' || frame.job.state === 'cancelled';
    if (o.tty) {
      const lines = renderFrame(frame, width, columns);
      // Move up over the last drawing and clear it, then draw again.
      o.write(`${drawn > 0 ? `\x1b[${drawn}F\x1b[0J` : ''}${lines.join('\n')}\n`);
      drawn = lines.length;
    } else {
      const key = changeKey(frame);
      if (key !== lastKey) o.write(`${renderLine(frame)}\n`);
      lastKey = key;
    }
    if (ended) {
      o.write(`${renderEnd(frame)}\n`);
      return frame.job.state === 'succeeded' ? 0 : 1;
    }
    const aborted = await new Promise<boolean>((resolve) => {
      if (o.signal?.aborted) return resolve(true);
      // The listener goes with the timer: one left behind per poll piles up on the signal, and
      // past ten Node prints a MaxListenersExceededWarning into the screen being redrawn.
      const onAbort = () => {
        clearTimeout(t);
        resolve(true);
      };
      const t = setTimeout(() => {
        o.signal?.removeEventListener('abort', onAbort);
        resolve(false);
      }, interval);
      o.signal?.addEventListener('abort', onAbort, { once: true });
    });
    if (aborted) return 130;
  }
}
