// Poison messages: bodies the worker cannot parse and job ids with no job. The worker sends each
// to the DLQ with its reason (DESIGN 9) and records it here, raw body included, so on-call can
// list them apart from dead jobs and see what sent them — after the DLQ's retention too.

import { namedStatements, type Queryable } from './job-store.ts';

/** The poison-message statements: the worker records, on-call lists and resolves. */
const POISON_SQL = {
  /**
   * A message the worker dead-lettered because it could not handle it. One row per source
   * message: a redelivered copy of the same message records nothing new.
   */
  poisonMessageRecord: `
    INSERT INTO jobs.poison_message (source_message_id, reason, detail, body, attributes, job_id, worker_id, receive_count)
    VALUES ($1, $2, $3, $4, $5::jsonb, $6::uuid, $7, $8)
    ON CONFLICT (source_message_id) DO NOTHING`,

  /** Poison messages, newest first; resolved ones only when $3. Keyset on (recorded_at, id) via $4 (id). */
  poisonMessageList: `
    SELECT p.*, p.recorded_at::text AS recorded_at_key FROM jobs.poison_message p
     WHERE ($1::text IS NULL OR p.reason = $1::text)
       AND ($2::timestamptz IS NULL OR p.recorded_at >= $2::timestamptz)
       AND ($3::boolean OR p.resolved_at IS NULL)
       AND ($4::bigint IS NULL OR p.id < $4::bigint)
     ORDER BY p.id DESC
     LIMIT $5`,

  /** Mark poison messages resolved when on-call discards their dead letters. */
  poisonMessageResolve: `
    UPDATE jobs.poison_message SET resolved_at = statement_timestamp(), resolved_by = $2, resolution = $3
     WHERE source_message_id = ANY($1::text[]) AND resolved_at IS NULL
    RETURNING source_message_id`,
} as const;

const runPoison = namedStatements('poison', POISON_SQL);

export type PoisonReason = 'unparseable-body' | 'unknown-job';

export interface PoisonMessage {
  id: string;
  /** The message's id on the job queue (its dead letter carries it as SourceMessageId). */
  sourceMessageId: string;
  reason: PoisonReason;
  detail: string;
  body: string;
  attributes: Record<string, string>;
  jobId: string | null;
  workerId: string | null;
  receiveCount: number | null;
  recordedAt: Date;
  resolvedAt: Date | null;
  resolvedBy: string | null;
  resolution: string | null;
}

export interface PoisonRecord {
  sourceMessageId: string;
  reason: PoisonReason;
  detail: string;
  body: string;
  attributes: Record<string, string>;
  jobId?: string | null;
  workerId: string;
  receiveCount: number;
}

/** Record a poison message (once per source message). Throws on a database error: the caller decides. */
export async function recordPoisonMessage(db: Queryable, p: PoisonRecord): Promise<void> {
  await runPoison(db, 'poisonMessageRecord', [
    p.sourceMessageId,
    p.reason,
    p.detail.slice(0, 1000),
    // SQS bodies are at most 1 MiB; keep what a person can read and a column should hold.
    p.body.slice(0, 256 * 1024),
    JSON.stringify(p.attributes),
    p.jobId ?? null,
    p.workerId,
    p.receiveCount,
  ]);
}

export interface PoisonListRequest {
  reason?: PoisonReason;
  since?: Date;
  includeResolved?: boolean;
  limit: number;
  /** The last id of the previous page. */
  before?: string;
}

export async function listPoisonMessages(
  db: Queryable,
  req: PoisonListRequest,
): Promise<{ messages: PoisonMessage[]; nextCursor: string | null }> {
  const { rows } = await runPoison(db, 'poisonMessageList', [
    req.reason ?? null,
    req.since ?? null,
    req.includeResolved ?? false,
    req.before ?? null,
    req.limit + 1,
  ]);
  const page = rows.slice(0, req.limit).map(
    (r): PoisonMessage => ({
      id: String(r.id),
      sourceMessageId: r.source_message_id as string,
      reason: r.reason as PoisonReason,
      detail: r.detail as string,
      body: r.body as string,
      attributes: (r.attributes as Record<string, string>) ?? {},
      jobId: (r.job_id as string | null) ?? null,
      workerId: (r.worker_id as string | null) ?? null,
      receiveCount: (r.receive_count as number | null) ?? null,
      recordedAt: r.recorded_at as Date,
      resolvedAt: (r.resolved_at as Date | null) ?? null,
      resolvedBy: (r.resolved_by as string | null) ?? null,
      resolution: (r.resolution as string | null) ?? null,
    }),
  );
  return { messages: page, nextCursor: rows.length > req.limit ? page.at(-1)!.id : null };
}

/** Mark the poison messages whose dead letters on-call discarded. Returns the source message ids marked. */
export async function resolvePoisonMessages(db: Queryable, sourceMessageIds: string[], by: string, resolution: string): Promise<string[]> {
  if (sourceMessageIds.length === 0) return [];
  const { rows } = await runPoison(db, 'poisonMessageResolve', [sourceMessageIds, by, resolution]);
  return rows.map((r) => r.source_message_id as string);
}
