// How a worker chooses between the priority lanes (runtime/domain/lanes.ts). The rule:
//
//   Urgent first. While both lanes have work, bulk keeps `bulkSlots` of the worker's handler
//   slots (default: a fifth of JOBS_CONCURRENCY, at least 1), and urgent takes every other slot.
//   When one lane is empty, the other takes every slot.
//
// So bulk is never starved (bulkSlots bulk jobs run whenever bulk has work), and an urgent flood
// waits behind at most bulkSlots bulk jobs once the bulk jobs it found running end (a running job
// keeps its slot: nothing is preempted). The rule is applied twice: here, when the worker decides
// how many messages to take from each lane's queue (bulk's share of the jobs in hand, prefetched
// ones included, so a bulk job is waiting when a bulk slot frees), and in the coordinator
// (worker.ts), when a free slot picks the next of the claimed jobs waiting for one.
//
// Receiving, without raising the SQS calls per job. A lane that had messages on the last receive
// is *busy*: it is received from without waiting (an empty answer makes it idle). An idle lane has
// one long poll (20 s) open in the background; what it brings is claimed on the next pass, before
// any busy receive, or handed back at once (visibility 0) if the worker has no room for them by
// then, and a full batch makes the lane busy again (a short one opens the next long poll). When
// every lane is idle, the worker waits on their long polls, all at once:
// idle, a worker makes one receive per lane per 20 s; busy with one lane, the other lane's long
// poll adds one call per 20 s. With one queue for every lane (JOBS_URGENT_QUEUE_URL unset) the
// fetcher receives as before and only the slot rule applies, to the jobs already claimed.

import { LANES, type Lane } from '../domain/lanes.ts';
import { METRIC } from '../observability/metric-names.ts';
import { SQS_BATCH_LIMIT, type ReceivedMessage } from '../queue/types.ts';
import { sleep, type WorkerContext } from './held.ts';
import type { QueueMessages } from './messages.ts';

/** The slots bulk keeps while urgent work waits: a fifth of the concurrency, at least 1. */
export function defaultBulkSlots(concurrency: number): number {
  return Math.max(1, Math.floor(concurrency / 5));
}

/**
 * The next of the jobs waiting for a slot (their lanes, in claim order): the first urgent one,
 * unless bulk runs fewer than its slots and a bulk job waits; with no urgent job waiting, the
 * first. -1 when none waits.
 */
export function nextWaiting(waiting: readonly { job: { lane: Lane } }[], bulkRunning: number, bulkSlots: number): number {
  if (waiting.length === 0) return -1;
  const urgent = waiting.findIndex((h) => h.job.lane === 'urgent');
  if (urgent < 0) return 0;
  if (bulkRunning < bulkSlots) {
    const bulk = waiting.findIndex((h) => h.job.lane !== 'urgent');
    if (bulk >= 0) return bulk;
  }
  return urgent;
}

interface LaneState {
  lane: Lane;
  /** The last receive brought messages: receive without waiting. */
  busy: boolean;
  /** The background long poll of an idle lane. */
  poll: Promise<void> | null;
  /** What a background poll brought, for the next pass. */
  ready: ReceivedMessage[];
  /** Its last receive failed: the error, its failures in a row, and until when (performance.now()) it is left alone. */
  error: unknown;
  failures: number;
  downUntil: number;
}

/** The longest a lane whose receives fail is left alone before it is tried again (1 s doubling). */
export const LANE_RECEIVE_BACKOFF_MAX_MS = 30_000;

/** The fetcher's receives when the lanes have queues of their own. */
export class LaneReceiver {
  private readonly lanes: LaneState[];
  /** The fetcher waits for a slot: messages a background poll brings go straight back. */
  private roomless = false;
  /** What passes returned from what background polls had brought, with no receive of their own. */
  readonly fromPolls = new WeakSet<ReceivedMessage[]>();

  constructor(
    private readonly ctx: WorkerContext,
    private readonly messages: QueueMessages,
    private readonly opts: { bulkInHandTarget: number; waitSeconds: number; bulkInHand: () => number },
  ) {
    this.lanes = LANES.map((lane) => ({ lane, busy: true, poll: null, ready: [], error: undefined, failures: 0, downUntil: 0 }));
  }

