// The environment of a worker service (startWorkerService) against a test database and the local
// SQS endpoint, with short timings: lease 3 s, heartbeat 1 s, visibility 6 s, drain 2 s, silent
// logs. `extra` adds or overrides variables (ECS endpoints, concurrency, a proxy's endpoint).
import type { LocalSqs } from '../../dev/fauxqs.ts';
import type { TestDb } from './db.ts';

export function localWorkerEnv(db: TestDb, sqs: LocalSqs, extra: Record<string, string> = {}): Record<string, string> {
  return {
    DATABASE_URL: db.url,
    JOBS_QUEUE_URL: sqs.queueUrl,
    JOBS_DLQ_URL: sqs.dlqUrl,
    JOBS_SQS_ENDPOINT: sqs.endpoint,
    JOBS_LEASE_SECONDS: '3',
    JOBS_HEARTBEAT_SECONDS: '1',
    JOBS_VISIBILITY_TIMEOUT_SECONDS: '6',
    JOBS_MAX_RECEIVE_COUNT: '10',
    JOBS_DRAIN_SECONDS: '2',
    LOG_LEVEL: 'silent',
    ...extra,
  };
}
