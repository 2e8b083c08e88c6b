// Logs: JSON for ECS (the default), readable lines for a person watching the local stack.
import { describe, expect, it } from 'vitest';
import { prettyLine } from '../../runtime/observability/log.ts';

describe('log format', () => {
  it('a pino JSON line reads as time, level, service, message, fields, and an error with its first frame', () => {
    const line = JSON.stringify({
      level: 40,
      time: '2026-11-30T21:06:01.931Z',
      service: 'jobs-worker',
      name: 'jobs-worker',
      workerId: 'local-worker-1',
      jobId: 'j1',
      attempt: 2,
      err: {
        type: 'Error',
        message: 'read ECONNRESET',
        stack: 'Error: read ECONNRESET\n    at pg-pool/index.js:45:11\n    at run (job-store.ts:29:11)',
      },
      msg: 'database unreachable: the failed attempt is not recorded',
    });
    expect(prettyLine(line)).toBe(
      '21:06:01.931 WARN  jobs-worker: database unreachable: the failed attempt is not recorded  workerId=local-worker-1 jobId=j1 attempt=2  read ECONNRESET (at pg-pool/index.js:45:11)',
    );
    expect(prettyLine('not json')).toBe('not json');
  });
});

describe('jobs show', () => {
  it('shows an old error as history on a job that did not end dead, and as the job state on a dead one', async () => {
    const { formatJob } = await import('../../runtime/cli/format.ts');
    const base = {
      id: '01900000-0000-7000-8000-000000000001',
      type: 'ledger.post',
      payload: {},
      idempotencyKey: null,
      attempt: 6,
      releases: 5,
      maxAttempts: 3,
      leaseOwner: null,
      leaseExpiresAt: null,
      runAfter: new Date(0),
      progress: null,
      checkpoint: null,
      attemptLog: [],
      result: { posted: 1 },
      cancelledBy: null,
      createdAt: new Date(0),
      startedAt: new Date(0),
      finishedAt: new Date(0),
      lastError: { name: 'Error', message: 'boom', retryable: true },
    };
    const ok = formatJob({ ...base, state: 'succeeded' } as never);
    expect(ok).toMatch(/^attempt {3}6 \(1 of 3 used, 5 released\)$/m);
    expect(ok).toMatch(/^earlier {3}an earlier attempt failed: Error: boom$/m);
    expect(ok).not.toMatch(/^error /m);
    expect(formatJob({ ...base, state: 'dead', result: null } as never)).toMatch(/^error {5}Error: boom$/m);
    // The attempt log's times as PostgreSQL writes them, shown like every other time (a newcomer's find).
    const log = [{ attempt: 1, outcome: 'retry', at: '2026-12-02T16:28:48.490545+00:00', owner: 'w-1', message: 'boom' }];
    expect(formatJob({ ...base, state: 'succeeded', attemptLog: log } as never)).toMatch(
      /^ {2}attempt 1 retry at 2026-12-02T16:28:48\.490Z by w-1: boom$/m,
    );
  });

  it('a due time reads in days, hours and minutes, and says a job due beyond 15 minutes gets its message only then', async () => {
    const { dueReading, formatDuration, MESSAGE_AHEAD_SECONDS } = await import('../../runtime/domain/reading.ts');
    const { SQS_MAX_DELAY_SECONDS } = await import('../../runtime/queue/types.ts');
    expect(MESSAGE_AHEAD_SECONDS).toBe(SQS_MAX_DELAY_SECONDS);
    expect([45, 725, 7020, 3 * 86_400 + 4 * 3600 + 59].map(formatDuration)).toEqual(['45 s', '12 min 5 s', '1 h 57 min', '3 d 4 h']);
    const at = (s: number) => ({ state: 'pending' as const, runAfter: new Date(1_000_000 + s * 1000) });
    expect(dueReading(at(900), 1_000_000)).toBe('1970-01-01T00:31:40.000Z, in 15 min 0 s');
    expect(dueReading(at(901), 1_000_000)).toBe('1970-01-01T00:31:41.000Z, in 15 min 1 s (its SQS message is sent 15 min before)');
    expect(dueReading(at(0), 1_000_000)).toBeNull();
    expect(dueReading({ ...at(60), state: 'running' as never }, 1_000_000)).toBeNull();
  });
});
