// The worker's database gate: closed when the database cannot be used (a failover, a restart, a
// full connection table, a login refused), so the receive loop stops receiving and no message
// spends receives toward the DLQ meanwhile; opened again by a probe that succeeds. Closed on a
// refused login, the probe logs in afresh (db/pool.ts freshLogin): an idle pooled connection
// that logged in before the password changed would answer and open the gate too early.

import { freshLogin } from '../db/pool.ts';
import { isAuthenticationFailure } from '../db/unavailable.ts';
import { METRIC } from '../observability/metric-names.ts';
import { sleep, type WorkerContext } from './held.ts';

export class DatabaseGate {
  private downSince: number | null = null;
  private loginRefused = false;

  constructor(private readonly ctx: WorkerContext) {}

  get closed(): boolean {
    return this.downSince !== null;
  }

  /** Close it (the fetcher's claim, the heartbeat): no receiving until the database answers. */
  close(err: unknown): void {
    if (isAuthenticationFailure(err)) this.loginRefused = true;
    if (this.downSince !== null) return;
    this.downSince = Date.now();
    this.ctx.metrics.count(METRIC.databaseUnavailable);
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
   * While closed: one probe per call, with backoff (capped at a heartbeat, so a returning
   * database is noticed within one). True once it answers, and the gate is open again.
   */
  async probe(): Promise<boolean> {
    const { ctx } = this;
    try {
      if (this.loginRefused) await freshLogin(ctx.opts.pool);
      else await ctx.opts.pool.query('SELECT 1');
    } catch (err) {
      if (this.loginRefused && isAuthenticationFailure(err)) ctx.metrics.count(METRIC.databaseLoginsRefused);
      const downMs = Date.now() - (this.downSince ?? Date.now());
      const wait = Math.min(ctx.opts.timings.heartbeatSeconds * 1000, 250 + downMs / 4) * (0.75 + Math.random() / 4);
      await sleep(wait, ctx.stopAc.signal);
      return false;
    }
    const downMs = Date.now() - this.downSince!;
    this.downSince = null;
    this.loginRefused = false;
    ctx.log.info({ downMs }, 'database answers again: receiving resumes');
    return true;
  }
}
