// The schedules' on-call routes, in the on-call route table (oncall-routes.ts: the operator
// token, the error shape and who asked are described there). They read and change the schedules
// through the schedule service (oncall/schedules.ts); each change is an operator action:
//
//   GET  /v1/schedules?next=&last=          each declared schedule: cron, zone, type, policy, paused, next and last occurrences
//   POST /v1/schedules/{name}/pause         { by?, reason? }   409 already paused
//   POST /v1/schedules/{name}/resume        { by?, reason? }   409 not paused; resumes from the next occurrence
//   POST /v1/schedules/{name}/trigger       { by?, reason?, again? }   201: one job now (key schedule:<name>:manual:<instant>);
//                                            409 already_done: the schedule's work key says the work was done (again: true runs it)
//
// A name this build does not declare is a 404 listing the known ones.

import type http from 'node:http';
import * as z from 'zod';
import { ValidationError } from '../domain/errors.ts';
import { by, HttpError, jobView, optional, route, text, wholeNumberParam, type Reply, type Route, type RouteContext } from './kernel.ts';
import type { OpsServices } from '../oncall/services.ts';

type Ctx<Q = unknown, B = unknown> = RouteContext<Q, B>;
type In<S extends z.ZodType> = z.output<S>;

const ListQuery = z.object({ next: optional(wholeNumberParam(0, 50)), last: optional(wholeNumberParam(0, 50)) });
const Change = z.strictObject({ by: by(100), reason: optional(text(1000)) });
const Trigger = z.strictObject({
  by: by(100),
  reason: optional(text(1000)),
  again: z.boolean().optional().describe("run the work even if the schedule's work key says it was done"),
});
const name = { name: text(100) };

export class ScheduleRoutes {
  /** The schedules' routes; OpsRoutes puts them in the on-call table. */
  readonly routes: Route[];

  /** `who` names who asked, as the rest of the on-call routes record it. */
  constructor(
    private readonly ops: OpsServices,
    private readonly who: (req: http.IncomingMessage, by: string | undefined) => string,
  ) {
    this.routes = [
      route({
        method: 'GET',
        path: '/v1/schedules',
        summary: 'the declared schedules: next and last occurrences, paused or not',
        query: ListQuery,
        handle: (c) => this.list(c),
      }),
      route({
        method: 'POST',
        path: '/v1/schedules/:name/pause',
        summary: 'pause a schedule: no occurrence is enqueued until it is resumed (409 when already paused)',
        params: name,
        body: Change,
        handle: (c) => this.change(c, 'pause'),
      }),
      route({
        method: 'POST',
        path: '/v1/schedules/:name/resume',
        summary: 'resume a paused schedule from its next occurrence (409 when not paused)',
        params: name,
        body: Change,
        handle: (c) => this.change(c, 'resume'),
      }),
      route({
        method: 'POST',
        path: '/v1/schedules/:name/trigger',
        summary: "enqueue one of the schedule's jobs now, outside its cron expression",
        params: name,
        body: Trigger,
        handle: (c) => this.trigger(c),
      }),
    ];
  }

  private async list(c: Ctx<In<typeof ListQuery>>): Promise<Reply> {
    const schedules = await this.ops.schedules.list({
      ...(c.query.next !== undefined ? { next: c.query.next } : {}),
      ...(c.query.last !== undefined ? { last: c.query.last } : {}),
    });
    return { status: 200, body: { schedules } };
  }

  private async change(c: Ctx<unknown, In<typeof Change>>, action: 'pause' | 'resume'): Promise<Reply> {
    const n = this.known(c.params.name!);
    const who = this.who(c.req, c.body.by);
    const r =
      action === 'pause'
        ? await this.ops.schedules.pause(n, who, c.body.reason ?? null)
        : await this.ops.schedules.resume(n, who, c.body.reason ?? null);
    if (r.changed) return { status: 200, body: { [action === 'pause' ? 'paused' : 'resumed']: true, schedule: r.schedule } };
    const p = r.schedule.paused;
    return {
      status: 409,
      body: {
        error:
          action === 'pause'
            ? { code: 'already_paused', message: `schedule ${n} is already paused (by ${p?.by} at ${p?.at})` }
            : { code: 'not_paused', message: `schedule ${n} is not paused` },
        schedule: r.schedule,
      },
    };
  }

  private async trigger(c: Ctx<unknown, In<typeof Trigger>>): Promise<Reply> {
    const n = this.known(c.params.name!);
    const r = await this.ops.schedules.trigger(n, this.who(c.req, c.body.by), c.body.reason ?? null, c.body.again ?? false);
    if (r.alreadyDone) {
      const d = r.alreadyDone;
      return {
        status: 409,
        body: {
          error: {
            code: 'already_done',
            message: `the work ${d.workKey} was done already by ${d.jobId ? `job ${d.jobId}` : 'a job'} (schedule ${d.schedule}, ${d.occurrence}); nothing enqueued; send again: true to run it anyway`,
          },
          alreadyDone: d,
          job: r.job ? jobView(r.job) : null,
        },
      };
    }
    return { status: r.duplicate ? 200 : 201, body: { schedule: n, key: r.key, job: jobView(r.job, { duplicate: r.duplicate }) } };
  }

  /** The name, or a 404 naming the schedules this build declares. */
  private known(n: string): string {
    try {
      this.ops.schedules.definition(n);
      return n;
    } catch (err) {
      if (err instanceof ValidationError) throw new HttpError(404, 'schedule_not_found', err.reason, 'name');
      throw err;
    }
  }
}
