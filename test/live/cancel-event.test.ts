// A cancel shows in the live view's feed with who asked, from both places a person cancels: the
// API (POST /v1/jobs/{id}/cancel, as `jobs api` runs with its event bus on) and `jobs cancel` (a
// separate process, JOBS_EVENTS=notify as the local stack's env file sets it). Before, the feed
// showed only the holding worker's "lease lost" at its next heartbeat, and nothing at all for a
// pending job. A real PostgreSQL, the API's LISTEN feed.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApiService, type RunningApi } from '../../runtime/apps/api.ts';
import { LiveFeed, type FeedEvent } from '../../runtime/live/feed.ts';
import { silentLogger } from '../../runtime/observability/log.ts';
import { MemoryQueue } from '../../runtime/queue/memory.ts';
import { call } from '../api/support.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { waitFor } from '../support/platform.ts';

const run = promisify(execFile);

describe('a cancel on the live event bus', () => {
  let db: TestDb;
  let feed: LiveFeed;
  let api: RunningApi;
  const received: FeedEvent[] = [];
  const cancelled = (jobId: string) => received.find((e) => e.kind === 'cancelled' && e.jobId === jobId);

  beforeAll(async () => {
    db = await createTestDb();
    feed = new LiveFeed({ url: db.url });
    await feed.start();
    feed.subscribe((events) => received.push(...events));
    api = await startApiService(
      { databaseUrl: db.url, queueUrl: 'http://unused', region: 'us-east-1', port: 0, poolSize: 4, defaultMaxAttempts: 3 },
      {
        queue: new MemoryQueue({ visibilityTimeoutSeconds: 30 }),
        log: silentLogger,
        host: '127.0.0.1',
        live: { events: true, leaseSeconds: 30, heartbeatSeconds: 10, maxAttempts: 3 },
      },
    );
  });
  afterAll(async () => {
    await api?.shutdown('test over');
    await feed?.stop();
    await db?.drop();
  });

  it('through the API: a `cancelled` event naming the job, its type and who asked', async () => {
    const base = `http://127.0.0.1:${api.port}`;
    const job = (await call(base, 'POST', '/v1/jobs', { json: { type: 'ledger.post', payload: { batch: 'B-CANCEL', entries: 1 } } })).body;
    expect((await call(base, 'POST', `/v1/jobs/${job.id}/cancel`, { json: { by: 'alice' } })).status).toBe(200);
    await waitFor(() => cancelled(job.id), 5000, 'the cancelled event');
    expect(cancelled(job.id)).toMatchObject({ workerId: 'api', type: 'ledger.post', by: expect.stringMatching(/^alice \(api, /) });
    expect(cancelled(job.id)!.detail).toBe(`by ${cancelled(job.id)!.by}`);
    // The API is not a worker: the page's worker list stays as it was.
    expect(feed.workers.has('api')).toBe(false);
  });

  it('through `jobs cancel`: the same event, by the person the command names', async () => {
    const env = { ...process.env, DATABASE_URL: db.url, JOBS_LOCAL_ENV: '0', JOBS_QUEUE_URL: '', JOBS_EVENTS: 'notify' };
    const jobs = (args: string[]) => run(process.execPath, ['--import', 'tsx', 'bin/jobs.ts', ...args], { env });
    const job = JSON.parse((await jobs(['enqueue', 'ledger.post', '--payload', '{"batch":"CLI-CANCEL","entries":1}', '--json'])).stdout);
    expect((await jobs(['cancel', job.id, '--by', 'bob'])).stdout).toMatch(/^cancelled by bob \(cli\)/);
    await waitFor(() => cancelled(job.id), 5000, 'the cancelled event');
    expect(cancelled(job.id)).toMatchObject({ workerId: 'cli', type: 'ledger.post', by: 'bob (cli)', detail: 'by bob (cli)' });
    // A second cancel changes nothing and says nothing on the bus.
    await jobs(['cancel', job.id]).catch(() => undefined);
    await new Promise((r) => setTimeout(r, 300));
    expect(received.filter((e) => e.kind === 'cancelled' && e.jobId === job.id)).toHaveLength(1);
  });
});
