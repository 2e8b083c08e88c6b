// A slow SQS must not cost healthy jobs their leases (fault review, probe A). The outbox relay
// sends inside its transaction and the reconciler counts the queue inside its own; on the
// worker's pool (concurrency + 2) those two held both spare connections while SQS answered slowly,
// the heartbeat waited behind them, and jobs whose handlers held the rest lost their leases with
// the database healthy. Now the maintenance loops have a pool of their own. Real PostgreSQL,
// fauxqs behind a proxy that delays only what the maintenance loops call (SendMessageBatch,
// GetQueueAttributes), the worker service as ECS runs it.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalSqs, type LocalSqs } from '../../dev/fauxqs.ts';
import { type RunningWorker, startWorkerService } from '../../runtime/apps/worker.ts';
import { defaultRegistry } from '../../runtime/handlers/index.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { SqsQueue } from '../../runtime/queue/sqs.ts';
import { JobClient } from '../../runtime/store/client.ts';
import { Publisher } from '../../runtime/store/outbox.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { waitFor } from '../support/platform.ts';
import { localWorkerEnv } from '../support/worker-service.ts';

/** A proxy to `upstream` that holds the answer to the named SQS operations for `delayMs`. */
async function slowFor(upstream: string, operations: string[], delayMs: number) {
  const target = new URL(upstream);
  const agent = new http.Agent({ keepAlive: true });
  const server = http.createServer((req, res) => {
    const op = String(req.headers['x-amz-target'] ?? '').replace(/^AmazonSQS\./, '');
    const body: Buffer[] = [];
    req.on('data', (d: Buffer) => body.push(d));
    req.on('end', () => {
      const up = http.request(
        { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers, agent },
        (answer) => {
          const chunks: Buffer[] = [];
          answer.on('data', (d: Buffer) => chunks.push(d));
          answer.on('end', () =>
            setTimeout(
              () => {
                res.writeHead(answer.statusCode ?? 500, answer.headers);
                res.end(Buffer.concat(chunks));
              },
              operations.includes(op) ? delayMs : 0,
            ),
          );
        },
      );
      up.on('error', () => res.destroy());
      up.end(Buffer.concat(body));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
        agent.destroy();
      }),
  };
}

describe("the worker's connections under a slow SQS", () => {
  let db: TestDb;
  let sqs: LocalSqs;
  let proxy: Awaited<ReturnType<typeof slowFor>>;
  let svc: RunningWorker | null = null;
  beforeAll(async () => {
    [db, sqs] = await Promise.all([
      createTestDb(),
      startLocalSqs({ timings: { visibilityTimeoutSeconds: 6, maxReceiveCount: 10 }, prefix: 'pools' }),
    ]);
    proxy = await slowFor(sqs.endpoint, ['SendMessageBatch', 'GetQueueAttributes'], 6000);
  });
  afterAll(async () => {
    await svc?.shutdown('test over');
    await proxy.close();
    await Promise.all([sqs.stop(), db.drop()]);
  });

  it('jobs holding every handler connection keep their leases while the relay and the reconciler wait on SQS', async () => {
    const registry = defaultRegistry();
    svc = await startWorkerService(localWorkerEnv(db, sqs, { JOBS_SQS_ENDPOINT: proxy.endpoint, JOBS_CONCURRENCY: '2' }), registry, []);
    // The jobs are published straight to the queue (not through the slow proxy).
    const client = new JobClient({
      pool: db.pool,
      registry,
      publisher: new Publisher(db.pool, new SqsQueue({ queueUrl: sqs.queueUrl, endpoint: sqs.endpoint }), silentLogger),
      defaultMaxAttempts: 3,
    });
    // Work for the relay: a job whose publish did not happen (its outbox row, older than the relay's minimum age).
    const [stray] = await client.enqueueNow({
      type: 'ledger.post',
      payload: { batch: 'POOL-STRAY', entries: 1 },
      runAt: new Date(Date.now() + 3600_000),
    });
    await db.pool.query(`INSERT INTO jobs.outbox (job_id, created_at) VALUES ($1, now() - interval '10 seconds')`, [stray!.job.id]);
    // Two jobs that hold their transaction (a connection each, all the handler connections) for 7 s,
    // across several relay and reconciler passes, each waiting 6 s on SQS.
    const held = await client.enqueueNow(
      ['POOL-A', 'POOL-B'].map((batch) => ({ type: 'ledger.post', payload: { batch, entries: 2, workAfterWriteMs: 7000 } })),
    );
    await waitFor(
      async () => (await Promise.all(held.map((r) => client.store.get(r.job.id)))).every((j) => j!.state === 'succeeded'),
      30_000,
      'both jobs succeeded',
    );
    for (const r of held) {
      const j = (await client.store.get(r.job.id))!;
      expect([j.attempt, j.attemptLog], j.idempotencyKey ?? j.id).toEqual([1, []]); // no lease lost, no second attempt
    }
    const rows = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ledger_entries WHERE batch IN ('POOL-A', 'POOL-B')`);
    expect(rows.rows[0]!.n).toBe(4);
  }, 60_000);
});
