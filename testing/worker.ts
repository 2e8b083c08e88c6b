// The worker as the test kit drives it: the production Worker, plus the two ways a process stops
// that production code never chooses: killed (SIGKILL: it writes nothing more) and frozen
// (SIGSTOP, a long GC pause, a partition: its handlers may go on, but no heartbeat renews their
// leases, so another worker can take the jobs over while they run: zombies).

import { settledWithin } from '../runtime/support/settled.ts';

/** How long crash() waits for aborted handlers: well inside vitest's default 5 s test timeout, so the error names the job. */
const CRASH_GRACE_MS = 2_000;
import { Worker } from '../runtime/worker/worker.ts';

export class TestWorker extends Worker {
  /** The leases it held when it crashed or froze: nobody renews them any more. */
  private unrenewed: { id: string; attempt: number }[] | null = null;

  /**
   * Stop like a process killed with SIGKILL: no drain, no release, no further database or queue
   * writes; its leases simply stop being renewed and its messages come back after their
   * visibility timeout. A handler still running is aborted and whatever it does next is
   * discarded (its open transaction rolls back, as PostgreSQL does when a dead process's
   * connection drops). Resolves once every handler it held has returned; rejects, naming the
   * jobs, when one has not returned 2 s after its abort (it does not watch ctx.signal).
   */
  async crash(): Promise<void> {
    const { ctx } = this;
    this.unrenewed ??= this.heldTokens();
    ctx.stopping = true;
    ctx.stopAc.abort();
    ctx.receiveAc.abort();
    this.beat.halt();
    for (const h of ctx.held.values()) {
      h.released = true; // "released" here only means: this process will write nothing more
      ctx.abortHandler(h, new Error('worker crashed'));
    }
    for (const h of this.waiting.splice(0)) ctx.held.delete(h.job.id);
    this.wakeSlotWaiters();
    await this.loopPromise;
    const held = [...ctx.held.values()];
    if (
      !(await settledWithin(
        held.map((h) => h.done ?? Promise.resolve()),
        CRASH_GRACE_MS,
      ))
    ) {
      const jobs = held.filter((h) => ctx.held.get(h.job.id) === h).map((h) => `${h.job.type} ${h.job.id}`);
      throw new Error(
        `crash(): handlers still running ${CRASH_GRACE_MS / 1000} s after their abort signal: ${jobs.join(', ')}. A handler must stop when ctx.signal fires (pass it to fetch and queries, check it in loops), or a stopping worker leaves it running`,
      );
    }
  }

  /**
   * Stop the heartbeat, like a frozen process: the handlers go on when they can, and every write
   * they or this worker make later is fenced by the lease they no longer hold once another
   * worker has claimed the job. The worker does not know: nothing is aborted.
   */
  freeze(): void {
    this.unrenewed ??= this.heldTokens();
    this.beat.halt();
  }

  /** Killed or frozen: its leases are no longer renewed. */
  get dead(): boolean {
    return this.unrenewed !== null;
  }

  /** The leases (job id and attempt) it held when it crashed or froze, which nobody renews: kit.reclaim() lets them run out. */
  get unrenewedLeases(): readonly { id: string; attempt: number }[] {
    return this.unrenewed ?? [];
  }

  private heldTokens(): { id: string; attempt: number }[] {
    return [...this.ctx.held.values()].map((h) => ({ id: h.token.id, attempt: h.token.attempt }));
  }

  holds(jobId: string): boolean {
    return this.ctx.held.has(jobId);
  }

  /** Resolves when this worker no longer holds the job: its attempt ended and its outcome is written (or fenced out). */
  async settled(jobId: string): Promise<void> {
    for (let h = this.ctx.held.get(jobId); h; h = this.ctx.held.get(jobId)) {
      if (h.done) await h.done;
      else await new Promise((r) => setTimeout(r, 10)); // claimed, waiting for a handler slot
    }
  }

  /** Renew leases every heartbeat, without receiving from the queue: the kit hands the worker its messages. */
  startHeartbeat(): void {
    this.beat.start();
  }
}
