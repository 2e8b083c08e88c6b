// The on-call routes of the HTTP API, mounted by the API server (server.ts, "On-call" section)
// under /v1. Every one of them needs the operator token (API_OPERATOR_TOKEN) when it is set: they
// redrive and discard, and they show raw DLQ and poison bodies, operator actions and their
// callers' addresses; the ERP clients' API_TOKEN gets a 403 here. Without an operator token they
// take the API token, as before (the API warns at start):
//
//   GET  /v1/dead-jobs?type=&lane=&since=&until=&includeDiscarded=&limit=&cursor=   dead jobs, newest death first
//   GET  /v1/dead-jobs/{id}                  one job's dead-letter view: reason, every attempt, operator actions
//   POST /v1/dead-jobs/{id}/redrive          { by?, reason?, maxAttempts?, fromScratch? }       409 when not dead
//   POST /v1/dead-jobs/{id}/discard          { by?, reason }                                   409 when not dead
//   POST /v1/dead-jobs/redrive               { ids? | type?, lane?, since?, until? | all: true, by?, reason?, maxAttempts?, fromScratch?, dryRun? }
//   POST /v1/dead-jobs/discard               { ids? | type?, lane?, since?, until? | all: true, by?, reason, dryRun? }
//   GET|POST /v1/dlq/…                       the dead-letter queue's routes (dlq-routes.ts)
//   GET  /v1/poison-messages?reason=&since=&includeResolved=&limit=&cursor=
//   GET  /v1/stuck-jobs?limit=&runningSeconds=&pendingSeconds=
//   POST /v1/pending-jobs/republish          { ids? | type? | olderThanSeconds?, by?, reason?, limit? }   fresh messages for pending jobs
//   GET|POST /v1/schedules/…                 the schedules: list, pause, resume, trigger (schedule-routes.ts)
//
// The route table below declares each route's query and body schema; the kernel (kernel.ts)
// matches, answers 405 and checks input before a service runs. Errors keep the API's shape `{ error: { code, message, field? } }`; a service's ValidationError
// becomes a 400 naming the field. Who asked is recorded as the name given plus the caller's
// address, as for cancel: a shared token names no person.

import type http from 'node:http';
import type * as z from 'zod';
import {
  callerAddress,
  HttpError,
  jobView,
  route,
  type JobView,
  type Reply,
  type Route,
  type RouteContext,
  type RouteTable,
} from './kernel.ts';
import type { AttemptOutcome } from '../domain/job.ts';
import type { OpsJob, OperatorAction } from '../oncall/db.ts';
import { deathSummary } from '../oncall/dead-jobs.ts';
import { listPoisonMessages, type PoisonReason } from '../store/poison.ts';
import type { OpsServices } from '../oncall/services.ts';
import { findStuckJobs } from '../oncall/stuck.ts';
import { DlqRoutes } from './dlq-routes.ts';
import {
  DeadJobsQuery,
  DiscardMany,
  DiscardOne,
  filterFrom,
  id,
  PoisonQuery,
  RedriveMany,
  RedriveOne,
  Republish,
  StuckQuery,
} from './oncall-inputs.ts';
import { ScheduleRoutes } from './schedule-routes.ts';

const PREFIXES = ['/v1/dead-jobs', '/v1/dlq', '/v1/poison-messages', '/v1/stuck-jobs', '/v1/pending-jobs', '/v1/schedules'];

type OpsReply = Reply;

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
    discarded: j.dead?.discardedAt
      ? { at: j.dead.discardedAt.toISOString(), by: j.dead.discardedBy!, reason: j.dead.discardReason! }
      : null,
  };
}

function actionView(a: OperatorAction) {
  return { at: a.at.toISOString(), action: a.action, by: a.by, messageId: a.messageId, reason: a.reason, detail: a.detail };
}

type Ctx<Q = unknown, B = unknown> = RouteContext<Q, B>;
type In<S extends z.ZodType> = z.output<S>;

// --- Routes -----------------------------------------------------------------------------------

export class OpsRoutes {
  /** The on-call routes; the server hands a path here after checking the operator token. */
  readonly table: RouteTable;

