// Queue depths for the live view: the DLQ's ApproximateNumberOfMessages (what pages on-call) and
// the job queue's visible / in-flight / delayed counts, from SQS GetQueueAttributes; with priority
// lanes, both lanes' queues (and DLQs) counted together, each lane's own beside. The API's
// production role may not be allowed to read them (it only publishes): then the page shows
// "n/a" with the reason instead of failing. Cached briefly, so many open pages cost one call.

import { GetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';

export interface QueueDepth {
  /** Messages ready to receive. */
  visible: number | null;
  inFlight: number | null;
  delayed: number | null;
  /** Why the numbers are missing (no permission, unreachable, not configured). */
  unavailable?: string;
  /** Each lane's own, when the urgent lane has a queue of its own (the numbers above are their sums). */
  byLane?: { urgent: QueueDepth; bulk: QueueDepth };
}

/** Both lanes' queues as one depth: the sums (n/a when either is), and each lane's own. */
export async function laneQueueDepth(urgent: () => Promise<QueueDepth>, bulk: () => Promise<QueueDepth>): Promise<QueueDepth> {
  const [u, b] = await Promise.all([urgent(), bulk()]);
  const sum = (k: 'visible' | 'inFlight' | 'delayed') => (u[k] === null || b[k] === null ? null : u[k]! + b[k]!);
  const unavailable = u.unavailable ?? b.unavailable;
  return {
    visible: sum('visible'),
    inFlight: sum('inFlight'),
    delayed: sum('delayed'),
    ...(unavailable ? { unavailable } : {}),
    byLane: { urgent: u, bulk: b },
  };
}

export async function queueDepth(client: SQSClient, queueUrl: string): Promise<QueueDepth> {
  try {
    const out = await client.send(
      new GetQueueAttributesCommand({
        QueueUrl: queueUrl,
        AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible', 'ApproximateNumberOfMessagesDelayed'],
      }),
    );
    const a = out.Attributes ?? {};
    const n = (v: string | undefined) => (v === undefined ? null : Number(v));
    return {
      visible: n(a.ApproximateNumberOfMessages),
      inFlight: n(a.ApproximateNumberOfMessagesNotVisible),
      delayed: n(a.ApproximateNumberOfMessagesDelayed),
    };
  } catch (err) {
    const e = err as { name?: string; Code?: string; message?: string };
    const code = e.name ?? e.Code ?? 'Error';
    const denied = /AccessDenied|NotAuthorized|UnauthorizedOperation/i.test(`${code} ${e.message ?? ''}`);
    return {
      visible: null,
      inFlight: null,
      delayed: null,
      unavailable: denied ? 'not permitted (the API role may not read queue attributes)' : `unreachable (${code})`,
    };
  }
}

/** `queueDepth` behind a short cache: concurrent callers share one request. */
export class CachedQueueDepth {
  private last: { at: number; value: Promise<QueueDepth> } | null = null;

  constructor(
    private readonly read: () => Promise<QueueDepth>,
    private readonly ttlMs = 1000,
  ) {}

  get(): Promise<QueueDepth> {
    const now = Date.now();
    if (!this.last || now - this.last.at >= this.ttlMs) this.last = { at: now, value: this.read() };
    return this.last.value;
  }
}
