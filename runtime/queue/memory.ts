// An in-process queue with SQS's delivery semantics (see types.ts): visibility timeouts,
// receipt handles that go stale on redelivery, receive counts and a redrive to a dead-letter
// queue. The tests use it to put the worker through duplicate deliveries and redrive without a
// network, and the benchmark uses it to measure the platform alone.

import type { EntryFailure, JobQueue, OutgoingMessage, ReceivedMessage, VisibilityChange } from './types.ts';

interface StoredMessage {
  messageId: string;
  body: string;
  attributes: Record<string, string>;
  visibleAt: number;
  receiveCount: number;
  /** The newest receipt handle; older ones are stale. */
  receipt: string | null;
  sentAt: number;
}

export interface MemoryQueueOptions {
  visibilityTimeoutSeconds: number;
  /** Redrive: a message received more than this many times moves to `deadLetterQueue`. */
  maxReceiveCount?: number;
  deadLetterQueue?: MemoryQueue;
  now?: () => number;
}

export class MemoryQueue implements JobQueue {
  private readonly messages = new Map<string, StoredMessage>();
  private readonly byReceipt = new Map<string, string>();
  private waiters = new Set<() => void>();
  private seq = 0;
  private timer: NodeJS.Timeout | null = null;
  /** Every message ever sent, for assertions. */
  readonly sentLog: OutgoingMessage[] = [];

  constructor(private readonly opts: MemoryQueueOptions) {}

  private now(): number {
    return this.opts.now ? this.opts.now() : Date.now();
  }

  async send(messages: OutgoingMessage[]): Promise<void> {
    const now = this.now();
    for (const m of messages) {
      this.sentLog.push(m);
      const id = `m${++this.seq}`;
      this.messages.set(id, {
        messageId: id,
        body: m.body,
        attributes: { ...(m.attributes ?? {}) },
        visibleAt: now + (m.delaySeconds ?? 0) * 1000,
        receiveCount: 0,
        receipt: null,
        sentAt: now,
      });
    }
    this.wake();
  }

  async receive(max: number, waitSeconds: number, signal?: AbortSignal): Promise<ReceivedMessage[]> {
    const deadline = Date.now() + waitSeconds * 1000;
    for (;;) {
      const got = this.take(max);
      if (got.length > 0 || signal?.aborted || Date.now() >= deadline) return got;
      await this.waitForChange(Math.min(deadline - Date.now(), this.msUntilNextVisible()), signal);
    }
  }

  async changeVisibility(changes: VisibilityChange[]): Promise<EntryFailure[]> {
    const failures: EntryFailure[] = [];
    const now = this.now();
    for (const c of changes) {
      const m = this.current(c.receipt);
      if (!m) {
        failures.push({
          receipt: c.receipt,
          code: 'ReceiptHandleIsInvalid',
          message: 'receipt handle is not the newest for its message, or the message is gone',
          stale: true,
        });
        continue;
      }
      m.visibleAt = now + c.seconds * 1000;
    }
    this.wake();
    return failures;
  }

  async delete(receipts: string[]): Promise<EntryFailure[]> {
    for (const r of receipts) {
      // SQS: deleting with a stale handle "succeeds" without deleting the message.
      const m = this.current(r);
      if (m) {
        this.messages.delete(m.messageId);
        this.byReceipt.delete(r);
      }
    }
    return [];
  }

  /** Messages stored (visible, in flight or delayed), as SqsQueue.approximateCount answers. */
  async approximateCount(): Promise<number> {
    return this.messages.size;
  }

  /** Drop every message (SQS PurgeQueue), for the tests of what the job table heals. */
  purge(): void {
    this.messages.clear();
    this.byReceipt.clear();
  }

  /** Messages currently stored (visible or in flight), for assertions. */
  depth(): { visible: number; inFlight: number; total: number } {
    const now = this.now();
    let visible = 0;
    for (const m of this.messages.values()) if (m.visibleAt <= now) visible++;
    return { visible, inFlight: this.messages.size - visible, total: this.messages.size };
  }

  /** All stored messages' bodies and attributes, for assertions. */
  peek(): { body: string; attributes: Record<string, string>; receiveCount: number }[] {
    return [...this.messages.values()].map((m) => ({ body: m.body, attributes: m.attributes, receiveCount: m.receiveCount }));
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.wake();
  }

  private current(receipt: string): StoredMessage | undefined {
    const id = this.byReceipt.get(receipt);
    const m = id ? this.messages.get(id) : undefined;
    return m && m.receipt === receipt ? m : undefined;
  }

  private take(max: number): ReceivedMessage[] {
    const now = this.now();
    const out: ReceivedMessage[] = [];
    for (const m of this.messages.values()) {
      if (out.length >= max) break;
      if (m.visibleAt > now) continue;
      if (this.opts.maxReceiveCount !== undefined && m.receiveCount >= this.opts.maxReceiveCount && this.opts.deadLetterQueue) {
        // Redrive: the (maxReceiveCount + 1)th receive moves the message instead.
        this.messages.delete(m.messageId);
        void this.opts.deadLetterQueue.send([
          { body: m.body, attributes: { ...m.attributes, RedrivenAfterReceives: String(m.receiveCount) } },
        ]);
        continue;
      }
      m.receiveCount++;
      if (m.receipt) this.byReceipt.delete(m.receipt);
      m.receipt = `${m.messageId}#${m.receiveCount}#${++this.seq}`;
      // Received messages go to the back, so the next receive finds visible ones first instead
      // of stepping over everything in flight.
      this.messages.delete(m.messageId);
      this.messages.set(m.messageId, m);
      this.byReceipt.set(m.receipt, m.messageId);
      m.visibleAt = now + this.opts.visibilityTimeoutSeconds * 1000;
      out.push({
        messageId: m.messageId,
        receipt: m.receipt,
        body: m.body,
        receiveCount: m.receiveCount,
        attributes: { ...m.attributes },
        sentAt: m.sentAt,
      });
    }
    return out;
  }

  private msUntilNextVisible(): number {
    const now = this.now();
    let next = Infinity;
    for (const m of this.messages.values()) next = Math.min(next, m.visibleAt - now);
    return Math.max(5, next);
  }

  private waitForChange(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.waiters.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const t = setTimeout(done, Math.max(1, ms));
      this.waiters.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }
}
