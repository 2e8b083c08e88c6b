// The on-call routes of the HTTP API, mounted by the API server (server.ts, "On-call" section)
// under /v1. Every one of them needs the operator token (API_OPERATOR_TOKEN) when it is set: they
// redrive and discard, and they show raw DLQ and poison bodies, operator actions and their
// callers' addresses; the ERP clients' API_TOKEN gets a 403 here. Without an operator token they
// take the API token, as before (the API warns at start):
//
//   GET  /v1/dead-jobs?type=&since=&until=&includeDiscarded=&limit=&cursor=   dead jobs, newest death first
//   GET  /v1/dead-jobs/{id}                  one job's dead-letter view: reason, every attempt, operator actions
//   POST /v1/dead-jobs/{id}/redrive          { by?, reason?, maxAttempts?, fromScratch? }       409 when not dead
//   POST /v1/dead-jobs/{id}/discard          { by?, reason }                                   409 when not dead
//   POST /v1/dead-jobs/redrive               { ids? | type?, since?, until? | all: true, by?, reason?, maxAttempts?, fromScratch?, dryRun? }
//   POST /v1/dead-jobs/discard               { ids? | type?, since?, until? | all: true, by?, reason }
//   GET  /v1/dlq/messages?limit=&poison=     the DLQ's messages, each judged by its job (holds them a moment)
//   POST /v1/dlq/redrive                     { dryRun?, move?, limit?, rate?, by? }
//   POST /v1/dlq/discard                     { messageIds, reason, by? }
//   GET  /v1/dlq/move-tasks                  SQS message move tasks of the DLQ (AWS)
//   POST /v1/dlq/move-tasks/cancel           { taskHandle, by? }   stop a running move (AWS); 404 no such running task, 403 SQS refused, 409 local
//   GET  /v1/poison-messages?reason=&since=&includeResolved=&limit=&cursor=
//   GET  /v1/stuck-jobs?limit=
//   POST /v1/pending-jobs/republish          { ids? | type? | olderThanSeconds?, by?, reason?, limit? }   fresh messages for pending jobs
//
// Errors keep the API's shape `{ error: { code, message, field? } }`; a service's ValidationError
// becomes a 400 naming the field. Who asked is recorded as the name given plus the caller's
// address, as for cancel: a shared token names no person.

import type http from 'node:http';
import { callerAddress, HttpError, isPlainObject, jobView, readJson, type JobView } from './kernel.ts';
import { isJobId, parseIsoTime } from '../domain/ids.ts';
import type { AttemptOutcome } from '../domain/job.ts';
import type { OpsJob, OperatorAction } from '../oncall/db.ts';
import { deathSummary, type DeadJobFilter } from '../oncall/dead-jobs.ts';
import { MoveCancelError, type DlqPassReport } from '../oncall/dlq.ts';
import { listPoisonMessages, type PoisonReason } from '../store/poison.ts';
import type { OpsServices } from '../oncall/services.ts';
import { findStuckJobs } from '../oncall/stuck.ts';

const PREFIXES = ['/v1/dead-jobs', '/v1/dlq', '/v1/poison-messages', '/v1/stuck-jobs', '/v1/pending-jobs'];

export interface OpsRequest {
  req: http.IncomingMessage;
  method: string;
  path: string;
  query: URLSearchParams;
}

