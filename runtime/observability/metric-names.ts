// The services' CloudWatch metric names: one module, imported by the worker and the API that emit
// them and by the CDK alarms and dashboard that watch them, so a rename cannot silently break an alarm.
// Pure constants: lib/ imports this file.

/** Namespace per environment, e.g. `ErpJobs/prod`. The worker and the API read it from JOBS_METRICS_NAMESPACE. */
export function metricNamespace(environment: string): string {
  return `ErpJobs/${environment}`;
}

export const METRIC = {
  /** Count: jobs whose completion committed. */
  jobsSucceeded: 'JobsSucceeded',
  /** Count: attempts that failed and went back to pending for a retry. */
  jobsFailed: 'JobsFailed',
  /** Count: jobs that became dead (attempt cap, non-retryable error, lost on their final attempt). */
  jobsDeadLettered: 'JobsDeadLettered',
  /** Count: messages sent to the DLQ by the worker itself (poison bodies, unknown jobs). */
  messagesDeadLettered: 'MessagesDeadLettered',
  /** Count: leases a worker found gone at a heartbeat or at completion (reclaimed), or could not renew in time; not a cancel. */
  leasesLost: 'LeasesLost',
  /** Count: handlers still running 5 s after their attempt was given up (lease lost, cancelled): each keeps its worker slot until it returns. */
  handlersIgnoringAbort: 'HandlersIgnoringAbort',
  /** Count: deliveries of a job another worker holds a live lease on. */
  duplicateDeliveries: 'DuplicateDeliveriesIgnored',
  /** Count: deliveries whose claim touched no row. */
  claimMisses: 'ClaimMisses',
  /** Milliseconds: claim to completion of one attempt. */
  jobDuration: 'JobDurationMs',
  /** Milliseconds: job created (or due) to claimed. */
  queueLag: 'QueueLagMs',
  /** Count: jobs running past their type's expected maximum or pending past the threshold. */
  jobsStuck: 'JobsStuck',
  /** Count: times a worker found the database unreachable and stopped receiving (a failover). */
  databaseUnavailable: 'DatabaseUnavailable',
  /** Count: messages the reconciler published for jobs whose message the queue had lost (a purge, expiry). */
  jobsRepublished: 'JobsRepublished',
  /** Count: jobs an outbox relay pass could not publish to SQS (their rows stay; every pass tries again): a queue deleted, a permission revoked, SQS down. */
  outboxPublishesFailed: 'OutboxPublishesFailed',
  /** Count: passes in which a schedule's due occurrence could not be enqueued (retried at the next pass, seconds later). */
  schedulePassesFailed: 'SchedulePassesFailed',
  /** Count: a worker's probes, while it has stopped receiving, whose fresh login the database refused (the password not followed). */
  databaseLoginsRefused: 'DatabaseLoginsRefused',
  /**
   * Count: claims of received messages that failed with the database answering (not an outage): a
   * grant revoked, a table or function changed by hand, a statement timeout. Their messages return
   * after the visibility timeout, each receive spent toward the DLQ.
   */
  claimsFailed: 'ClaimsFailed',
  /**
   * Count: a worker's SQS calls that failed after the wire's own retries (a lane's receive, a
   * visibility change, a delete, a send for a later due time, a dead letter): throttling, a
   * permission revoked, a queue gone, SQS not answering. Jobs are safe in the database meanwhile.
   */
  sqsCallsFailed: 'SqsCallsFailed',
  /** Count: reads of the database secret that failed, by workers and API tasks (runtime/db/credentials.ts: hourly, and on a refused login). */
  databaseSecretReadsFailed: 'DatabaseSecretReadsFailed',
  /** Milliseconds: age of the database secret's current version (since its last rotation), at each task's start and hourly read (workers and API). */
  databaseSecretAgeMs: 'DatabaseSecretAgeMs',
} as const;

export type MetricName = (typeof METRIC)[keyof typeof METRIC];
