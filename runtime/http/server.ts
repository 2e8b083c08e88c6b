// The HTTP JSON API of the job platform (`jobs api`): enqueue, read, list and cancel jobs, for
// the ERP and for people. Plain node:http and the HTTP kernel (kernel.ts: routing, parameter,
// query and body schemas, errors), no framework: the API image stays a small bundle. The job
// routes, the on-call routes and the live view's are three route tables the kernel answers;
// GET /v1/openapi.json is the OpenAPI document built from those same tables and schemas.
//
// Every request is checked before anything reaches the database: a malformed body, an unknown
// field, a bad id or query parameter is a 4xx that names the field and the reason, in the shape
// `{ error: { code, message, field? } }`. A 500 is only for our own faults: it carries the
// request id and is logged, and its body says nothing about the internals. Every response has
// an `x-request-id`, and every request is one structured log line (method, path, status, ms).
//
// This file is the server: authorization, the request log, errors, the OpenAPI document and the
// connection's handling; the job routes are in job-routes.ts.

import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type pg from 'pg';
import { ENV } from '../config/env.ts';
import type { JobRegistry } from '../handlers/registry.ts';
import type { Logger } from '../observability/log.ts';
import { MAX_PAYLOAD_BYTES, type JobClient } from '../store/client.ts';
import { jobRouteTable, MAX_BATCH_BODY_BYTES } from './job-routes.ts';
import { dispatch, HttpError, send, type Reply, type Route } from './kernel.ts';
import { toHttpError } from './http-errors.ts';
import type { LiveRoutes } from './live-routes.ts';
import type { OpsRoutes } from './oncall-routes.ts';
import { openApiDocument } from './openapi.ts';

export { callerAddress, HttpError, isPlainObject, jobView, MAX_JSON_DEPTH, readJson, type JobView } from './kernel.ts';