export interface OpsReply {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

/** A dead job as the API shows it: the job, why it died, every attempt, and its triage. */
export interface DeadJobView extends JobView {
  attemptsUsed: number;
  lastOwner: string | null;
  /** Every attempt that did not succeed and every operator action, without stacks. */
  attemptLog: AttemptOutcome[];
  deadAt: string | null;
  discarded: { at: string; by: string; reason: string } | null;
}

export function deadJobView(j: OpsJob): DeadJobView {
  const d = deathSummary(j);
  return {
    ...jobView(j),
    attemptsUsed: d.attemptsUsed,
    lastOwner: d.lastOwner,
    attemptLog: j.attemptLog.map((a) => {
      const { stack: _stack, ...rest } = a as AttemptOutcome & { stack?: string };
      return rest;
    }),
    deadAt: j.dead?.deadAt.toISOString() ?? null,
    discarded: j.dead?.discardedAt ? { at: j.dead.discardedAt.toISOString(), by: j.dead.discardedBy!, reason: j.dead.discardReason! } : null,
  };
}

function actionView(a: OperatorAction) {
  return { at: a.at.toISOString(), action: a.action, by: a.by, messageId: a.messageId, reason: a.reason, detail: a.detail };
}

function dlqView(r: DlqPassReport) {
  return {
    ...r,
    letters: r.letters.map((l) => ({ ...l, sentAt: l.sentAt?.toISOString() ?? null })),
  };
}

// --- Input ------------------------------------------------------------------------------------

function checkQuery(q: URLSearchParams, allowed: readonly string[]): void {
  for (const k of q.keys()) {
    if (!allowed.includes(k)) throw new HttpError(400, 'invalid_query', `${k}: is not a parameter of this route (allowed: ${allowed.join(', ') || 'none'})`, k);
  }
}

function timeParam(name: string, raw: string | null | undefined): Date | undefined {
  if (raw === null || raw === undefined) return undefined;
  const d = parseIsoTime(raw);
  if (!d) {
    throw new HttpError(400, 'invalid_field', `${name}: must be an ISO 8601 time with an offset, e.g. 2026-10-31T06:00:00Z`, name);
  }
  return d;
}

function intParam(name: string, raw: unknown, min: number, max: number, dflt?: number): number | undefined {
  if (raw === null || raw === undefined) return dflt;
  const n = typeof raw === 'string' ? Number(raw) : raw;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) throw new HttpError(400, 'invalid_field', `${name}: must be a whole number from ${min} to ${max}`, name);
  return n;
}

function boolParam(name: string, raw: unknown): boolean {
  if (raw === null || raw === undefined) return false;
  if (raw === true || raw === 'true') return true;
  if (raw === false || raw === 'false') return false;
  throw new HttpError(400, 'invalid_field', `${name}: must be true or false`, name);
}

function strParam(name: string, raw: unknown, max: number, required = false): string | undefined {
  if (raw === null || raw === undefined) {
    if (required) throw new HttpError(400, 'invalid_field', `${name}: is required`, name);
    return undefined;
  }
  if (typeof raw !== 'string' || raw.trim().length < 1 || raw.length > max) throw new HttpError(400, 'invalid_field', `${name}: must be a string of 1 to ${max} characters`, name);
  return raw.trim();
}

async function body(req: http.IncomingMessage, fields: readonly string[], required = false): Promise<Record<string, unknown>> {
  const b = await readJson(req, 64 * 1024, { required });
  if (b === undefined) return {};
  if (!isPlainObject(b)) throw new HttpError(400, 'invalid_body', `body: must be a JSON object { ${fields.join(', ')} }`, 'body');
  for (const k of Object.keys(b)) {
    if (!fields.includes(k)) throw new HttpError(400, 'invalid_field', `${k}: is not a field of this request (allowed: ${fields.join(', ')})`, k);
  }
  return b;
}

function filterFrom(b: Record<string, unknown>): DeadJobFilter & { all?: boolean } {
  let ids: string[] | undefined;
  if (b.ids !== undefined) {
    if (!Array.isArray(b.ids) || b.ids.some((x) => typeof x !== 'string' || !isJobId(x))) throw new HttpError(400, 'invalid_field', 'ids: must be an array of job ids (UUIDs)', 'ids');
    ids = (b.ids as string[]).map((x) => x.toLowerCase());
  }
  const type = strParam('type', b.type, 100);
  const since = timeParam('since', b.since as string | undefined);
  const until = timeParam('until', b.until as string | undefined);
  return { ...(ids ? { ids } : {}), ...(type ? { type } : {}), ...(since ? { since } : {}), ...(until ? { until } : {}), all: boolParam('all', b.all) };
}

