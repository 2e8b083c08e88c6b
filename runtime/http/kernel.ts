// The HTTP layer's kernel, used by the job routes (job-routes.ts), the on-call routes
// (oncall-routes.ts) and the live view's routes: the route table (path patterns with :params,
// a method table, 405 with Allow, HEAD answered as GET), the parsing of path parameters, query
// and body against each route's zod schemas (a 4xx naming the field; openapi.ts documents the
// same tables, fields.ts has the field schemas with their messages), the error a client reads,
// the job as the API shows it, the body reader with its limits, the caller's address, and the
// mapping of what a handler threw to a status (a database outage is a 503 with Retry-After, bad
// input a 4xx naming the field, anything else a 500 with only a request id). Plain node:http
// and zod, no framework: the API image stays a small bundle.

import type http from 'node:http';
import * as z from 'zod';
import { issueField, issueStatus } from '../domain/issues.ts';
import type { Job, JobState } from '../domain/job.ts';

// The field schemas (fields.ts), here too: a route file imports its kernel from one place.
export { by, flag, flagParam, isoTime, jobId, laneFilter, listLimit, optional, text, wholeNumber, wholeNumberParam } from './fields.ts';

/** Deepest nesting accepted in a request body: PostgreSQL's jsonb refuses very deep documents with an error we would otherwise answer as a 500. */
export const MAX_JSON_DEPTH = 64;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** A 4xx (or 503) with the body a client reads. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field?: string,
    readonly headers: Record<string, string> = {},
    /** More of the error's body (the job ids of an enqueue whose outcome is unknown). */
    readonly detail: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

/** The job as the API shows it. */
export interface JobView {
  id: string;
  type: string;
  state: JobState;
  attempt: number;
  maxAttempts: number;
  payload: unknown;
  progress: Job['progress'];
  result: unknown;
  lastError: { name: string; message: string; retryable: boolean } | null; // the last failure, without its stack (the row and the logs have it)
  idempotencyKey: string | null;
  runAfter: string;
  cancelledBy: string | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  lane: Job['lane']; // its priority lane (urgent or bulk)
  /** Its key and limit (null without a key); since when it has waited for them (null: not waiting); the job that enqueued it. */
  concurrencyKey: string | null;
  concurrencyLimit: number | null;
  blockedSince: string | null;
  parentId: string | null;
  /** An enqueue's answer: the key named this job already; and, on a duplicate, the request's payload is not this job's (the key names other work). */
  duplicate?: boolean;
  payloadDiffers?: true;
}

export function jobView(job: Job, extra: Pick<JobView, 'duplicate' | 'payloadDiffers'> = {}): JobView {
  return {
    id: job.id,
    type: job.type,
    state: job.state,
    attempt: job.attempt,
    maxAttempts: job.maxAttempts,
    payload: job.payload,
    progress: job.progress,
    result: job.result,
    lastError: job.lastError ? { name: job.lastError.name, message: job.lastError.message, retryable: job.lastError.retryable } : null,
    idempotencyKey: job.idempotencyKey,
    runAfter: job.runAfter.toISOString(),
    cancelledBy: job.cancelledBy,
    createdAt: job.createdAt.toISOString(),
    startedAt: job.startedAt?.toISOString() ?? null,
    finishedAt: job.finishedAt?.toISOString() ?? null,
    lane: job.lane,
    concurrencyKey: job.concurrencyKey,
    concurrencyLimit: job.concurrencyLimit,
    blockedSince: job.blockedSince?.toISOString() ?? null,
    parentId: job.parentId,
    ...extra,
  };
}

// --- Paging cursor ----------------------------------------------------------------------------

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The client as the load balancer saw it (first X-Forwarded-For hop), else the socket's peer. */
export function callerAddress(req: http.IncomingMessage): string {
  const fwd = req.headers['x-forwarded-for'];
  const first = (Array.isArray(fwd) ? fwd[0] : fwd)?.split(',')[0]?.trim();
  const addr = first && /^[0-9a-fA-F.:]{2,45}$/.test(first) ? first : (req.socket.remoteAddress ?? 'unknown');
  return addr.replace(/^::ffff:/, '');
}

export function send(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(text)),
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
  });
  res.end(text);
}

/**
 * Read and parse a JSON body of at most `cap` bytes. Refuses a larger one as soon as it is known
 * (declared length or bytes so far), without buffering the rest.
 */