  constructor(private readonly ops: OpsServices) {
    const dlq = new DlqRoutes(ops, (req, by) => this.who(req, by));
    const schedules = new ScheduleRoutes(ops, (req, by) => this.who(req, by));
    // A literal segment comes before :id, so /v1/dead-jobs/redrive is never read as an id.
    const routes: Route[] = [
      route({
        method: 'GET',
        path: '/v1/dead-jobs',
        summary: 'dead jobs, newest death first',
        query: DeadJobsQuery,
        handle: (c) => this.listDead(c),
      }),
      route({
        method: 'POST',
        path: '/v1/dead-jobs/redrive',
        summary: 'redrive dead jobs: ids, or a filter (type, lane, since, until), or all',
        bodyRequired: true,
        body: RedriveMany,
        handle: (c) => this.redriveMany(c),
      }),
      route({
        method: 'POST',
        path: '/v1/dead-jobs/discard',
        summary: 'discard dead jobs: ids, or a filter, or all',
        bodyRequired: true,
        body: DiscardMany,
        handle: (c) => this.discardMany(c),
      }),
      route({
        method: 'GET',
        path: '/v1/dead-jobs/:id',
        summary: "one job's dead-letter view: reason, every attempt, operator actions",
        params: id,
        handle: (c) => this.showDead(c.params.id!),
      }),
      route({
        method: 'POST',
        path: '/v1/dead-jobs/:id/redrive',
        summary: 'redrive one dead job (409 when not dead)',
        params: id,
        body: RedriveOne,
        handle: (c) => this.redriveOne(c),
      }),
      route({
        method: 'POST',
        path: '/v1/dead-jobs/:id/discard',
        summary: 'discard one dead job (409 when not dead)',
        params: id,
        bodyRequired: true,
        body: DiscardOne,
        handle: (c) => this.discardOne(c),
      }),
      ...dlq.routes,
      route({
        method: 'GET',
        path: '/v1/poison-messages',
        summary: 'messages the worker could not use, with their raw body',
        query: PoisonQuery,
        handle: (c) => this.poison(c),
      }),
      route({
        method: 'GET',
        path: '/v1/stuck-jobs',
        summary: 'jobs running too long, or due and not picked up',
        query: StuckQuery,
        handle: (c) => this.stuck(c),
      }),
      route({
        method: 'POST',
        path: '/v1/pending-jobs/republish',
        summary: 'fresh messages for pending jobs whose message the queue lost: ids, type or olderThanSeconds',
        bodyRequired: true,
        body: Republish,
        handle: (c) => this.republish(c),
      }),
      ...schedules.routes,
    ];
    this.table = {
      routes,
      notFound: (method, path) =>
        new HttpError(
          404,
          'not_found',
          `no route ${method} ${path.slice(0, 200)}; see the on-call routes in runtime/http/oncall-routes.ts (/v1/dead-jobs, /v1/dlq/messages, /v1/poison-messages, /v1/stuck-jobs, /v1/pending-jobs/republish, /v1/schedules)`,
        ),
    };
  }

  /** True for the paths this module answers (the server hands them over after checking the operator token). */
  owns(path: string): boolean {
    return PREFIXES.some((p) => path === p || path.startsWith(`${p}/`));
  }

  private async republish(c: Ctx<unknown, In<typeof Republish>>): Promise<OpsReply> {
    const b = c.body;
    const olderThan = b.olderThanSeconds;
    if (!b.ids?.length && !b.type && olderThan === undefined) {
      throw new HttpError(
        400,
        'invalid_field',
        'selection: name the pending jobs to re-publish: ids, type, or olderThanSeconds (due for longer than that)',
        'ids',
      );
    }
    const report = await this.ops.republish.republish({
      ...(b.ids ? { ids: b.ids } : {}),
      ...(b.type ? { type: b.type } : {}),
      ...(olderThan !== undefined ? { dueBefore: new Date(Date.now() - olderThan * 1000) } : {}),
      ...(b.limit !== undefined ? { limit: b.limit } : {}),
      by: this.who(c.req, b.by),
      reason: b.reason ?? null,
    });
    return { status: 200, body: { republished: report.jobs.length, jobs: report.jobs, skipped: report.skipped } };
  }

  private who(req: http.IncomingMessage, by: string | undefined): string {
    return by ? `${by} (api, ${callerAddress(req)})` : `api, ${callerAddress(req)}`;
  }

  private async listDead(c: Ctx<In<typeof DeadJobsQuery>>): Promise<OpsReply> {
    const q = c.query;
    const page = await this.ops.deadJobs.list({
      limit: q.limit ?? 50,
      includeDiscarded: q.includeDiscarded ?? false,
      ...(q.type ? { type: q.type } : {}),
      ...(q.lane ? { lane: q.lane } : {}),
      ...(q.since ? { since: q.since } : {}),
      ...(q.until ? { until: q.until } : {}),
      ...(q.cursor ? { cursor: q.cursor } : {}),
    });
    return { status: 200, body: { deadJobs: page.jobs.map(deadJobView), nextCursor: page.nextCursor } };
  }

