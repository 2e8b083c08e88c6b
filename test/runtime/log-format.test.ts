// Logs: JSON for ECS (the default), readable lines for a person watching the local stack.
import { describe, expect, it } from 'vitest';
import { prettyLine } from '../../runtime/observability/log.ts';

describe('log format', () => {
  it('a pino JSON line reads as time, level, service, message, fields, and an error with its first frame', () => {
    const line = JSON.stringify({
      level: 40, time: '2026-11-30T21:06:01.931Z', service: 'jobs-worker', name: 'jobs-worker', workerId: 'local-worker-1', jobId: 'j1', attempt: 2,
      err: { type: 'Error', message: 'read ECONNRESET', stack: 'Error: read ECONNRESET\n    at pg-pool/index.js:45:11\n    at run (job-store.ts:29:11)' },
      msg: 'database unreachable: the failed attempt is not recorded',
    });
    expect(prettyLine(line)).toBe('21:06:01.931 WARN  jobs-worker: database unreachable: the failed attempt is not recorded  workerId=local-worker-1 jobId=j1 attempt=2  read ECONNRESET (at pg-pool/index.js:45:11)');
    expect(prettyLine('not json')).toBe('not json');
  });
});
