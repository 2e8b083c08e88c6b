// The local stack's fault control: the stack process owns the worker processes, so it runs the
// fault injector (faults.ts) and serves it on 127.0.0.1 behind a random bearer token. The API
// learns the address from JOBS_LIVE_FAULTS_URL / JOBS_LIVE_FAULTS_TOKEN, which only the local
// stack sets, and forwards the page's fault buttons here (runtime/http/live-routes.ts). Without those
// variables, as in production, the API has no fault routes at all.

import { randomBytes, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ChildProcess } from 'node:child_process';
import { JobClient } from '../runtime/store/client.ts';
import type { JobTimings } from '../runtime/config/rules.ts';
import { sqsFromEnv } from '../runtime/config/sqs.ts';
import { createPool } from '../runtime/db/pool.ts';
import { defaultRegistry } from '../runtime/handlers/index.ts';
import { NotifyEventSink } from '../runtime/live/events.ts';
import { FAULTS_TOKEN_ENV, FAULTS_URL_ENV } from '../runtime/http/live.ts';
import { silentLogger } from '../runtime/observability/log.ts';
import { SqsQueue } from '../runtime/queue/sqs.ts';
import { sqsLanes } from '../runtime/queue/lanes.ts';
import { Publisher } from '../runtime/store/outbox.ts';
import type { DbProxy } from './db-proxy.ts';
import { FAULT_KINDS, FaultError, FaultInjector, LocalWorkers } from './faults.ts';

export interface FaultControl {
  injector: FaultInjector;
  workers: LocalWorkers;
  /** What the API process needs to reach this control. */
  apiEnv: Record<string, string>;
  stop(): Promise<void>;
}

export async function startFaultControl(opts: {
  databaseUrl: string;
  env: Record<string, string>;
  timings: JobTimings;
  repoRoot: string;
  spawnWorker: (extraEnv: Record<string, string>) => { id: string; child: ChildProcess };
  dbProxy?: DbProxy;
}): Promise<FaultControl> {
  const queue = new SqsQueue(sqsFromEnv(opts.env));
  const pool = createPool({ url: opts.databaseUrl, max: 4, applicationName: 'jobs-local faults' });
  // Enqueues go to each job's lane's queue; the faults act on the bulk (job) queue.
  const publisher = new Publisher(pool, sqsLanes(sqsFromEnv(opts.env)).queue, silentLogger);
  const client = new JobClient({ pool, registry: defaultRegistry(), publisher, defaultMaxAttempts: opts.timings.maxAttempts });
  const sink = new NotifyEventSink(pool, { flushMs: 50 });
  const workers = new LocalWorkers(opts.spawnWorker);
  const injector = new FaultInjector({
    pool,
    queue,
    client,
    workers,
    leaseSeconds: opts.timings.leaseSeconds,
    env: opts.env,
    repoRoot: opts.repoRoot,
    emit: (e) => sink.push(e),
    ...(opts.dbProxy ? { dbProxy: opts.dbProxy } : {}),
  });

  const token = randomBytes(24).toString('hex');
  const expected = Buffer.from(`Bearer ${token}`);
  const server = http.createServer((req, res) => {
    const reply = (status: number, body: unknown) => {
      const text = JSON.stringify(body);
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': String(Buffer.byteLength(text)) });
      res.end(text);
    };
    const auth = Buffer.from(req.headers.authorization ?? '');
    if (auth.length !== expected.length || !timingSafeEqual(auth, expected))
      return reply(401, { error: { code: 'unauthorized', message: 'fault control: bad token' } });
    const path = (req.url ?? '/').split('?')[0]!;
    if (req.method === 'GET' && path === '/faults')
      return reply(200, { faults: FAULT_KINDS, workers: workers.list(), leaseSeconds: opts.timings.leaseSeconds });
    const m = /^\/faults\/([a-z-]+)$/.exec(path);
    if (req.method !== 'POST' || !m)
      return reply(404, { error: { code: 'not_found', message: `fault control: no route ${req.method} ${path}` } });
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => {
      raw += c;
      if (raw.length > 10_000) req.destroy();
    });
    req.on('end', () => {
      let body: Record<string, unknown> = {};
      try {
        body = raw.trim() ? (JSON.parse(raw) as Record<string, unknown>) : {};
      } catch {
        return reply(400, { error: { code: 'malformed_json', message: 'fault control: body is not JSON' } });
      }
      injector.inject(m[1]!, body).then(
        (result) => reply(200, { fault: m[1], result: serializable(result) }),
        (err: unknown) => {
          const status = err instanceof FaultError ? err.status : 500;
          reply(status, {
            error: { code: status === 404 ? 'not_found' : status === 409 ? 'conflict' : 'fault_failed', message: (err as Error).message },
          });
        },
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;

  return {
    injector,
    workers,
    apiEnv: { [FAULTS_URL_ENV]: `http://127.0.0.1:${port}`, [FAULTS_TOKEN_ENV]: token },
    async stop() {
      workers.resumeAll();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await sink.stop();
      await publisher.drain();
      await pool.end().catch(() => undefined);
    },
  };
}

/** Drop the promises (restarted, resumed) a fault result carries for in-process callers. */
function serializable(v: unknown): unknown {
  if (!v || typeof v !== 'object') return v;
  return Object.fromEntries(Object.entries(v).filter(([, x]) => !(x instanceof Promise)));
}
