// The queues of the priority lanes (runtime/domain/lanes.ts) as one JobQueue. A message goes to
// its lane's queue (OutgoingMessage.lane; bulk when it names none); a received message carries the
// lane it came from, and its receipt is marked with it, so a visibility change or a delete goes
// back to the queue the message came from whoever makes it. The worker receives lane by lane
// (receiveFrom); receive() is for readers that do not care (the test kit, a drain): the lanes in
// order, highest first.
//
// When the urgent lane has no queue of its own (JOBS_URGENT_QUEUE_URL unset), it shares the bulk
// queue: `queues` then has one entry and every message goes there (a one-queue setup keeps working,
// without the preference; the worker says so at start), and receipts pass unmarked. The same holds
// for the DLQs.

import type { SQSClient } from '@aws-sdk/client-sqs';
import type { SqsSettings } from '../config/sqs.ts';
import { DEFAULT_LANE, LANES, type Lane } from '../domain/lanes.ts';
import { createSqsClient, SqsQueue } from './sqs.ts';
import { SqsWire } from './sqs-wire.ts';
import type { EntryFailure, JobQueue, OutgoingMessage, ReceivedMessage, VisibilityChange } from './types.ts';

/** Between the lane and the queue's own receipt handle (an SQS handle is base64: never a `|`). */
const MARK = '|';

export class LaneQueues implements JobQueue {
  /** The distinct queues, highest lane first, each with the lane that names it; one entry when the lanes share a queue. */
  readonly queues: { lane: Lane; queue: JobQueue; lanes: Lane[] }[];
  private readonly byLane: Record<Lane, JobQueue>;

  constructor(queues: { bulk: JobQueue; urgent?: JobQueue | null }) {
    this.byLane = { bulk: queues.bulk, urgent: queues.urgent ?? queues.bulk };
    this.queues = [];
    for (const lane of LANES) {
      const queue = this.byLane[lane];
      const same = this.queues.find((q) => q.queue === queue);
      if (same) same.lanes.push(lane);
      else this.queues.push({ lane, queue, lanes: [lane] });
    }
    // The queue a shared lane uses is named after the lowest lane on it (bulk): a receipt's mark.
    for (const q of this.queues) q.lane = q.lanes.at(-1)!;
  }

  /** True when every lane uses one queue (no preference between lanes is possible). */
  get shared(): boolean {
    return this.queues.length === 1;
  }

  /** The queue of `lane`. */
  queue(lane: Lane): JobQueue {
    return this.byLane[lane];
  }

  /** The lane that names `lane`'s queue: itself, or bulk when it shares the bulk queue. */
  queueLane(lane: Lane): Lane {
    return this.queues.find((q) => q.lanes.includes(lane))!.lane;
  }

  async send(messages: OutgoingMessage[], signal?: AbortSignal): Promise<void> {
    const groups = new Map<JobQueue, OutgoingMessage[]>();
    for (const m of messages) {
      const q = this.byLane[m.lane ?? DEFAULT_LANE];
      const group = groups.get(q);
      if (group) group.push(m);
      else groups.set(q, [m]);
    }
    await Promise.all([...groups].map(([q, ms]) => q.send(ms, signal)));
  }

  /** Long-poll the queue of `lane` (the lane's own, or the one it shares). */
  async receiveFrom(lane: Lane, max: number, waitSeconds: number, signal?: AbortSignal): Promise<ReceivedMessage[]> {
    const mark = this.queueLane(lane);
    const got = await this.byLane[mark].receive(max, waitSeconds, signal);
    // Marked in place: a receive hands over messages of its own making (JobQueue.receive), and a
    // copy of each would be one more object per job on the hot path. One queue for every lane:
    // its receipts are its own (nothing to route).
    for (const m of got) {
      if (!this.shared) m.receipt = `${mark}${MARK}${m.receipt}`;
      m.lane = mark;
    }
    return got;
  }

  /** Up to `max` messages, the lanes in order (highest first); only the last queue is long-polled. */
  async receive(max: number, waitSeconds: number, signal?: AbortSignal): Promise<ReceivedMessage[]> {
    const out: ReceivedMessage[] = [];
    for (const [i, q] of this.queues.entries()) {
      if (out.length >= max) break;
      const last = i === this.queues.length - 1;
      out.push(...(await this.receiveFrom(q.lane, max - out.length, last && out.length === 0 ? waitSeconds : 0, signal)));
    }
    return out;
  }

  async changeVisibility(changes: VisibilityChange[], signal?: AbortSignal): Promise<EntryFailure[]> {
    if (this.shared) return this.byLane.bulk.changeVisibility(changes, signal);
    const out: EntryFailure[] = [];
    for (const [lane, group] of this.byMark(changes, (c) => c.receipt)) {
      const failures = await this.byLane[lane].changeVisibility(
        group.map(({ item, inner }) => ({ ...item, receipt: inner })),
        signal,
      );
      out.push(...failures.map((f) => ({ ...f, receipt: `${lane}${MARK}${f.receipt}` })));
    }
    return out;
  }

