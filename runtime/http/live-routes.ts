// The live view's HTTP side, mounted by the API server (server.ts, "Live view" section):
//
//   GET  /                     the page (page.ts): static HTML, no data, no auth
//   GET  /live/state           one snapshot as JSON: jobs by state, leases, progress, workers, queue depths, waiting
//   GET  /live/events?after=N  recent events after sequence N
//   GET  /live/stream          Server-Sent Events: `events` as they arrive, `state` every second
//   GET  /live/faults          local stack only: the worker processes and the faults on offer
//   POST /live/faults/{kind}   local stack only: inject a fault (forwarded to the stack's fault control)
//
// /live/* sits behind the same bearer token as /v1/* (the page sends it from a field). The fault
// routes exist only when the local stack passed JOBS_LIVE_FAULTS_URL; otherwise they are 404,
// as in production. Snapshots are computed once per second for all open streams together, and
// only while one is open; the finished states' counts, which read the whole table, are spaced
// out as it grows (live/counts.ts).

import type http from 'node:http';
import type pg from 'pg';
import type { Logger } from '../observability/log.ts';
import type { JobStore, WaitingGroup } from '../store/job-store.ts';
import type { JobState } from '../domain/job.ts';
import type { FeedEvent, LiveFeed } from '../live/feed.ts';
import * as z from 'zod';
import { HttpError, route, type Reply, type Route, type RouteTable } from './kernel.ts';
import { LIVE_PAGE_HTML } from './live-page.ts';
import type { QueueDepth } from '../live/queue-depth.ts';
import { liveStateCounts } from '../live/counts.ts';
import { onActiveJobs } from '../store/active-jobs.ts';
import { LIVE_SQL } from '../live/sql.ts';
import { type WorkerView, workerViews } from '../live/workers.ts';
import { attemptReading, capWarning, dueReading, errorReading, waitingFor } from '../domain/reading.ts';

export type LiveReply = Reply;

export interface LiveOptions {
  pool: pg.Pool;
  store: JobStore;
  /** The LISTEN feed; null when the event bus is off (JOBS_EVENTS unset). */
  feed: LiveFeed | null;
  queueDepth?: () => Promise<QueueDepth>;
  dlqDepth?: () => Promise<QueueDepth>;
  /** The local stack's fault control; absent in production. */
  faults?: { url: string; token: string };
  leaseSeconds: number;
  heartbeatSeconds: number;
  /** The attempt cap of jobs that set none (JOBS_MAX_ATTEMPTS): the page says what a fault click spends. */
  maxAttempts?: number;
  log: Logger;
  /** Snapshot period for streams. Default 1000 ms. */
  stateIntervalMs?: number;
}

export interface LeaseView {
  id: string;
  type: string;
  owner: string;
  attempt: number;
  maxAttempts: number;
  attemptsUsed: number;
  /** The attempt as the CLI reads it (domain/reading.ts): "6 (1 of 3 used, 5 released)". */
  attemptText: string;
  /** Set on the job's final attempt: "attempt 3 of 3 — next failure dead-letters". */
  capWarning: string | null;
  /** Lease left at the snapshot, by the database's clock (negative: expired that long ago). */
  leaseLeftMs: number;
  progress: { fraction: number; message?: string } | null;
  startedAt: string | null;
}

export interface LiveSnapshot {
  at: string;
  jobs: Record<JobState, number>;
  leases: LeaseView[];
  recent: {
    id: string;
    type: string;
    state: JobState;
    attempt: number;
    maxAttempts: number;
    attemptsUsed: number;
    /** The attempt as the CLI reads it (domain/reading.ts). */
    attemptText: string;
    capWarning: string | null;
    /** Why the job is dead: its last error; null on any job that did not end dead. */
    error: string | null;
    /** An error from an earlier attempt on a job that did not end dead ("an earlier attempt failed: …"): history, not its state. */
    earlierError: string | null;
    cancelledBy: string | null;
    /** A blocked job: what it waits for ("for key ledger:company-7 since …"). */
    waiting: string | null;
    /** A pending job due later: when, and for one due beyond 15 min that its SQS message is sent only then (domain/reading.ts). */
    due: string | null;
    createdAt: string;
    finishedAt: string | null;
  }[];
  workers: WorkerView[];
  /** Blocked jobs by what they wait for (a key, a type's slots), longest waiting first. */
  waiting: WaitingGroup[];
  queue: QueueDepth | null;
  dlq: QueueDepth | null;
  events: { enabled: boolean; connected: boolean; lastSeq: number; epoch: string | null };
  faults: { enabled: boolean };
  timings: { leaseSeconds: number; heartbeatSeconds: number; maxAttempts: number | null };
}

export interface LiveRoutes {
  /** The routes of `/` and `/live/*` (the kernel answers them); a stream writes its own response and resolves when it closes. */
  table: RouteTable;
  snapshot(): Promise<LiveSnapshot>;
  /** End the open streams (the API is stopping). */
  close(): void;
}