  /**
   * Up to `room` messages, urgent first, bulk's slots kept (the rule above). Returns [] after
   * waiting on the idle lanes' long polls when every lane is idle; the caller comes back.
   */
  async receive(room: number): Promise<ReceivedMessage[]> {
    this.roomless = false;
    // A lane whose receives fail is left alone for a while, and the other goes on: an urgent queue
    // throttled at month-end stopped every bulk job (worker SQS review). Every lane failing: the
    // fetcher's own backoff, and its line.
    const now = performance.now();
    const up = (s: LaneState) => s.downUntil <= now;
    if (!this.lanes.some(up)) throw this.lanes.reduce((a, b) => (b.downUntil > a.downUntil ? b : a)).error;
    const [urgent, bulk] = this.lanes as [LaneState, LaneState];
    const got = { urgent: urgent.ready.splice(0), bulk: bulk.ready.splice(0) };
    // Bulk's share: what it lacks of its slots, when it has work.
    // A lane left alone after failures keeps no room (it held every slot, and urgent got none: review).
    const bulkWork = (bulk.busy && up(bulk)) || got.bulk.length > 0;
    const reserve = bulkWork ? Math.max(0, Math.min(room, this.opts.bulkInHandTarget - this.opts.bulkInHand() - got.bulk.length)) : 0;
    // What a poll brought is claimed now, not after a busy lane's receive (a round trip): the
    // busy receives wait for the next pass, which follows at once while there is room.
    const fresh = got.urgent.length + got.bulk.length === 0;
    const urgentWant = room - reserve;
    if (fresh && urgent.busy && !urgent.poll && urgentWant > 0 && up(urgent))
      got.urgent.push(...(await this.receiveBusy(urgent, urgentWant)));
    const bulkWant = room - got.urgent.length;
    // What urgent brought is claimed now whatever bulk's receive does (its failure is its backoff).
    if (fresh && bulk.busy && !bulk.poll && bulkWant > 0 && up(bulk)) got.bulk.push(...(await this.receiveBusy(bulk, bulkWant)));
    if (this.ctx.stopping) {
      await this.handBack([...got.urgent, ...got.bulk]);
      return [];
    }
    for (const s of this.lanes) if (!s.busy && !s.poll && up(s)) this.startPoll(s, Math.min(SQS_BATCH_LIMIT, Math.max(1, room)));
    const all = [...got.urgent, ...got.bulk];
    if (all.length > room) await this.handBack(all.splice(room));
    if (!fresh) this.fromPolls.add(all);
    if (all.length > 0) return all;
    // Nothing now: wait on the long polls, and for a lane left alone to be tried again (with no
    // poll open, the caller came straight back, a pass per tick: review).
    const waits = this.lanes.map((s) => s.poll).filter((p): p is Promise<void> => p !== null);
    const down = this.lanes.filter((s) => !up(s));
    if (down.length > 0)
      waits.push(sleep(Math.max(0, Math.min(...down.map((s) => s.downUntil)) - performance.now()), this.ctx.stopAc.signal));
    if (waits.length > 0) await Promise.race(waits);
    return [];
  }

  /** What the background polls brought and no pass has taken (a failover hands it back with the rest). */
  takeReady(): ReceivedMessage[] {
    return this.lanes.flatMap((s) => s.ready.splice(0));
  }

  /** Once the lanes' open long polls have returned (what they bring waits in `ready`). */
  async pollsEnded(): Promise<void> {
    await Promise.all(this.lanes.map((s) => s.poll));
  }

  /** The worker has no room: what the background polls brought goes back to the queue now. */
  async noRoom(): Promise<void> {
    this.roomless = true;
    const ready = this.takeReady();
    if (ready.length > 0) await this.handBack(ready);
  }

  /** On stop: wait for the open polls (they return by themselves, or the stop aborts them at its deadline) and hand back whatever they brought. */
  async stop(): Promise<void> {
    await Promise.all(this.lanes.map((s) => s.poll));
    await this.noRoom();
  }

  /** A busy lane: up to `want` without waiting (parallel receives of 10 when the first is full); a failure is the lane's backoff. */
  private async receiveBusy(s: LaneState, want: number): Promise<ReceivedMessage[]> {
    const q = this.ctx.queue;
    const signal = this.ctx.receiveAc.signal;
    let first: ReceivedMessage[];
    try {
      first = await q.receiveFrom(s.lane, Math.min(SQS_BATCH_LIMIT, want), 0, signal);
    } catch (err) {
      this.failed(s, err);
      return [];
    }
    this.answered(s);
    s.busy = first.length > 0;
    if (want <= SQS_BATCH_LIMIT || first.length < SQS_BATCH_LIMIT) return first;
    const sizes: number[] = [];
    for (let left = want - SQS_BATCH_LIMIT; left > 0; left -= SQS_BATCH_LIMIT) sizes.push(Math.min(SQS_BATCH_LIMIT, left));
    const more = await Promise.allSettled(sizes.map((n) => q.receiveFrom(s.lane, n, 0, signal)));
    return [...first, ...more.flatMap((r) => (r.status === 'fulfilled' ? r.value : []))];
  }

  private startPoll(s: LaneState, max: number): void {
    s.poll = this.ctx.queue
      .receiveFrom(s.lane, max, this.opts.waitSeconds, this.ctx.receiveAc.signal)
      .then(async (got) => {
        this.answered(s);
        if (got.length === 0) return;
        // A full batch: there is more, receive without waiting. A short one: SQS had no more, so
        // the next pass opens a long poll again (one call per arrival on a quiet lane, not two).
        s.busy = got.length >= max;
        if (this.ctx.stopping || this.roomless) await this.handBack(got);
        else s.ready.push(...got);
      })
      .catch((err: unknown) => this.failed(s, err))
      .finally(() => {
        s.poll = null;
      });
  }

  private failed(s: LaneState, err: unknown): void {
    if (this.ctx.receiveAc.signal.aborted) return; // the stop's abort, not the queue's failure
    s.failures++;
    s.error = err;
    const wait = Math.min(LANE_RECEIVE_BACKOFF_MAX_MS, 1000 * 2 ** (s.failures - 1));
    s.downUntil = performance.now() + wait;
    this.ctx.metrics.count(METRIC.sqsCallsFailed);
    const other = this.lanes.find((x) => x !== s)!;
    this.ctx.log.warn(
      { err, lane: s.lane, failures: s.failures, retryInMs: wait },
      `receive from the ${s.lane} lane's queue failed; ${other.downUntil > performance.now() ? 'the other lane fails too' : `the ${other.lane} lane goes on`}; trying it again in ${wait / 1000} s`,
    );
  }

  private answered(s: LaneState): void {
    s.failures = 0;
    s.downUntil = 0;
    s.error = undefined;
  }

  private async handBack(ms: ReceivedMessage[]): Promise<void> {
    if (ms.length > 0) await this.messages.changeVisibility(ms.map((m) => ({ receipt: m.receipt, seconds: 0 })));
  }
}
