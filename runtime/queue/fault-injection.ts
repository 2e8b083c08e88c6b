// SQS errors on demand, for the chaos run and the local stack: a JobQueue wrapper that fails a
// share of the calls the way a flaky network or an SQS outage does, after the SDK's own retries
// gave up. Half of the injected failures happen before the request (nothing reached SQS), half
// after it (SQS did it, the answer was lost: a sent message the publisher thinks unsent, a
// received batch whose handles the worker never sees, a delete that did happen). The worker and
// the publisher must keep every guarantee through both.
//
// Turned on by JOBS_FAULT_SQS_ERROR_RATE (0 < rate ≤ 0.9) and only against a local SQS endpoint
// (JOBS_SQS_ENDPOINT): a production task that has the variable set by mistake refuses to start.

import { ConfigError } from '../config/rules.ts';
import type { EntryFailure, JobQueue, OutgoingMessage, ReceivedMessage, VisibilityChange } from './types.ts';

export const SQS_FAULTS_ENV = 'JOBS_FAULT_SQS_ERROR_RATE';

export class InjectedSqsError extends Error {
  override name = 'InjectedSqsError';
}

export type SqsOperation = 'SendMessageBatch' | 'ReceiveMessage' | 'ChangeMessageVisibilityBatch' | 'DeleteMessageBatch';

export class FaultyQueue implements JobQueue {
  /** Failures injected so far, by operation. */
  readonly injected: Record<SqsOperation, number> = {
    SendMessageBatch: 0,
    ReceiveMessage: 0,
    ChangeMessageVisibilityBatch: 0,
    DeleteMessageBatch: 0,
  };

  constructor(
    private readonly inner: JobQueue,
    private readonly rate: number,
    private readonly onFault: (operation: SqsOperation, when: 'before' | 'after') => void = () => undefined,
    private readonly random: () => number = Math.random,
  ) {}

  send(messages: OutgoingMessage[], signal?: AbortSignal): Promise<void> {
    return this.call('SendMessageBatch', () => this.inner.send(messages, signal));
  }

  receive(max: number, waitSeconds: number, signal?: AbortSignal): Promise<ReceivedMessage[]> {
    return this.call('ReceiveMessage', () => this.inner.receive(max, waitSeconds, signal));
  }

  changeVisibility(changes: VisibilityChange[], signal?: AbortSignal): Promise<EntryFailure[]> {
    return this.call('ChangeMessageVisibilityBatch', () => this.inner.changeVisibility(changes, signal));
  }

  delete(receipts: string[], signal?: AbortSignal): Promise<EntryFailure[]> {
    return this.call('DeleteMessageBatch', () => this.inner.delete(receipts, signal));
  }

  private async call<T>(op: SqsOperation, fn: () => Promise<T>): Promise<T> {
    if (this.random() >= this.rate) return fn();
    const when = this.random() < 0.5 ? 'before' : 'after';
    if (when === 'after') await fn();
    this.injected[op]++;
    this.onFault(op, when);
    throw new InjectedSqsError(
      `${op}: injected SQS failure (${when === 'before' ? 'request not sent' : 'request done, response lost'}; ${SQS_FAULTS_ENV}=${this.rate})`,
    );
  }
}

/** The error rate from the environment, or null when fault injection is off. */
export function sqsFaultRateFromEnv(env: Record<string, string | undefined>): number | null {
  const raw = env[SQS_FAULTS_ENV]?.trim();
  if (!raw || raw === '0') return null;
  const rate = Number(raw);
  if (!(rate > 0 && rate <= 0.9)) {
    throw new ConfigError('environment', [
      {
        rule: 'sqs-fault-rate',
        message: `${SQS_FAULTS_ENV} = "${raw}" must be a number above 0 and at most 0.9 (the share of SQS calls to fail), or unset`,
      },
    ]);
  }
  if (!env.JOBS_SQS_ENDPOINT?.trim()) {
    throw new ConfigError('environment', [
      {
        rule: 'sqs-faults-local-only',
        message: `${SQS_FAULTS_ENV} injects SQS failures and is allowed only with a local endpoint (JOBS_SQS_ENDPOINT); unset it`,
      },
    ]);
  }
  return rate;
}

/** `queue`, failing a share of its calls when JOBS_FAULT_SQS_ERROR_RATE asks for it. */
export function withSqsFaults(
  queue: JobQueue,
  env: Record<string, string | undefined>,
  onFault?: (operation: SqsOperation, when: 'before' | 'after') => void,
): JobQueue {
  const rate = sqsFaultRateFromEnv(env);
  return rate === null ? queue : new FaultyQueue(queue, rate, onFault);
}