export interface ApiServerOptions {
  /** The pool /readyz checks (reachability and migrations). */
  pool: pg.Pool;
  client: JobClient;
  registry: JobRegistry;
  log: Logger;
  /** When set (non-empty), every /v1 route (and /live/*) requires `Authorization: Bearer <apiToken>` (or the operator token). */
  apiToken?: string;
  /**
   * When set (non-empty), the on-call routes (`ops`) require `Authorization: Bearer <operatorToken>`:
   * the API token gets a 403 there. Accepted on every other route too, so on-call needs one token.
   * Unset: the on-call routes take the API token, as the job routes do.
   */
  operatorToken?: string;
  /** Largest request body read. Default: twice the payload limit (room for the envelope and whitespace). */
  maxBodyBytes?: number;
  /** /readyz answers 503 when its checks take longer than this. Default 3000. */
  readyTimeoutMs?: number;
  /** Where /readyz looks for the migrations the schema must have. Default: the runtime's own. */
  migrationsDir?: string;
  /** The live view (GET / and /live/*, runtime/http/live-routes.ts); absent: those paths are 404. */
  live?: LiveRoutes;
  /** The on-call routes under /v1 (dead jobs, DLQ, poison messages, stuck jobs; runtime/http/oncall-routes.ts); absent: those paths are 404. */
  ops?: OpsRoutes;
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

// --- Server -----------------------------------------------------------------------------------

const servedRoutes = new WeakMap<http.Server, Route[]>();

/** Every route `server` answers under /v1 and the health checks (the job and on-call tables): what its OpenAPI document must list. */
export function routesOf(server: http.Server): Route[] {
  return servedRoutes.get(server) ?? [];
}

export function createApiServer(opts: ApiServerOptions): http.Server {
  const { client, registry, log } = opts;
  const maxBodyBytes = opts.maxBodyBytes ?? 2 * MAX_PAYLOAD_BYTES;
  const readyTimeoutMs = opts.readyTimeoutMs ?? 3000;
  const clientDigest = opts.apiToken ? sha256(opts.apiToken) : null;
  const operatorDigest = opts.operatorToken ? sha256(opts.operatorToken) : null;

  let document: Record<string, unknown> | undefined;
  const jobTable = jobRouteTable({
    pool: opts.pool,
    client,
    registry,
    log,
    maxBodyBytes,
    readyTimeoutMs,
    migrationsDir: opts.migrationsDir,
    openApi: () => openApi(),
  });
  const jobRoutes = jobTable.routes;
  /** Built once, on first request: the tables do not change while the server runs. */
  function openApi(): Record<string, unknown> {
    document ??= openApiDocument(
      {
        title: 'ERP job platform API',
        version: '1',
        description: 'Enqueue, read, list and cancel jobs; the on-call routes need the operator token when one is set.',
      },
      [
        { routes: jobRoutes.filter((r) => !r.path.startsWith('/v1/')), security: 'none' },
        { routes: jobRoutes.filter((r) => r.path.startsWith('/v1/')), security: 'client' },
        ...(opts.ops ? [{ routes: opts.ops.table.routes, security: 'operator' as const }] : []),
      ],
      // Each job type's payload, from its schema: what `payload` must be for that `type`.
      Object.fromEntries(registry.types().flatMap((t) => (registry.get(t)!.schema ? [[t, registry.get(t)!.schema!]] : []))),
    );
    return document;
  }

  /**
   * Check the bearer token for a route of `scope`. The operator token passes everywhere; the API
   * (ERP client) token passes on client routes, and on operator routes only while no operator
   * token is configured. With no token for the scope configured, the route is open, whatever the
   * Authorization header says (an empty `Bearer ` included: the runbook's commands send one locally).
   */
  function authorize(req: http.IncomingMessage, scope: 'client' | 'operator'): void {
    const operatorOnly = scope === 'operator' && operatorDigest !== null;
    if (!operatorOnly && clientDigest === null) return;
    const wanted = operatorOnly ? `Bearer <${ENV.apiOperatorToken}>, the on-call operator token` : `Bearer <${ENV.apiToken}>`;
    const header = req.headers.authorization;
    const m = header ? /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header) : null;
    if (!m) {
      throw new HttpError(401, 'unauthorized', `Authorization: a bearer token is required (Authorization: ${wanted})`, 'Authorization', {
        'www-authenticate': 'Bearer realm="jobs"',
      });
    }
    // Compare digests: equal length always, and constant time whatever the token's length. Both
    // comparisons always run, so the time does not tell which token was presented.
    const presented = sha256(m[1]!);
    const isOperator = operatorDigest !== null && timingSafeEqual(presented, operatorDigest);
    const isClient = clientDigest !== null && timingSafeEqual(presented, clientDigest);
    if (isOperator || (isClient && !operatorOnly)) return;
    if (isClient) {
      throw new HttpError(
        403,
        'forbidden',
        `Authorization: the on-call routes need the operator token (Authorization: Bearer <${ENV.apiOperatorToken}>); the ERP client token (${ENV.apiToken}) may only use the job routes`,
        'Authorization',
        { 'www-authenticate': 'Bearer realm="jobs", error="insufficient_scope"' },
      );
    }
    throw new HttpError(401, 'unauthorized', 'Authorization: the bearer token is not valid', 'Authorization', {
      'www-authenticate': 'Bearer realm="jobs", error="invalid_token"',
    });
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse, requestId: string): Promise<Reply> {
    const rawUrl = req.url ?? '/';
    const q = rawUrl.indexOf('?');
    // Parsed by hand: new URL() would read `//host/x` as a host, and paths here need no decoding.
    const path = q === -1 ? rawUrl : rawUrl.slice(0, q);
    const query = new URLSearchParams(q === -1 ? '' : rawUrl.slice(q + 1));
    const method = req.method ?? 'GET';
    // --- Live view (issue 5): the page at / (static, no data) and its data under /live/*, which
    // needs the same token as /v1. Routes and reasoning: runtime/http/live-routes.ts.
    if (opts.live && (path === '/' || path === '/live' || path.startsWith('/live/'))) {
      if (path !== '/') authorize(req, 'client');
      return dispatch(opts.live.table, { req, res, requestId, method, path, query });
    }
    // --- On-call (issue 7): dead jobs, the DLQ, poison messages, stuck jobs, under /v1 behind the
    // operator token when one is configured (they redrive, discard and reveal raw message bodies;
    // an ERP client has no business there). Routes and reasoning: runtime/http/oncall-routes.ts.
    if (opts.ops?.owns(path)) {
      authorize(req, 'operator');
      return dispatch(opts.ops.table, { req, res, requestId, method, path, query });
    }
    if (path === '/v1' || path.startsWith('/v1/')) authorize(req, 'client');
    return dispatch(jobTable, { req, res, requestId, method, path, query });
  }

