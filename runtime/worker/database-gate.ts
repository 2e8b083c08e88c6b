// The worker's database gate: closed when the database cannot be used (a failover, a restart, a
// full connection table, a login refused), so the receive loop stops receiving and no message
// spends receives toward the DLQ meanwhile; opened again by a probe that succeeds. Closed on a
// refused login, the probe logs in afresh (db/pool.ts freshLogin): an idle pooled connection
// that logged in before the password changed would answer and open the gate too early. A gate
// that closes again each time soon after it opens (the probe answers, the claim does not: a full
// disk) stays closed longer each time.

import { freshLogin, timed } from '../db/pool.ts';
import { isAuthenticationFailure } from '../db/unavailable.ts';
import { METRIC } from '../observability/metric-names.ts';
import { sleep, type WorkerContext } from './held.ts';

/** A gate closed again this soon after it opened: the database answers the probe but not the work. */
const FLAP_WINDOW_MS = 30_000;

/**
 * The longest wait between probes. What this worker must do first when the database returns
 * waits for the gate: releasing, with no attempt spent, the jobs the outage took from it (claimed
 * ahead and never started, an attempt whose connection the failover cut, a claim whose answer
 * was lost). Every other task's rescuer and claims reclaim those jobs the moment they can, with
 * the attempt counted (on the last one, dead): probing a heartbeat apart (7.5–10 s deployed), the
 * owner came second nearly every time (review finding). A probe is one connection attempt.
 */
const PROBE_MAX_MS = 1_000;

export class DatabaseGate {
  private downSince: number | null = null;
  private loginRefused = false;
  /** When the gate last opened, and how many times in a row it closed again soon after. */
  private openedAt = 0;
  private flaps = 0;

  constructor(private readonly ctx: WorkerContext) {}

  get closed(): boolean {
    return this.downSince !== null;
  }

  /** Close it (the fetcher's claim, the heartbeat): no receiving until the database answers. */
  close(err: unknown): void {
    if (isAuthenticationFailure(err)) this.loginRefused = true;
    if (this.downSince !== null) return;
    this.downSince = Date.now();
    this.flaps = this.openedAt > 0 && this.downSince - this.openedAt < FLAP_WINDOW_MS ? this.flaps + 1 : 0;
    this.ctx.metrics.count(METRIC.databaseUnavailable);
    if (this.flaps > 0) {
      this.ctx.log.warn(
        { err, closedAgain: this.flaps, pauseMs: this.holdMs() },
        'the database answers, but the work failed again as unavailable (a full disk, out of memory, a read-only server): receiving pauses longer each time, up to the visibility timeout, so the waiting messages spend their receives no faster than without a gate',
      );
      return;
    }
    if (this.loginRefused)
      this.ctx.log.error(
        { err },
        "database refused this worker's login: receiving stops until a new login succeeds (the secret is read again at most every 10 s); running jobs keep their leases until they run out",
      );
    else
      this.ctx.log.warn(
        { err },
        'database unreachable: receiving stops until it answers; running jobs keep their leases until they run out',
      );
  }

  /**
   * While closed: one probe per call, with backoff up to PROBE_MAX_MS (a heartbeat if shorter).
   * True once it answers, and the gate is open again.
   */
  async probe(): Promise<boolean> {
    const { ctx } = this;
    // A probe (SELECT 1) proves a connection, not that a claim can write: closed again right after
    // it opened, the gate stays closed 1, 2, 4 … s before the probe, at most a visibility timeout.
    // Reopening at once would turn the waiting messages over each round trip, a receive each time.
    const held = this.downSince! + this.holdMs() - Date.now();
    if (held > 0) {
      await sleep(held, ctx.stopAc.signal);
      if (ctx.stopping) return false;
    }
    try {
      if (this.loginRefused) await freshLogin(ctx.opts.pool);
      else await ctx.opts.pool.query(timed(ctx.opts.pool, { text: 'SELECT 1' }));
    } catch (err) {
      if (this.loginRefused && isAuthenticationFailure(err)) ctx.metrics.count(METRIC.databaseLoginsRefused);
      const downMs = Date.now() - (this.downSince ?? Date.now());
      const wait = Math.min(PROBE_MAX_MS, ctx.opts.timings.heartbeatSeconds * 1000, 250 + downMs / 4) * (0.75 + Math.random() / 4);
      await sleep(wait, ctx.stopAc.signal);
      return false;
    }
    const downMs = Date.now() - this.downSince!;
    this.downSince = null;
    this.openedAt = Date.now();
    this.loginRefused = false;
    ctx.log.info({ downMs }, 'database answers again: receiving resumes');
    return true;
  }

  /** How long messages handed back meanwhile stay hidden: the gate's hold, in seconds (0 unless it keeps closing again). */
  handBackSeconds(): number {
    return Math.ceil(this.holdMs() / 1000);
  }

  /** How long the gate stays closed before its first probe: nothing, unless it is closing again soon after each opening. */
  private holdMs(): number {
    if (this.flaps === 0) return 0;
    return Math.min(this.ctx.opts.timings.visibilityTimeoutSeconds * 1000, 1000 * 2 ** (this.flaps - 1));
  }
}
