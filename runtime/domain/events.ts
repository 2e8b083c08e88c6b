// What a worker tells observers (the live view's event bus, the tests) and why it dead-letters:
// plain types, so the live view reads them without importing the worker.

/**
 * What a worker tells observers (the live view's event feed, tests): one event per thing that
 * happened to a job in this worker. Emitting must be cheap and must never throw.
 */
export type WorkerEventKind =
  | 'claimed'
  | 'reclaimed'
  | 'lease-renewed'
  | 'lease-lost'
  | 'duplicate-ignored'
  /** Turned away by its concurrency key: waits, with no message, until the key has room. */
  | 'blocked'
  | 'succeeded'
  | 'retried'
  | 'dead-lettered'
  | 'released'
  | 'poison-dead-lettered';

export interface WorkerEvent {
  kind: WorkerEventKind;
  workerId: string;
  jobId?: string;
  type?: string;
  attempt?: number;
  at: string;
  detail?: string;
}

export type DeadLetterReason = 'unparseable-body' | 'unknown-job' | 'attempts-exhausted' | 'non-retryable' | 'lease-expired-final-attempt';