// --- Routes -----------------------------------------------------------------------------------

export class OpsRoutes {
  constructor(private readonly ops: OpsServices) {}

  /** True for the paths this module answers (the server hands them over after checking the operator token). */
  owns(path: string): boolean {
    return PREFIXES.some((p) => path === p || path.startsWith(`${p}/`));
  }

  async handle(r: OpsRequest): Promise<OpsReply> {
    const seg = r.path.split('/').slice(2); // after /v1
    const route = (methods: Record<string, () => Promise<OpsReply>>): Promise<OpsReply> => {
      const m = Object.hasOwn(methods, r.method) ? methods[r.method] : r.method === 'HEAD' ? methods.GET : undefined;
      if (!m) {
        const allow = Object.keys(methods).flatMap((x) => (x === 'GET' ? ['GET', 'HEAD'] : [x]));
        throw new HttpError(405, 'method_not_allowed', `${r.method} is not allowed on ${r.path}; allowed: ${allow.join(', ')}`, undefined, { allow: allow.join(', ') });
      }
      return m();
    };
    const id = (s: string | undefined) => {
      if (!s || !isJobId(s)) throw new HttpError(400, 'invalid_id', `id: must be a job id (a UUID), got ${JSON.stringify((s ?? '').slice(0, 60))}`, 'id');
      return s.toLowerCase();
    };
    const [a, b, c] = seg;
    // A service's ValidationError reaches the server's error mapping: 400 naming the field.
    if (a === 'dead-jobs' && seg.length === 1) return await route({ GET: () => this.listDead(r) });
    if (a === 'dead-jobs' && seg.length === 2 && b === 'redrive') return await route({ POST: () => this.redriveMany(r) });
    if (a === 'dead-jobs' && seg.length === 2 && b === 'discard') return await route({ POST: () => this.discardMany(r) });
    if (a === 'dead-jobs' && seg.length === 2) return await route({ GET: () => this.showDead(id(b)) });
    if (a === 'dead-jobs' && seg.length === 3 && c === 'redrive') return await route({ POST: () => this.redriveOne(r, id(b)) });
    if (a === 'dead-jobs' && seg.length === 3 && c === 'discard') return await route({ POST: () => this.discardOne(r, id(b)) });
    if (a === 'dlq' && seg.length === 2 && b === 'messages') return await route({ GET: () => this.dlqLook(r) });
    if (a === 'dlq' && seg.length === 2 && b === 'redrive') return await route({ POST: () => this.dlqRedrive(r) });
    if (a === 'dlq' && seg.length === 2 && b === 'discard') return await route({ POST: () => this.dlqDiscard(r) });
    if (a === 'dlq' && seg.length === 2 && b === 'move-tasks') return await route({ GET: () => this.dlqMoves(r) });
    if (a === 'dlq' && seg.length === 3 && b === 'move-tasks' && c === 'cancel') return await route({ POST: () => this.dlqMoveCancel(r) });
    if (a === 'poison-messages' && seg.length === 1) return await route({ GET: () => this.poison(r) });
    if (a === 'stuck-jobs' && seg.length === 1) return await route({ GET: () => this.stuck(r) });
    if (a === 'pending-jobs' && seg.length === 2 && b === 'republish') return await route({ POST: () => this.republish(r) });
    throw new HttpError(404, 'not_found', `no route ${r.method} ${r.path.slice(0, 200)}; see the on-call routes in runtime/http/oncall-routes.ts (/v1/dead-jobs, /v1/dlq/messages, /v1/poison-messages, /v1/stuck-jobs, /v1/pending-jobs/republish)`);
  }