export function createLiveRoutes(o: LiveOptions): LiveRoutes {
  const streams = new Set<http.ServerResponse>();
  let ticker: NodeJS.Timeout | null = null;
  let unsubscribeFeed: (() => void) | null = null;

  const countJobs = liveStateCounts(o.store);

  async function snapshot(): Promise<LiveSnapshot> {
    const [jobs, leaseRows, recent, waiting, queue, dlq] = await Promise.all([
      countJobs(),
      onActiveJobs(o.pool, (c) => c.query(LIVE_SQL.leases, [200])),
      o.store.list({ limit: 12 }),
      o.store.waiting(10),
      o.queueDepth ? o.queueDepth() : Promise.resolve(null),
      o.dlqDepth ? o.dlqDepth() : Promise.resolve(null),
    ]);
    const leases: LeaseView[] = leaseRows.rows.map((r) => ({
      id: r.id,
      type: r.type,
      owner: r.lease_owner,
      attempt: r.attempt,
      maxAttempts: r.max_attempts,
      attemptsUsed: r.attempt - r.releases,
      attemptText: attemptReading({ attempt: r.attempt, releases: r.releases, maxAttempts: r.max_attempts }),
      capWarning: capWarning({ state: 'running', attempt: r.attempt, releases: r.releases, maxAttempts: r.max_attempts }),
      leaseLeftMs: r.lease_left_ms,
      progress: r.progress ?? null,
      startedAt: r.started_at ? (r.started_at as Date).toISOString() : null,
    }));
    const shown = workerViews(o.feed?.workers ?? new Map(), leases);
    return {
      at: new Date().toISOString(),
      jobs,
      leases,
      recent: recent.map((j) => {
        const error = errorReading(j.state, j.lastError);
        return {
          id: j.id,
          type: j.type,
          state: j.state,
          attempt: j.attempt,
          maxAttempts: j.maxAttempts,
          attemptsUsed: j.attempt - j.releases,
          attemptText: attemptReading(j),
          capWarning: capWarning(j),
          error: error?.kind === 'state' ? error.text.slice(0, 300) : null,
          earlierError: error?.kind === 'history' ? error.text.slice(0, 300) : null,
          cancelledBy: j.cancelledBy,
          waiting: j.blockedSince && j.state === 'pending' ? waitingFor(j) : null,
          due: dueReading(j),
          createdAt: j.createdAt.toISOString(),
          finishedAt: j.finishedAt?.toISOString() ?? null,
        };
      }),
      workers: shown,
      waiting,
      queue,
      dlq,
      events: {
        enabled: o.feed !== null,
        connected: o.feed?.connected ?? false,
        lastSeq: o.feed?.lastSeq ?? 0,
        epoch: o.feed?.epoch ?? null,
      },
      faults: { enabled: Boolean(o.faults) },
      timings: { leaseSeconds: o.leaseSeconds, heartbeatSeconds: o.heartbeatSeconds, maxAttempts: o.maxAttempts ?? null },
    };
  }

  function write(res: http.ServerResponse, event: string, data: unknown, id?: number): void {
    if (res.destroyed || res.writableEnded) return;
    res.write(`${id !== undefined ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  function startTicker(): void {
    if (ticker) return;
    let busy = false;
    const tick = async () => {
      if (busy || streams.size === 0) return;
      busy = true;
      try {
        const s = await snapshot();
        for (const res of streams) write(res, 'state', s);
      } catch (err) {
        o.log.warn({ err }, 'live view: snapshot failed');
        for (const res of streams) write(res, 'state-error', { message: 'the job database is unavailable; retrying' });
      } finally {
        busy = false;
      }
    };
    ticker = setInterval(() => void tick(), o.stateIntervalMs ?? 1000);
    void tick();
    unsubscribeFeed =
      o.feed?.subscribe((events) => {
        for (const res of streams) write(res, 'events', events, events.at(-1)?.seq);
      }) ?? null;
  }

  function stopTickerIfIdle(): void {
    if (streams.size > 0) return;
    if (ticker) clearInterval(ticker);
    ticker = null;
    unsubscribeFeed?.();
    unsubscribeFeed = null;
  }

  async function stream(req: http.IncomingMessage, res: http.ServerResponse, after: number, epoch: string | null): Promise<LiveReply> {
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      'x-accel-buffering': 'no',
      'x-content-type-options': 'nosniff',
    });
    res.write('retry: 2000\n\n');
    // A sequence number from another feed (the API restarted) means nothing here: send the backlog.
    const from = epoch === (o.feed?.epoch ?? null) ? after : 0;
    write(res, 'hello', { epoch: o.feed?.epoch ?? null });
    const backlog: FeedEvent[] = o.feed?.since(from, 200) ?? [];
    if (backlog.length > 0) write(res, 'events', backlog, backlog.at(-1)!.seq);
    streams.add(res);
    startTicker();
    // A comment every 15 s keeps proxies and load balancers (60 s idle) from closing the stream.
    const keepAlive = setInterval(() => !res.destroyed && res.write(': keep-alive\n\n'), 15_000);
    await new Promise<void>((resolve) => {
      const done = () => resolve();
      req.once('close', done);
      res.once('close', done);
    });
    clearInterval(keepAlive);
    streams.delete(res);
    stopTickerIfIdle();
    return { status: 200, body: null };
  }

  async function forwardFault(method: 'GET' | 'POST', sub: string, req: http.IncomingMessage): Promise<LiveReply> {
    if (!o.faults) {
      return {
        status: 404,
        body: { error: { code: 'not_found', message: 'fault injection exists only in the local stack (`jobs local`); this API has none' } },
      };
    }
    let body: string | undefined;
    if (method === 'POST') {
      body = await new Promise<string>((resolve, reject) => {
        let raw = '';
        req.setEncoding('utf8');
        req.on('data', (c: string) => {
          raw += c;
          if (raw.length > 10_000) reject(new Error('body too large'));
        });
        req.on('end', () => resolve(raw));
        req.on('error', reject);
      }).catch(() => '');
    }
    try {
      const r = await fetch(`${o.faults.url}/faults${sub}`, {
        method,
        headers: { authorization: `Bearer ${o.faults.token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { body } : {}),
        signal: AbortSignal.timeout(40_000),
      });
      return { status: r.status, body: await r.json() };
    } catch (err) {
      o.log.warn({ err }, 'live view: the local stack fault control did not answer');
      return {
        status: 502,
        body: {
          error: {
            code: 'fault_control_unreachable',
            message: `the local stack's fault control did not answer (${(err as Error).message})`,
          },
        },
      };
    }
  }

  // Numbers the client sends back (a sequence, an epoch) are only hints: a bad one reads as 0.
  const seq = z.string().optional().meta({ description: 'the last event sequence number seen' });
  const routes: Route[] = [
    route({
      method: 'GET',
      path: '/',
      summary: 'the live view page (static, no data)',
      handle: async ({ req, res }) => {
        res.writeHead(200, {
          'content-type': 'text/html; charset=utf-8',
          'content-length': String(Buffer.byteLength(LIVE_PAGE_HTML)),
          'cache-control': 'no-store',
          'x-content-type-options': 'nosniff',
          // Self-contained: inline script and style, data from this origin only.
          'content-security-policy':
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        });
        res.end(req.method === 'HEAD' ? undefined : LIVE_PAGE_HTML);
        return { status: 200, body: null };
      },
    }),
    route({
      method: 'GET',
      path: '/live/state',
      summary: 'a snapshot: jobs by state, leases, workers, queue depths',
      handle: async () => ({ status: 200, body: await snapshot() }),
    }),
    route({
      method: 'GET',
      path: '/live/events',
      summary: 'the event feed after a sequence number',
      query: z.object({ after: seq }),
      handle: async ({ query }) => {
        const after = Number(query.after ?? 0);
        return {
          status: 200,
          body: {
            enabled: o.feed !== null,
            connected: o.feed?.connected ?? false,
            events: o.feed?.since(Number.isFinite(after) ? after : 0) ?? [],
          },
        };
      },
    }),
    route({
      method: 'GET',
      path: '/live/stream',
      summary: 'server-sent events: snapshots every second and the event feed',
      query: z.object({ after: seq, epoch: z.string().optional() }),
      handle: ({ req, res, query }) => {
        const last = Number(req.headers['last-event-id'] ?? query.after ?? 0);
        return stream(req, res, Number.isFinite(last) ? last : 0, query.epoch ?? null);
      },
    }),
    // The local stack's faults: without its fault control they answer 404 (notFound below), as in production.
    ...(o.faults
      ? [
          route({
            method: 'GET',
            path: '/live/faults',
            summary: "the local stack's workers and faults",
            handle: ({ req }) => forwardFault('GET', '', req),
          }),
          route({
            method: 'POST',
            path: '/live/faults/:fault',
            summary: 'inject a fault in the local stack',
            params: { fault: z.string().regex(/^[a-z-]{1,40}$/, { error: 'must be a fault name (lower-case words joined by -)' }) },
            handle: ({ req, params }) => forwardFault('POST', `/${params.fault}`, req),
          }),
        ]
      : []),
  ];
  const table: RouteTable = {
    routes,
    notFound: (method, path) =>
      path === '/live/faults' || path.startsWith('/live/faults/')
        ? new HttpError(404, 'not_found', 'fault injection exists only in the local stack (`jobs local`); this API has none')
        : new HttpError(
            404,
            'not_found',
            `no route ${method} ${path.slice(0, 200)}; the live view is GET /, with GET /live/state, /live/events, /live/stream`,
          ),
  };

  return {
    snapshot,
    table,
    close() {
      for (const res of streams) res.end();
      streams.clear();
      stopTickerIfIdle();
    },
  };
}
