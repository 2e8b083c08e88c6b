// The dead-letter queue's on-call routes, in the on-call route table (oncall-routes.ts: the
// operator token, the error shape and who asked are described there). They read, resend and
// delete the DLQ's messages through the DLQ service (oncall/dlq.ts); an API started without
// JOBS_DLQ_URL answers them 501:
//
//   GET  /v1/dlq/messages?limit=&poison=&lane=   every lane's DLQ (or one), each message judged by its job (holds them a moment)
//   POST /v1/dlq/redrive                     { lane?, dryRun?, move?, limit?, rate?, by? }   to each job's lane's queue
//   POST /v1/dlq/discard                     { messageIds, reason, lane?, by? }
//   GET  /v1/dlq/move-tasks                  SQS message move tasks of the DLQ (AWS)
//   POST /v1/dlq/move-tasks/cancel           { taskHandle, by? }   stop a running move (AWS); 404 no such running task, 403 SQS refused, 409 local

import type http from 'node:http';
import * as z from 'zod';
import {
  by,
  flag,
  flagParam,
  HttpError,
  laneFilter,
  listLimit,
  optional,
  route,
  text,
  wholeNumber,
  type Reply,
  type Route,
  type RouteContext,
} from './kernel.ts';
import { MoveCancelError, type DlqPassReport } from '../oncall/dlq.ts';
import type { OpsServices } from '../oncall/services.ts';

type OpsReply = Reply;
type Ctx<Q = unknown, B = unknown> = RouteContext<Q, B>;
type In<S extends z.ZodType> = z.output<S>;

function dlqView(r: DlqPassReport) {
  return {
    ...r,
    letters: r.letters.map((l) => ({ ...l, sentAt: l.sentAt?.toISOString() ?? null })),
  };
}

// --- Input ------------------------------------------------------------------------------------

const messageIdsError = 'must be an array of 1 to 1000 message ids (see GET /v1/dlq/messages)';

/** One lane's DLQ; absent: every lane's. */
const lane = () => laneFilter("one lane's DLQ; default every lane's");
const DlqQuery = z.object({ limit: listLimit(10_000, 1000), poison: optional(flagParam()), lane: lane() });
const DlqRedrive = z.strictObject({
  lane: lane(),
  dryRun: optional(flag()),
  move: optional(flag()),
  limit: optional(wholeNumber(1, 100_000)),
  rate: optional(wholeNumber(1, 500)),
  by: by(100),
});
const DlqDiscard = z.strictObject({
  messageIds: z
    .array(z.string({ error: messageIdsError }).min(1, { error: messageIdsError }).max(200, { error: messageIdsError }), {
      error: messageIdsError,
    })
    .min(1, { error: messageIdsError })
    .max(1000, { error: messageIdsError }),
  reason: text(1000),
  lane: lane(),
  by: by(100),
});
const MoveCancel = z.strictObject({ taskHandle: text(2048), by: by(100) });

// --- Routes -----------------------------------------------------------------------------------

export class DlqRoutes {
  /** The DLQ's routes; OpsRoutes puts them in the on-call table. */
  readonly routes: Route[];

  /** `who` names who asked, as the rest of the on-call routes record it. */
  constructor(
    private readonly ops: OpsServices,
    private readonly who: (req: http.IncomingMessage, by: string | undefined) => string,
  ) {
    this.routes = [
      route({
        method: 'GET',
        path: '/v1/dlq/messages',
        summary: "the DLQ's messages, each judged by its job (holds them a moment)",
        query: DlqQuery,
        handle: (c) => this.dlqLook(c),
      }),
      route({
        method: 'POST',
        path: '/v1/dlq/redrive',
        summary: 'resend the dead letters whose job still needs a message',
        body: DlqRedrive,
        handle: (c) => this.dlqRedrive(c),
      }),
      route({
        method: 'POST',
        path: '/v1/dlq/discard',
        summary: 'delete dead letters',
        bodyRequired: true,
        body: DlqDiscard,
        handle: (c) => this.dlqDiscard(c),
      }),
      route({
        method: 'GET',
        path: '/v1/dlq/move-tasks',
        summary: 'SQS message move tasks of the DLQ (AWS)',
        query: z.object({}),
        handle: () => this.dlqMoves(),
      }),
      route({
        method: 'POST',
        path: '/v1/dlq/move-tasks/cancel',
        summary: 'stop a running move (AWS); 404 no such running task, 403 SQS refused, 409 local',
        bodyRequired: true,
        body: MoveCancel,
        handle: (c) => this.dlqMoveCancel(c),
      }),
    ];
  }

  private dlq() {
    if (!this.ops.deadLetters) {
      throw new HttpError(
        501,
        'dlq_not_configured',
        'this API was started without JOBS_DLQ_URL, so it cannot read the dead-letter queue; use `jobs dlq …` with operator credentials, or give the API the DLQ URL and receive/delete rights on it',
      );
    }
    return this.ops.deadLetters;
  }

  private async dlqLook(c: Ctx<In<typeof DlqQuery>>): Promise<OpsReply> {
    const report = await this.dlq().look(c.query.limit ?? 1000, c.query.lane);
    const letters = c.query.poison ? report.letters.filter((l) => l.verdict === 'keep' && l.jobState === null) : report.letters;
    return { status: 200, body: dlqView({ ...report, letters }) };
  }

  private async dlqRedrive(c: Ctx<unknown, In<typeof DlqRedrive>>): Promise<OpsReply> {
    const b = c.body;
    const report = await this.dlq().redrive({
      ...(b.lane ? { lane: b.lane } : {}),
      by: this.who(c.req, b.by),
      dryRun: b.dryRun ?? false,
      move: b.move ?? false,
      limit: b.limit ?? 1000,
      ...(b.rate ? { maxPerSecond: b.rate } : {}),
    });
    return {
      status: report.refused ? 409 : 200,
      body: report.refused ? { error: { code: 'move_refused', message: report.refused }, ...dlqView(report) } : dlqView(report),
    };
  }

  private async dlqDiscard(c: Ctx<unknown, In<typeof DlqDiscard>>): Promise<OpsReply> {
    const report = await this.dlq().discard({
      messageIds: c.body.messageIds,
      by: this.who(c.req, c.body.by),
      reason: c.body.reason,
      ...(c.body.lane ? { lane: c.body.lane } : {}),
    });
    return { status: 200, body: { ...dlqView(report), notFound: report.notFound } };
  }

  private async dlqMoves(): Promise<OpsReply> {
    const dlq = this.dlq();
    return { status: 200, body: { local: dlq.local, moveTasks: await dlq.moveTasks() } };
  }

  private async dlqMoveCancel(c: Ctx<unknown, In<typeof MoveCancel>>): Promise<OpsReply> {
    const taskHandle = c.body.taskHandle;
    const dlq = this.dlq();
    try {
      const done = await dlq.cancelMove({ taskHandle, by: this.who(c.req, c.body.by) });
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
}