  private async showDead(jobId: string): Promise<OpsReply> {
    const shown = await this.ops.deadJobs.get(jobId);
    if (!shown) throw new HttpError(404, 'job_not_found', `job ${jobId} does not exist`, 'id');
    return { status: 200, body: { job: deadJobView(shown.job), actions: shown.actions.map(actionView) } };
  }

  private async redriveOne(c: Ctx<unknown, In<typeof RedriveOne>>): Promise<OpsReply> {
    const jobId = c.params.id!;
    const b = c.body;
    const report = await this.ops.deadJobs.redrive({
      ids: [jobId],
      by: this.who(c.req, b.by),
      reason: b.reason ?? null,
      maxAttempts: b.maxAttempts ?? null,
      fromScratch: b.fromScratch ?? false,
    });
    const job = report.jobs[0];
    if (job) return { status: 200, body: { ...deadJobView(job), redriven: true } };
    const why = report.skipped[0]!;
    if (why.state === null) throw new HttpError(404, 'job_not_found', `job ${jobId} does not exist`, 'id');
    const current = await this.ops.deadJobs.get(jobId);
    return {
      status: 409,
      body: {
        error: { code: why.state === 'dead' ? 'redrive_skipped' : 'job_not_dead', message: `job ${jobId} was not redriven: ${why.reason}` },
        job: current ? deadJobView(current.job) : null,
      },
    };
  }

  private async discardOne(c: Ctx<unknown, In<typeof DiscardOne>>): Promise<OpsReply> {
    const jobId = c.params.id!;
    const report = await this.ops.deadJobs.discard({ ids: [jobId], by: this.who(c.req, c.body.by), reason: c.body.reason });
    const job = report.jobs[0];
    if (job) return { status: 200, body: deadJobView(job) };
    const why = report.skipped[0]!;
    if (why.state === null) throw new HttpError(404, 'job_not_found', `job ${jobId} does not exist`, 'id');
    return {
      status: 409,
      body: {
        error: {
          // already_discarded: the state asked for holds (the CLI exits 0); discard_skipped: another operator action held it, try again.
          code: why.alreadyDone ? 'already_discarded' : why.state === 'dead' ? 'discard_skipped' : 'job_not_dead',
          message: `job ${jobId} was not discarded: ${why.reason}`,
        },
      },
    };
  }

  private async redriveMany(c: Ctx<unknown, In<typeof RedriveMany>>): Promise<OpsReply> {
    const b = c.body;
    const report = await this.ops.deadJobs.redrive({
      ...filterFrom(b),
      by: this.who(c.req, b.by),
      reason: b.reason ?? null,
      maxAttempts: b.maxAttempts ?? null,
      fromScratch: b.fromScratch ?? false,
      dryRun: b.dryRun ?? false,
    });
    return {
      status: 200,
      body: { dryRun: report.dryRun, redriven: report.jobs.map(deadJobView), wouldRedrive: report.wouldRedrive, skipped: report.skipped },
    };
  }

  private async discardMany(c: Ctx<unknown, In<typeof DiscardMany>>): Promise<OpsReply> {
    const dryRun = c.body.dryRun ?? false;
    const report = await this.ops.deadJobs.discard({
      ...filterFrom(c.body),
      by: this.who(c.req, c.body.by),
      reason: c.body.reason,
      dryRun,
    });
    // A dry run answers what a discard would take (its first batch), as `jobs dead discard --dry-run` prints.
    if (dryRun) return { status: 200, body: { dryRun, wouldDiscard: report.jobs.map(deadJobView), skipped: report.skipped } };
    return { status: 200, body: { discarded: report.jobs.map(deadJobView), skipped: report.skipped } };
  }

  private async poison(c: Ctx<In<typeof PoisonQuery>>): Promise<OpsReply> {
    const q = c.query;
    const page = await listPoisonMessages(this.ops.pool, {
      limit: q.limit ?? 50,
      includeResolved: q.includeResolved ?? false,
      ...(q.reason ? { reason: q.reason as PoisonReason } : {}),
      ...(q.since ? { since: q.since } : {}),
      ...(q.cursor ? { before: q.cursor } : {}),
    });
    return { status: 200, body: page };
  }

  private async stuck(c: Ctx<In<typeof StuckQuery>>): Promise<OpsReply> {
    const { limit, ...asked } = c.query;
    const thresholds = { ...this.ops.stuck, ...Object.fromEntries(Object.entries(asked).filter(([, v]) => v !== undefined)) };
    const stuck = await findStuckJobs(this.ops.pool, this.ops.registry, thresholds, limit ?? 100);
    return {
      status: 200,
      body: {
        thresholds,
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