  async delete(receipts: string[], signal?: AbortSignal): Promise<EntryFailure[]> {
    if (this.shared) return this.byLane.bulk.delete(receipts, signal);
    const out: EntryFailure[] = [];
    for (const [lane, group] of this.byMark(receipts, (r) => r)) {
      const failures = await this.byLane[lane].delete(
        group.map((g) => g.inner),
        signal,
      );
      out.push(...failures.map((f) => ({ ...f, receipt: `${lane}${MARK}${f.receipt}` })));
    }
    return out;
  }

  /** Messages the lanes' queues hold together (each queue once), for readers that count them all. */
  async approximateCount(): Promise<number> {
    let n = 0;
    for (const { queue } of this.queues)
      n += (await (queue as JobQueue & { approximateCount?: () => Promise<number> }).approximateCount?.()) ?? 0;
    return n;
  }

  /** Receipts grouped by the lane marked on them; an unmarked one (not received here) goes to the bulk queue. */
  private byMark<T>(items: T[], receipt: (t: T) => string): Map<Lane, { item: T; inner: string }[]> {
    const out = new Map<Lane, { item: T; inner: string }[]>();
    for (const item of items) {
      const r = receipt(item);
      const at = r.indexOf(MARK);
      const head = at > 0 ? r.slice(0, at) : '';
      const lane: Lane = (LANES as readonly string[]).includes(head) ? (head as Lane) : DEFAULT_LANE;
      const inner = lane === head ? r.slice(at + 1) : r;
      const group = out.get(lane);
      if (group) group.push({ item, inner });
      else out.set(lane, [{ item, inner }]);
    }
    return out;
  }
}

/** `queue` as lanes: itself when it already is, else one queue every lane shares. */
export function asLanes(queue: JobQueue): LaneQueues {
  return queue instanceof LaneQueues ? queue : new LaneQueues({ bulk: queue });
}

/**
 * The lanes' SQS queues from the settings (config/sqs.ts): the bulk queue, and the urgent one when
 * configured; the same for the DLQs when given. One SQS client for all of them and, unless a client
 * is handed in (the jobs command keeps the SDK: sqs.ts's rule), a wire for each lane's hot path
 * (the lane's queue and its DLQ): its own connections and retry budget. With one wire for both, a
 * silent urgent queue held its connections and spent its retries, and the bulk lane's sends
 * waited for a connection up to their deadline (API review: 2 ms became 1.7–6.7 s).
 */
export function sqsLanes(
  s: SqsSettings,
  opts: { client?: SQSClient; wrap?: (q: SqsQueue) => JobQueue } = {},
): { queue: LaneQueues; dlq: LaneQueues | null; client: SQSClient; wires: SqsWire[]; sqsQueues: SqsQueue[] } {
  const client = opts.client ?? createSqsClient(sqsClientOptions(s));
  const wires: SqsWire[] = [];
  const laneWire = () => {
    if (opts.client) return null;
    const wire = SqsWire.forClient(client, s.httpClient ? { httpClient: s.httpClient } : {});
    wires.push(wire);
    return wire;
  };
  const lane = (queueUrl: string, dlqUrl: string | undefined) => {
    const wire = laneWire();
    const sqsQueue = (url: string) => new SqsQueue({ queueUrl: url, client, ...(wire ? { wire } : {}) });
    return { queue: sqsQueue(queueUrl), dlq: dlqUrl ? sqsQueue(dlqUrl) : null };
  };
  const bulk = lane(s.queueUrl, s.dlqUrl);
  const urgent = s.urgentQueueUrl ? lane(s.urgentQueueUrl, s.urgentDlqUrl) : null;
  const wrap = opts.wrap ?? ((q: SqsQueue) => q);
  const queue = new LaneQueues({ bulk: wrap(bulk.queue), urgent: urgent ? wrap(urgent.queue) : null });
  const dlq = bulk.dlq ? new LaneQueues({ bulk: bulk.dlq, urgent: urgent?.dlq ?? null }) : null;
  return { queue, dlq, client, wires, sqsQueues: urgent ? [urgent.queue, bulk.queue] : [bulk.queue] };
}

/** What createSqsClient takes from the settings: region, the local endpoint, JOBS_SQS_MAX_ATTEMPTS. */
export function sqsClientOptions(s: SqsSettings): { region: string; endpoint?: string; maxAttempts?: number } {
  return {
    region: s.region,
    ...(s.endpoint ? { endpoint: s.endpoint } : {}),
    ...(s.maxAttempts !== undefined ? { maxAttempts: s.maxAttempts } : {}),
  };
}
