// ECS task scale-in protection through the agent's task-protection endpoint: while the worker
// holds jobs the task is protected, so a scale-in picks an idle task instead of killing a
// running job; when it goes idle, protection is dropped (after a short grace, so a worker that
// is idle for a moment between jobs does not flap). Outside ECS (no ECS_AGENT_URI) it does nothing.
//
// Protection is granted for a window (ExpiresInMinutes) and lapses at its end, so a worker that
// stays busy for longer than the window — a month-end costing run — renews it on its own timer:
// the worker only reports the idle/busy edges. A renewal goes out `renewEveryMs` after the last
// successful one (default: 10 minutes before the window ends); a failed PUT is retried after
// `retryMs`, well inside that margin, so an agent that fails for a few minutes costs nothing.
// Failures are never fatal: a task without protection is only as exposed as it was before.
import type { Logger } from '../observability/log.ts';

export interface TaskProtectionOptions {
  /** The protection window asked for on each renewal (the agent allows 1 to 2880). */
  expiresInMinutes: number;
  /** Idle this long before protection is dropped (a worker between two jobs keeps it). */
  idleGraceMs: number;
  /** Renew this long after the last successful PUT; default: 10 min before the window ends (half the window if that is 20 min or less). */
  renewEveryMs?: number;
  /** Retry a failed renewal after this long; default: 30 s, never later than renewEveryMs. */
  retryMs?: number;
  /** Give up on one PUT after this long (the next renewal tries again); default 10 s. */
  requestTimeoutMs?: number;
}

export const DEFAULT_TASK_PROTECTION: TaskProtectionOptions = { expiresInMinutes: 60, idleGraceMs: 5_000 };

export class TaskProtection {
  /** When the protection the agent last granted runs out (0: not protected, as far as we know). */
  private protectedUntil = 0;
  /** The worker holds jobs (or did within the idle grace): protection is wanted and renewed. */
  private wanted = false;
  /** release() was called: nothing is enabled again. */
  private released = false;
  private idleTimer: NodeJS.Timeout | null = null;
  private renewTimer: NodeJS.Timeout | null = null;
  private pending: Promise<void> = Promise.resolve();
  private readonly renewEveryMs: number;
  private readonly retryMs: number;
  private readonly requestTimeoutMs: number;

  constructor(
    private readonly agentUri: string | undefined,
    private readonly log: Logger,
    private readonly opts: TaskProtectionOptions = DEFAULT_TASK_PROTECTION,
    private readonly fetchFn: typeof fetch = fetch,
  ) {
    const windowMs = opts.expiresInMinutes * 60_000;
    this.renewEveryMs = opts.renewEveryMs ?? (windowMs > 20 * 60_000 ? windowMs - 10 * 60_000 : windowMs / 2);
    this.retryMs = Math.min(opts.retryMs ?? 30_000, this.renewEveryMs);
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 10_000;
  }

  get enabled(): boolean {
    return Boolean(this.agentUri);
  }

  /** When the granted protection runs out (epoch ms; 0 when not protected). For tests and logs. */
  get protectedUntilMs(): number {
    return this.protectedUntil;
  }

  /** Called by the worker whenever it starts or stops holding jobs. */
  onBusyChange(busy: boolean): void {
    if (!this.agentUri || this.released) return;
    if (busy) {
      if (this.idleTimer) clearTimeout(this.idleTimer);
      this.idleTimer = null;
      // Already wanted (busy again within the grace): the renewal timer is running.
      if (this.wanted) return;
      this.wanted = true;
      this.renew();
    } else if (this.wanted && !this.idleTimer) {
      this.idleTimer = setTimeout(() => {
        this.idleTimer = null;
        this.wanted = false;
        this.stopRenewing();
        this.enqueue(false);
      }, this.opts.idleGraceMs);
      this.idleTimer.unref();
    }
  }

  /** Drop protection now and stop renewing it (shutdown). */
  async release(): Promise<void> {
    if (!this.agentUri) return;
    this.released = true;
    this.wanted = false;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    this.stopRenewing();
    this.enqueue(false);
    await this.pending;
  }

  private renew(): void {
    this.stopRenewing();
    this.pending = this.pending.then(async () => {
      if (!this.wanted) return;
      const ok = await this.put(true);
      // Went idle (or released) while the PUT was out: the disable queued behind it wins.
      if (!this.wanted) return;
      this.renewTimer = setTimeout(
        () => {
          this.renewTimer = null;
          if (this.wanted) this.renew();
        },
        ok ? this.renewEveryMs : this.retryMs,
      );
      this.renewTimer.unref();
    });
  }

  private stopRenewing(): void {
    if (this.renewTimer) clearTimeout(this.renewTimer);
    this.renewTimer = null;
  }

  private enqueue(enabled: boolean): void {
    this.pending = this.pending.then(() => this.put(enabled)).then(() => undefined);
  }

  private async put(enabled: boolean): Promise<boolean> {
    // The agent counts the window from when it receives the PUT; counting from when it was sent
    // errs on the early side.
    const sentAt = Date.now();
    try {
      const res = await this.fetchFn(`${this.agentUri}/task-protection/v1/state`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(
          enabled ? { ProtectionEnabled: true, ExpiresInMinutes: this.opts.expiresInMinutes } : { ProtectionEnabled: false },
        ),
        signal: AbortSignal.timeout(this.requestTimeoutMs),
      });
      if (!res.ok) throw new Error(`task protection endpoint answered ${res.status}: ${(await res.text()).slice(0, 300)}`);
      this.protectedUntil = enabled ? sentAt + this.opts.expiresInMinutes * 60_000 : 0;
      this.log.debug(
        { enabled, protectedUntil: enabled ? new Date(this.protectedUntil).toISOString() : null },
        'task scale-in protection updated',
      );
      return true;
    } catch (err) {
      const still = this.protectedUntil > Date.now() ? new Date(this.protectedUntil).toISOString() : null;
      this.log.warn(
        { err, enabled, protectedUntil: still, ...(enabled && this.wanted ? { retryInMs: this.retryMs } : {}) },
        enabled
          ? `could not renew task scale-in protection; ${still ? `the last grant holds until ${still}` : 'the task is not protected'}; retrying in ${this.retryMs} ms`
          : 'could not drop task scale-in protection; it lapses at the end of its window',
      );
      return false;
    }
  }
}