  private async republish(r: OpsRequest): Promise<OpsReply> {
    const b = await body(r.req, ['ids', 'type', 'olderThanSeconds', 'by', 'reason', 'limit'], true);
    const f = filterFrom({ ...(b.ids !== undefined ? { ids: b.ids } : {}), ...(b.type !== undefined ? { type: b.type } : {}) });
    const olderThan = intParam('olderThanSeconds', b.olderThanSeconds, 0, 365 * 86_400);
    if (!f.ids?.length && !f.type && olderThan === undefined) {
      throw new HttpError(400, 'invalid_field', 'selection: name the pending jobs to re-publish: ids, type, or olderThanSeconds (due for longer than that)', 'ids');
    }
    const limit = intParam('limit', b.limit, 1, 100_000);
    const report = await this.ops.republish.republish({
      ...(f.ids ? { ids: f.ids } : {}),
      ...(f.type ? { type: f.type } : {}),
      ...(olderThan !== undefined ? { dueBefore: new Date(Date.now() - olderThan * 1000) } : {}),
      ...(limit !== undefined ? { limit } : {}),
      by: this.who(r.req, strParam('by', b.by, 200)),
      reason: strParam('reason', b.reason, 1000) ?? null,
    });
    return { status: 200, body: { republished: report.jobs.length, jobs: report.jobs, skipped: report.skipped } };
  }

  private who(req: http.IncomingMessage, by: string | undefined): string {
    return by ? `${by} (api, ${callerAddress(req)})` : `api, ${callerAddress(req)}`;
  }

  private dlq() {
    if (!this.ops.deadLetters) {
      throw new HttpError(501, 'dlq_not_configured', 'this API was started without JOBS_DLQ_URL, so it cannot read the dead-letter queue; use `jobs dlq …` with operator credentials, or give the API the DLQ URL and receive/delete rights on it');
    }
    return this.ops.deadLetters;
  }

  private async listDead(r: OpsRequest): Promise<OpsReply> {
    checkQuery(r.query, ['type', 'since', 'until', 'includeDiscarded', 'limit', 'cursor']);
    const type = strParam('type', r.query.get('type'), 100);
    const since = timeParam('since', r.query.get('since'));
    const until = timeParam('until', r.query.get('until'));
    const page = await this.ops.deadJobs.list({
      limit: intParam('limit', r.query.get('limit'), 1, 200, 50)!,
      includeDiscarded: boolParam('includeDiscarded', r.query.get('includeDiscarded')),
      ...(type ? { type } : {}),
      ...(since ? { since } : {}),
      ...(until ? { until } : {}),
      ...(r.query.get('cursor') ? { cursor: r.query.get('cursor')! } : {}),
    });
    return { status: 200, body: { deadJobs: page.jobs.map(deadJobView), nextCursor: page.nextCursor } };
  }

  private async showDead(jobId: string): Promise<OpsReply> {
    const shown = await this.ops.deadJobs.get(jobId);
    if (!shown) throw new HttpError(404, 'job_not_found', `job ${jobId} does not exist`, 'id');
    return { status: 200, body: { job: deadJobView(shown.job), actions: shown.actions.map(actionView) } };
  }

  private async redriveOne(r: OpsRequest, jobId: string): Promise<OpsReply> {
    const b = await body(r.req, ['by', 'reason', 'maxAttempts', 'fromScratch']);
    const report = await this.ops.deadJobs.redrive({
      ids: [jobId],
      by: this.who(r.req, strParam('by', b.by, 100)),
      reason: strParam('reason', b.reason, 1000) ?? null,
      maxAttempts: intParam('maxAttempts', b.maxAttempts, 1, 100) ?? null,
      fromScratch: boolParam('fromScratch', b.fromScratch),
    });
    const job = report.jobs[0];
    if (job) return { status: 200, body: { ...deadJobView(job), redriven: true } };
    const why = report.skipped[0]!;
    if (why.state === null) throw new HttpError(404, 'job_not_found', `job ${jobId} does not exist`, 'id');
    const current = await this.ops.deadJobs.get(jobId);
    return {
      status: 409,
      body: { error: { code: why.state === 'dead' ? 'redrive_skipped' : 'job_not_dead', message: `job ${jobId} was not redriven: ${why.reason}` }, job: current ? deadJobView(current.job) : null },
    };
  }