export async function readJson(req: http.IncomingMessage, cap: number, opts: { required: boolean; limitHint?: string }): Promise<unknown> {
  const declared = req.headers['content-length'] !== undefined ? Number(req.headers['content-length']) : undefined;
  const hasBody = (declared !== undefined && declared > 0) || req.headers['transfer-encoding'] !== undefined;
  if (!hasBody) {
    if (opts.required) throw new HttpError(400, 'invalid_body', 'body: is required: a JSON object', 'body');
    return undefined;
  }
  const ctype = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (ctype !== 'application/json' && !/^application\/[a-z0-9.+-]+\+json$/.test(ctype)) {
    throw new HttpError(
      415,
      'unsupported_media_type',
      `Content-Type: must be application/json (got ${JSON.stringify(ctype.slice(0, 80) || 'none')})`,
      'Content-Type',
    );
  }
  const tooLarge = () =>
    new HttpError(413, 'payload_too_large', `body: is larger than ${cap} bytes${opts.limitHint ? `; ${opts.limitHint}` : ''}`, 'body');
  if (declared !== undefined && declared > cap) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  await new Promise<void>((resolve, reject) => {
    const onData = (c: Buffer) => {
      size += c.length;
      if (size > cap) {
        cleanup();
        req.pause();
        reject(tooLarge());
        return;
      }
      chunks.push(c);
    };
    const onEnd = () => {
      cleanup();
      resolve();
    };
    const onError = (err: Error) => {
      cleanup();
      reject(new HttpError(400, 'invalid_body', `body: could not be read (${err.message})`, 'body'));
    };
    const onClose = () => {
      if (!req.complete) onError(new Error('the client closed the connection'));
    };
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('close', onClose);
  });
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(Buffer.concat(chunks, size));
  } catch {
    throw new HttpError(400, 'invalid_body', 'body: is not valid UTF-8', 'body');
  }
  if (text.trim() === '') {
    if (opts.required) throw new HttpError(400, 'invalid_body', 'body: is required: a JSON object', 'body');
    return undefined;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new HttpError(400, 'malformed_json', `body: is not valid JSON (${(err as Error).message.slice(0, 200)})`, 'body');
  }
  checkStorable(value, 'body', 0);
  return value;
}

/**
 * Refuse what PostgreSQL would refuse with an error we could only answer as a 500: the NUL
 * character (not allowed in text or jsonb), unpaired UTF-16 surrogates (invalid in jsonb), and
 * nesting deeper than MAX_JSON_DEPTH.
 */
function checkStorable(v: unknown, path: string, depth: number): void {
  if (typeof v === 'string') {
    if (v.includes('\u0000'))
      throw new HttpError(400, 'invalid_field', `${path}: contains the NUL character (\\u0000), which cannot be stored`, path);
    if (LONE_SURROGATE.test(v))
      throw new HttpError(400, 'invalid_field', `${path}: contains an unpaired UTF-16 surrogate, which cannot be stored`, path);
    return;
  }
  if (typeof v !== 'object' || v === null) return;
  if (depth >= MAX_JSON_DEPTH) throw new HttpError(400, 'invalid_field', `${path}: nests deeper than ${MAX_JSON_DEPTH} levels`, path);
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) checkStorable(v[i], `${path}[${i}]`, depth + 1);
    return;
  }
  for (const [k, x] of Object.entries(v)) {
    const child = path === 'body' ? k.slice(0, 60) : `${path}.${k.slice(0, 60)}`;
    checkStorable(k, child, depth + 1);
    checkStorable(x, child, depth + 1);
  }
}

// --- Routes -----------------------------------------------------------------------------------

