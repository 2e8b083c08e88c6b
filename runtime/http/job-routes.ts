// The job routes of the API: health checks, enqueue, read, list and cancel jobs, the job types
// and the OpenAPI document, as one route table the kernel (kernel.ts) answers; server.ts puts it
// beside the on-call and live view tables behind the bearer tokens.
//
// Enqueue checks the body with the enqueue request's schema (store/enqueue-request.ts), the one
// JobClient applies to a library caller, and inserts through JobClient: job row and outbox row in
// one transaction, the SQS message after COMMIT (DESIGN 6, 7).

import type pg from 'pg';
import * as z from 'zod';
import { pendingMigrations } from '../db/migrate.ts';
import { isJobId, parseIsoTime } from '../domain/ids.ts';
import { JOB_STATES, type Job, type JobState } from '../domain/job.ts';
import { LANES } from '../domain/lanes.ts';
import type { JobRegistry } from '../handlers/registry.ts';
import { describeJobType } from '../handlers/types.ts';
import type { Logger } from '../observability/log.ts';
import { MAX_PAYLOAD_BYTES, type JobClient } from '../store/client.ts';
import { enqueueRequest, type EnqueueRequest } from '../store/enqueue-request.ts';
import {
  callerAddress,
  HttpError,
  jobId,
  jobView,
  optional,
  route,
  type Reply,
  type Route,
  type RouteContext,
  type RouteTable,
} from './kernel.ts';

/** Page size of GET /v1/jobs when the caller gives none, and the largest it may ask for. */
export const DEFAULT_PAGE_SIZE = 50;
/** POST /v1/jobs/batch: at most this many jobs, and this many bytes, in one request. */
export const MAX_BATCH_JOBS = 500;
export const MAX_BATCH_BODY_BYTES = 4 * 1024 * 1024;
export const MAX_PAGE_SIZE = 200;

/** The registry's rule for type names (a filter that cannot name a type is a typo, not an empty page). */
const TYPE_NAME = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$/;

interface Cursor {
  createdAt: Date;
  id: string;
}

/** Opaque to clients: base64url of the last job's (createdAt, id), the store's keyset. */
export function encodeCursor(job: Pick<Job, 'createdAt' | 'id'>): string {
  return Buffer.from(JSON.stringify({ t: job.createdAt.toISOString(), i: job.id })).toString('base64url');
}

export function decodeCursor(raw: string): Cursor {
  const bad = () =>
    new HttpError(
      400,
      'invalid_query',
      'cursor: is not a cursor this API returned (pass nextCursor from the previous page unchanged)',
      'cursor',
    );
  if (raw.length > 200 || !/^[A-Za-z0-9_-]+$/.test(raw)) throw bad();
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8'));
  } catch {
    throw bad();
  }
  const o = parsed as { t?: unknown; i?: unknown } | null;
  if (!o || typeof o !== 'object' || typeof o.t !== 'string' || typeof o.i !== 'string' || !isJobId(o.i)) throw bad();
  const createdAt = parseIsoTime(o.t);
  if (!createdAt) throw bad();
  return { createdAt, id: o.i.toLowerCase() };
}

export interface JobRoutesOptions {
  /** The pool /readyz checks (reachability and migrations). */
  pool: pg.Pool;
  client: JobClient;
  registry: JobRegistry;
  log: Logger;
  /** Largest enqueue body read. */
  maxBodyBytes: number;
  /** /readyz answers 503 when its checks take longer than this. */
  readyTimeoutMs: number;
  /** Where /readyz looks for the migrations the schema must have. Default: the runtime's own. */
  migrationsDir?: string | undefined;
  /** The OpenAPI document GET /v1/openapi.json answers (built by the server from every table it serves). */
  openApi(): Record<string, unknown>;
}