  private async discardOne(r: OpsRequest, jobId: string): Promise<OpsReply> {
    const b = await body(r.req, ['by', 'reason'], true);
    const report = await this.ops.deadJobs.discard({ ids: [jobId], by: this.who(r.req, strParam('by', b.by, 100)), reason: strParam('reason', b.reason, 1000, true)! });
    const job = report.jobs[0];
    if (job) return { status: 200, body: deadJobView(job) };
    const why = report.skipped[0]!;
    if (why.state === null) throw new HttpError(404, 'job_not_found', `job ${jobId} does not exist`, 'id');
    return { status: 409, body: { error: { code: why.state === 'dead' ? 'already_discarded' : 'job_not_dead', message: `job ${jobId} was not discarded: ${why.reason}` } } };
  }

  private async redriveMany(r: OpsRequest): Promise<OpsReply> {
    const b = await body(r.req, ['ids', 'type', 'since', 'until', 'all', 'by', 'reason', 'maxAttempts', 'fromScratch', 'dryRun'], true);
    const report = await this.ops.deadJobs.redrive({
      ...filterFrom(b),
      by: this.who(r.req, strParam('by', b.by, 100)),
      reason: strParam('reason', b.reason, 1000) ?? null,
      maxAttempts: intParam('maxAttempts', b.maxAttempts, 1, 100) ?? null,
      fromScratch: boolParam('fromScratch', b.fromScratch),
      dryRun: boolParam('dryRun', b.dryRun),
    });
    return { status: 200, body: { dryRun: report.dryRun, redriven: report.jobs.map(deadJobView), wouldRedrive: report.wouldRedrive, skipped: report.skipped } };
  }

  private async discardMany(r: OpsRequest): Promise<OpsReply> {
    const b = await body(r.req, ['ids', 'type', 'since', 'until', 'all', 'by', 'reason'], true);
    const report = await this.ops.deadJobs.discard({ ...filterFrom(b), by: this.who(r.req, strParam('by', b.by, 100)), reason: strParam('reason', b.reason, 1000, true)! });
    return { status: 200, body: { discarded: report.jobs.map(deadJobView), skipped: report.skipped } };
  }

  private async dlqLook(r: OpsRequest): Promise<OpsReply> {
    checkQuery(r.query, ['limit', 'poison']);
    const report = await this.dlq().look(intParam('limit', r.query.get('limit'), 1, 10_000, 1000)!);
    const letters = boolParam('poison', r.query.get('poison')) ? report.letters.filter((l) => l.verdict === 'keep' && l.jobState === null) : report.letters;
    return { status: 200, body: dlqView({ ...report, letters }) };
  }

  private async dlqRedrive(r: OpsRequest): Promise<OpsReply> {
    const b = await body(r.req, ['dryRun', 'move', 'limit', 'rate', 'by']);
    const rate = intParam('rate', b.rate, 1, 500);
    const report = await this.dlq().redrive({
      by: this.who(r.req, strParam('by', b.by, 100)),
      dryRun: boolParam('dryRun', b.dryRun),
      move: boolParam('move', b.move),
      limit: intParam('limit', b.limit, 1, 100_000, 1000)!,
      ...(rate ? { maxPerSecond: rate } : {}),
    });
    return { status: report.refused ? 409 : 200, body: report.refused ? { error: { code: 'move_refused', message: report.refused }, ...dlqView(report) } : dlqView(report) };
  }