export interface Reply {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

export type Method = 'GET' | 'POST';
type Output<S> = S extends z.ZodType ? z.output<S> : undefined;
/** A body schema: an object of fields, or one whose output a transform then checks as a whole (the enqueue request). */
export type BodySchema = z.ZodObject | z.ZodPipe<z.ZodObject, z.ZodType>;
/** The object of fields of a body schema. */
export const fieldsOfBody = (s: BodySchema): z.ZodObject => (s instanceof z.ZodPipe ? s.in : s);

export interface RouteContext<Q = unknown, B = unknown> {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  requestId: string;
  path: string;
  /** The path's :params, each checked by its schema (a job id is lower-cased). */
  params: Record<string, string>;
  /** The query, checked by the route's schema: an unknown or repeated parameter is a 400 naming it. */
  query: Q;
  /** The body, checked by the route's schema; an absent optional body reads as `{}`. */
  body: B;
}

export interface Route<
  Q extends z.ZodObject | undefined = z.ZodObject | undefined,
  B extends BodySchema | undefined = BodySchema | undefined,
> {
  method: Method;
  /** `/v1/jobs/:id`: a `:name` segment matches one non-empty segment, checked by `params[name]`. */
  path: string;
  summary: string;
  params?: Record<string, z.ZodType<string, string>>;
  query?: Q;
  body?: B;
  /** Refuse a request without a body (else an absent body reads as `{}`). */
  bodyRequired?: boolean;
  /** Largest body read (default 64 KiB), and what the 413 adds as advice. */
  maxBodyBytes?: number;
  limitHint?: string;
  /** What "is not a field of …" names: default "this request". */
  fieldsOf?: string;
  handle(ctx: RouteContext<Output<Q>, Output<B>>): Promise<Reply>;
}

/** A route with its context typed from its schemas. */
export function route<Q extends z.ZodObject | undefined = undefined, B extends BodySchema | undefined = undefined>(r: Route<Q, B>): Route {
  return r as unknown as Route;
}

/** The routes under some paths, with the 404 a path under them that no route takes gets. */
export interface RouteTable {
  routes: Route[];
  notFound(method: string, path: string): HttpError;
}

/** Answer a request from `table`: match, 405 with Allow, then parameters, query and body, then the handler. */
export async function dispatch(
  table: RouteTable,
  c: { req: http.IncomingMessage; res: http.ServerResponse; requestId: string; method: string; path: string; query: URLSearchParams },
): Promise<Reply> {
  const segments = c.path.split('/');
  let matched: { routes: Route[]; params: Record<string, string> } | null = null;
  for (const r of table.routes) {
    const params = matchPath(r.path, segments);
    if (!params) continue;
    // The first path that matches owns the request, with every method declared for it.
    if (!matched) matched = { routes: [], params };
    else if (r.path !== matched.routes[0]!.path) continue;
    matched.routes.push(r);
  }
  if (!matched) throw table.notFound(c.method, c.path);
  const r =
    matched.routes.find((x) => x.method === c.method) ?? (c.method === 'HEAD' ? matched.routes.find((x) => x.method === 'GET') : undefined);
  if (!r) {
    const allow = matched.routes.flatMap((x) => (x.method === 'GET' ? ['GET', 'HEAD'] : [x.method])).join(', ');
    throw new HttpError(405, 'method_not_allowed', `${c.method} is not allowed on ${c.path}; allowed: ${allow}`, undefined, { allow });
  }
  const params: Record<string, string> = {};
  for (const [name, raw] of Object.entries(matched.params)) {
    const schema = r.params?.[name];
    const parsed = schema ? schema.safeParse(raw) : { success: true as const, data: raw };
    if (!parsed.success) throw new HttpError(400, `invalid_${name}`, `${name}: ${firstIssue(parsed.error).message}`, name);
    params[name] = parsed.data;
  }
  const query = r.query ? parseQuery(r.query, c.query) : undefined;
  const body = r.body ? await parseBody(r, c.req) : undefined;
  return r.handle({ req: c.req, res: c.res, requestId: c.requestId, path: c.path, params, query: query as never, body: body as never });
}

function matchPath(pattern: string, segments: string[]): Record<string, string> | null {
  const want = pattern.split('/');
  if (want.length !== segments.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < want.length; i++) {
    const p = want[i]!;
    const s = segments[i]!;
    if (p.startsWith(':') && s !== '') params[p.slice(1)] = s;
    else if (p !== s) return null;
  }
  return params;
}

function parseQuery(schema: z.ZodObject, q: URLSearchParams): unknown {
  const allowed = Object.keys(schema.shape);
  const raw: Record<string, string> = {};
  for (const k of new Set(q.keys())) {
    if (!allowed.includes(k)) {
      throw new HttpError(400, 'invalid_query', `${k}: is not a parameter of this list (allowed: ${allowed.join(', ') || 'none'})`, k);
    }
    if (q.getAll(k).length > 1) throw new HttpError(400, 'invalid_query', `${k}: given more than once`, k);
    raw[k] = q.get(k)!;
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw issueError(parsed.error, 'invalid_query');
  return parsed.data;
}

async function parseBody(r: Route, req: http.IncomingMessage): Promise<unknown> {
  const schema = fieldsOfBody(r.body!);
  const fields = Object.keys(schema.shape);
  const b = await readJson(req, r.maxBodyBytes ?? 64 * 1024, {
    required: r.bodyRequired ?? false,
    ...(r.limitHint ? { limitHint: r.limitHint } : {}),
  });
  if (b !== undefined && !isPlainObject(b)) {
    const shape = fields.map((k) => (schema.shape[k]!.safeParse(undefined).success ? `${k}?` : k)).join(', ');
    throw new HttpError(400, 'invalid_body', `body: must be a JSON object { ${shape} }${r.bodyRequired ? '' : ' or empty'}`, 'body');
  }
  const o = b ?? {};
  for (const k of Object.keys(o)) {
    // A misspelt optional field (idempotency_key) would otherwise be dropped silently.
    if (!fields.includes(k))
      throw new HttpError(
        400,
        'invalid_field',
        `${k}: is not a field of ${r.fieldsOf ?? 'this request'} (allowed: ${fields.join(', ')})`,
        k,
      );
  }
  const parsed = r.body!.safeParse(o);
  if (!parsed.success) throw issueError(parsed.error, 'invalid_field');
  return parsed.data;
}

/** The issue a person should read first: an unknown key, else the first field in declaration order. */
export function firstIssue(error: z.ZodError): z.core.$ZodIssue {
  return error.issues.find((i) => i.code === 'unrecognized_keys') ?? error.issues[0]!;
}

/** A schema failure as a 400 (or the status its rule means) naming the field (the schemas' messages say the rule). */
function issueError(error: z.ZodError, code: string): HttpError {
  const issue = firstIssue(error);
  // An unknown field is named itself (`jobs.1.idempotency_key`), not the object that holds it.
  const field = issueField(issue.code === 'unrecognized_keys' ? { path: [...issue.path, issue.keys[0]!] } : issue);
  const status = issueStatus(issue);
  return new HttpError(status, status === 413 ? 'payload_too_large' : code, `${field}: ${issue.message}`, field);
}