  function onRequest(req: http.IncomingMessage, res: http.ServerResponse): void {
    const started = process.hrtime.bigint();
    const incoming = req.headers['x-request-id'];
    const requestId = typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
    res.setHeader('x-request-id', requestId);
    const path = (req.url ?? '/').split('?')[0]!.slice(0, 300);
    res.once('close', () => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      log.info(
        {
          requestId,
          method: req.method,
          path,
          status: res.statusCode,
          ms: Math.round(ms * 10) / 10,
          ...(res.writableFinished ? {} : { aborted: true }),
        },
        'request',
      );
    });
    handle(req, res, requestId)
      .then(
        (reply) => {
          markIfStopping(res);
          send(res, reply.status, reply.body, reply.headers);
        },
        (err: unknown) => {
          markIfStopping(res);
          sendError(req, res, requestId, err);
        },
      )
      .catch((err: unknown) => log.error({ err, requestId }, 'could not send a response'));
  }

  /** Stopping: tell a keep-alive client (the load balancer) to send its next request elsewhere, not race our close. */
  function markIfStopping(res: http.ServerResponse): void {
    if (!server.listening && !res.headersSent) res.setHeader('connection', 'close');
  }

  function sendError(req: http.IncomingMessage, res: http.ServerResponse, requestId: string, err: unknown): void {
    const e = toHttpError(err, requestId);
    if (e.status >= 500) {
      const line = { err, requestId, method: req.method, path: (req.url ?? '/').split('?')[0] };
      // A 503 is the database's outage (a failover), answered with Retry-After; a 500 is our fault.
      if (e.status === 503) log.warn(line, 'database unavailable');
      else log.error(line, 'unexpected error');
    }
    // The body was not read to its end: do not leave the rest in the connection for the next
    // request, but do not reset a client that is still sending either (lingeringClose).
    if (!req.complete) {
      res.setHeader('connection', 'close');
      lingeringClose(req);
    }
    send(
      res,
      e.status,
      {
        error: {
          code: e.code,
          message: e.message,
          ...(e.field ? { field: e.field } : {}),
          ...e.detail,
          ...(e.status >= 500 ? { requestId } : {}),
        },
      },
      e.headers,
    );
  }

  const server = http.createServer({ requestTimeout: 60_000, headersTimeout: 20_000 }, onRequest);
  servedRoutes.set(server, [...jobRoutes, ...(opts.ops?.table.routes ?? [])]);
  // Behind an ALB: keep idle connections open longer than the load balancer's 60 s idle timeout,
  // so the load balancer, not the task, closes them (a task-side close races a new request: 502).
  server.keepAliveTimeout = 65_000;
  // Expect: 100-continue: refuse an oversized upload before the client sends it.
  server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const declared = Number(req.headers['content-length']);
    // The largest body any route takes (a batch's); each route's reader then holds its own limit.
    if (Number.isFinite(declared) && declared > Math.max(maxBodyBytes, MAX_BATCH_BODY_BYTES)) {
      onRequest(req, res);
      return;
    }
    res.writeContinue();
    onRequest(req, res);
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    if (err.code === 'ECONNRESET' || !socket.writable) return void socket.destroy();
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
    const body = JSON.stringify({
      error: { code: 'bad_request', message: `the request is not valid HTTP (${err.code ?? 'parse error'})` },
    });
    socket.end(
      `HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  });
  return server;
}

// --- Helpers ----------------------------------------------------------------------------------

/** What a lingering close reads and discards of a refused body at most, and for how long (nginx: lingering_time). */
export const LINGER_MAX_BYTES = 16 * 1024 * 1024;
export const LINGER_MAX_MS = 5_000;

/**
 * Close the connection of a request whose body we refused before reading it all (a 413, or any
 * 4xx answered early) the way nginx does: answer, close our sending side, and keep reading and
 * discarding what the client still sends until it has sent it all, LINGER_MAX_BYTES or
 * LINGER_MAX_MS, whichever comes first; then close. Closing at once, with the rest of the upload
 * arriving, makes the kernel reset the connection, and a client still writing sees EPIPE or
 * ECONNRESET instead of the answer. Node closes a `connection: close` socket with destroySoon()
 * once the response is written: on this one socket, that closes our side only.
 */
function lingeringClose(req: http.IncomingMessage): void {
  const socket = req.socket;
  let discarded = 0;
  const close = () => {
    clearTimeout(timer);
    // Let the answer leave before the socket goes: destroy() drops what is not yet written.
    if (socket.writableFinished || socket.destroyed) socket.destroy();
    else socket.once('finish', () => socket.destroy()).end();
  };
  const timer = setTimeout(close, LINGER_MAX_MS);
  timer.unref();
  socket.destroySoon = () => {
    if (socket.writable) socket.end();
  };
  socket.once('close', () => clearTimeout(timer));
  socket.once('end', close);
  req.on('data', (c: Buffer) => {
    discarded += c.length;
    if (discarded > LINGER_MAX_BYTES) close();
  });
  req.once('end', close);
  req.resume();
}

function sha256(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}