  private async dlqDiscard(r: OpsRequest): Promise<OpsReply> {
    const b = await body(r.req, ['messageIds', 'reason', 'by'], true);
    if (!Array.isArray(b.messageIds) || b.messageIds.length === 0 || b.messageIds.length > 1000 || b.messageIds.some((x) => typeof x !== 'string' || x.length < 1 || x.length > 200)) {
      throw new HttpError(400, 'invalid_field', 'messageIds: must be an array of 1 to 1000 message ids (see GET /v1/dlq/messages)', 'messageIds');
    }
    const report = await this.dlq().discard({ messageIds: b.messageIds as string[], by: this.who(r.req, strParam('by', b.by, 100)), reason: strParam('reason', b.reason, 1000, true)! });
    return { status: 200, body: { ...dlqView(report), notFound: report.notFound } };
  }

  private async dlqMoves(r: OpsRequest): Promise<OpsReply> {
    checkQuery(r.query, []);
    const dlq = this.dlq();
    return { status: 200, body: { local: dlq.local, moveTasks: await dlq.moveTasks() } };
  }

  private async dlqMoveCancel(r: OpsRequest): Promise<OpsReply> {
    const b = await body(r.req, ['taskHandle', 'by'], true);
    const taskHandle = strParam('taskHandle', b.taskHandle, 2048, true)!;
    const dlq = this.dlq();
    try {
      const done = await dlq.cancelMove({ taskHandle, by: this.who(r.req, strParam('by', b.by, 100)) });
      return { status: 200, body: { cancelled: true, ...done } };
    } catch (err) {
      if (!(err instanceof MoveCancelError)) throw err;
      // local: nothing wrong with the handle, this endpoint has no move tasks. denied: SQS (IAM)
      // refused this task, not the operator token; the code and message say which.
      if (err.reason === 'local') throw new HttpError(409, 'move_tasks_local', err.message);
      if (err.reason === 'not-found') throw new HttpError(404, 'move_task_not_found', err.message, 'taskHandle');
      throw new HttpError(403, 'move_cancel_denied', err.message, 'taskHandle');
    }
  }

  private async poison(r: OpsRequest): Promise<OpsReply> {
    checkQuery(r.query, ['reason', 'since', 'includeResolved', 'limit', 'cursor']);
    const reason = r.query.get('reason');
    if (reason !== null && reason !== 'unparseable-body' && reason !== 'unknown-job') {
      throw new HttpError(400, 'invalid_field', 'reason: must be unparseable-body or unknown-job', 'reason');
    }
    const cursor = r.query.get('cursor');
    if (cursor !== null && !/^\d{1,18}$/.test(cursor)) throw new HttpError(400, 'invalid_query', 'cursor: is not a cursor this listing returned', 'cursor');
    const since = timeParam('since', r.query.get('since'));
    const page = await listPoisonMessages(this.ops.pool, {
      limit: intParam('limit', r.query.get('limit'), 1, 200, 50)!,
      includeResolved: boolParam('includeResolved', r.query.get('includeResolved')),
      ...(reason ? { reason: reason as PoisonReason } : {}),
      ...(since ? { since } : {}),
      ...(cursor ? { before: cursor } : {}),
    });
    return { status: 200, body: page };
  }

  private async stuck(r: OpsRequest): Promise<OpsReply> {
    checkQuery(r.query, ['limit']);
    const stuck = await findStuckJobs(this.ops.pool, this.ops.registry, this.ops.stuck, intParam('limit', r.query.get('limit'), 1, 1000, 100)!);
    return {
      status: 200,
      body: {
        thresholds: this.ops.stuck,
        stuckJobs: stuck.map((s) => ({
          ...jobView(s.job),
          reason: s.reason,
          since: s.since.toISOString(),
          stuckForSeconds: s.stuckForSeconds,
          limitSeconds: s.limitSeconds,
          limitFromType: s.limitFromType,
          leaseOwner: s.job.leaseOwner,
          leaseExpiresAt: s.job.leaseExpiresAt?.toISOString() ?? null,
        })),
      },
    };
  }
}