/** The job routes, with the 404 that lists them. */
export function jobRouteTable(opts: JobRoutesOptions): RouteTable {
  const { client, registry, log, maxBodyBytes, readyTimeoutMs } = opts;
  const typeError = () =>
    `must be a job type name such as ledger.post (lower-case dotted words); known types: ${registry.types().join(', ')}`;
  const listQuery = z.object({
    state: z
      .enum(JOB_STATES, {
        error: (iss) => `must be one of ${JOB_STATES.join(', ')} (got ${JSON.stringify(String(iss.input).slice(0, 40))})`,
      })
      .optional(),
    type: z.string().max(100, { error: typeError }).regex(TYPE_NAME, { error: typeError }).optional(),
    lane: z
      .enum(LANES, { error: (iss) => `must be one of ${LANES.join(', ')} (got ${JSON.stringify(String(iss.input).slice(0, 40))})` })
      .optional(),
    limit: z
      .string()
      .regex(/^\d{1,6}$/, {
        error: (iss) => `must be a whole number from 1 to ${MAX_PAGE_SIZE} (got ${JSON.stringify(String(iss.input).slice(0, 40))})`,
      })
      .refine((v) => Number(v) >= 1 && Number(v) <= MAX_PAGE_SIZE, {
        error: (iss) => `must be a whole number from 1 to ${MAX_PAGE_SIZE} (got ${JSON.stringify(String(iss.input).slice(0, 40))})`,
      })
      .transform(Number)
      .optional()
      .meta({ description: `page size, 1 to ${MAX_PAGE_SIZE}; default ${DEFAULT_PAGE_SIZE}` }),
    cursor: z.string().optional().meta({ description: 'nextCursor of the previous page, unchanged' }),
  });
  const id = { id: jobId() };
  const byError = 'must be a string of 1 to 100 characters naming who cancels (a person or a system)';

  const jobRoutes: Route[] = [
    route({
      method: 'GET',
      path: '/healthz',
      summary: 'liveness: the process answers',
      handle: async () => ({ status: 200, body: { status: 'ok' } }),
    }),
    route({
      method: 'GET',
      path: '/readyz',
      summary: 'readiness: the database answers and has every migration',
      handle: (ctx) => readyz(ctx),
    }),
    route({
      method: 'GET',
      path: '/v1/jobs',
      summary: 'list jobs, newest first, a page at a time',
      query: listQuery,
      handle: (ctx) => listJobs(ctx),
    }),
    route({
      method: 'POST',
      path: '/v1/jobs',
      summary:
        "enqueue a job (201; 200 with duplicate: true and the key's job as it is, for an active job with the same type and idempotency key, or an ended one its type keeps the key of; payloadDiffers: true when that job's payload is not this request's)",
      // The enqueue request's one schema (store/enqueue-request.ts), which JobClient applies to library callers too.
      body: enqueueRequest(registry),
      bodyRequired: true,
      maxBodyBytes,
      limitHint: `a job payload may be at most ${MAX_PAYLOAD_BYTES} bytes (store large inputs in a table and pass their id)`,
      fieldsOf: 'a job',
      handle: (ctx) => enqueue(ctx),
    }),
    route({
      method: 'POST',
      path: '/v1/jobs/batch',
      summary: `enqueue up to ${MAX_BATCH_JOBS} jobs at once, all or none (201; each job with its duplicate flag)`,
      body: z.strictObject({
        jobs: z
          .array(enqueueRequest(registry), { error: `must be a list of 1 to ${MAX_BATCH_JOBS} jobs` })
          .min(1, { error: `must be a list of 1 to ${MAX_BATCH_JOBS} jobs` })
          .max(MAX_BATCH_JOBS, {
            error: (iss) => `must be a list of 1 to ${MAX_BATCH_JOBS} jobs (got ${(iss.input as unknown[]).length}); split it`,
          })
          .meta({ description: 'the jobs, each as the body of POST /v1/jobs' }),
      }),
      bodyRequired: true,
      maxBodyBytes: MAX_BATCH_BODY_BYTES,
      limitHint: `a batch may be at most ${MAX_BATCH_BODY_BYTES} bytes; split it, or store large inputs in a table and pass their ids`,
      fieldsOf: 'a batch',
      handle: (ctx) => enqueueBatch(ctx),
    }),
    route({ method: 'GET', path: '/v1/jobs/:id', summary: 'one job', params: id, handle: (ctx) => getJob(ctx) }),
    route({
      method: 'POST',
      path: '/v1/jobs/:id/cancel',
      summary: 'cancel a pending or running job (409 when it already finished)',
      params: id,
      body: z.strictObject({
        by: optional(z.string({ error: byError }).trim().min(1, { error: byError }).max(100, { error: byError })).meta({
          description: 'who cancels: a person or a system',
        }),
      }),
      maxBodyBytes: 4096,
      fieldsOf: 'a cancel request',
      handle: (ctx) => cancelJob(ctx),
    }),
    route({
      method: 'GET',
      path: '/v1/job-types',
      summary: 'the job types this build knows, with their payload fields',
      handle: async () => ({ status: 200, body: { jobTypes: jobTypes() } }),
    }),
    route({
      method: 'GET',
      path: '/v1/stats',
      summary: 'jobs by state',
      handle: async () => ({ status: 200, body: { jobs: await client.store.countByState() } }),
    }),
    route({
      method: 'GET',
      path: '/v1/openapi.json',
      summary: 'this API as an OpenAPI 3.1 document, built from the route tables and their schemas',
      handle: async () => ({ status: 200, body: opts.openApi() }),
    }),
  ];
  const jobTable: RouteTable = {
    routes: jobRoutes,
    notFound: (method, path) =>
      new HttpError(
        404,
        'not_found',
        `no route ${method} ${path.slice(0, 200)}; see GET /v1/openapi.json, /v1/job-types, /v1/jobs, /v1/jobs/{id}, POST /v1/jobs, /v1/jobs/batch, /v1/jobs/{id}/cancel`,
      ),
  };
  return jobTable;

  async function readyz(ctx: RouteContext): Promise<Reply> {
    let timer: NodeJS.Timeout | undefined;
    try {
      const pending = await Promise.race([
        pendingMigrations(opts.pool, opts.migrationsDir),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`readiness checks took longer than ${readyTimeoutMs} ms`)), readyTimeoutMs);
        }),
      ]);
      if (pending.length > 0) {
        return { status: 503, body: { status: 'unavailable', reason: `migrations pending: ${pending.join(', ')} (run \`jobs migrate\`)` } };
      }
      return { status: 200, body: { status: 'ready' } };
    } catch (err) {
      // The details (host, port, driver message) go to the log; the open endpoint says only what failed.
      log.warn({ err, requestId: ctx.requestId }, 'readiness check failed: database unreachable');
      return {
        status: 503,
        body: { status: 'unavailable', reason: `database unreachable (request id ${ctx.requestId}; see the API's log)` },
      };
    } finally {
      clearTimeout(timer);
    }
  }

  function jobTypes() {
    return registry.types().map((type) => describeJobType(registry.get(type)!));
  }

  async function enqueue(ctx: RouteContext<unknown, EnqueueRequest>): Promise<Reply> {
    const [r] = await client.insertNow([client.newJob(ctx.body)]);
    const { job, duplicate, payloadDiffers } = r!;
    return {
      status: duplicate ? 200 : 201,
      body: jobView(job, { duplicate, ...(payloadDiffers ? { payloadDiffers } : {}) }),
      headers: { location: `/v1/jobs/${job.id}` },
    };
  }

  /** One transaction for all (JobClient.insertNow): a failure leaves none of them. */
  async function enqueueBatch(ctx: RouteContext<unknown, { jobs: EnqueueRequest[] }>): Promise<Reply> {
    const results = await client.insertNow(ctx.body.jobs.map((r) => client.newJob(r)));
    return {
      status: results.every((r) => r.duplicate) ? 200 : 201,
      body: {
        jobs: results.map((r) =>
          jobView(r.job, { duplicate: r.duplicate, ...(r.payloadDiffers ? { payloadDiffers: true as const } : {}) }),
        ),
      },
    };
  }

  async function getJob(ctx: RouteContext): Promise<Reply> {
    const id = ctx.params.id!;
    const job = await client.store.get(id);
    if (!job) throw notFound(id);
    return { status: 200, body: jobView(job) };
  }

  async function listJobs(ctx: RouteContext<z.output<typeof listQuery>>): Promise<Reply> {
    const { state, type, lane, cursor } = ctx.query;
    const limit = ctx.query.limit ?? DEFAULT_PAGE_SIZE;
    const after = cursor !== undefined && cursor !== '' ? decodeCursor(cursor) : undefined;
    // One row more than asked tells whether there is a next page, without an empty last page.
    const rows = await client.store.list({
      limit: limit + 1,
      ...(state !== undefined ? { state: state as JobState } : {}),
      ...(type !== undefined ? { type } : {}),
      ...(lane !== undefined ? { lane } : {}),
      ...(after ? { after } : {}),
    });
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    return {
      status: 200,
      body: { jobs: page.map((j) => jobView(j)), nextCursor: rows.length > limit && last ? encodeCursor(last) : null },
    };
  }

  async function cancelJob(ctx: RouteContext<unknown, { by?: string | undefined }>): Promise<Reply> {
    const id = ctx.params.id!;
    const by = ctx.body.by;
    // Who asked, as far as the API can tell: a shared token names no person, so record the
    // caller's address beside the name they give.
    const cancelledBy = by ? `${by} (api, ${callerAddress(ctx.req)})` : `api, ${callerAddress(ctx.req)}`;
    const r = await client.cancel(id, cancelledBy);
    if (!r) throw notFound(id);
    if (r.cancelled || r.job.state === 'cancelled') {
      return { status: 200, body: { ...jobView(r.job), cancelled: r.cancelled } };
    }
    return {
      status: 409,
      body: {
        error: {
          code: 'job_finished',
          message: `job ${id} already ${r.job.state} at ${r.job.finishedAt?.toISOString() ?? 'an unknown time'}; a finished job cannot be cancelled`,
        },
        job: jobView(r.job),
      },
    };
  }
}

function notFound(id: string): HttpError {
  return new HttpError(404, 'job_not_found', `job ${id} does not exist`, 'id');
}
