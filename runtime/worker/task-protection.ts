// ECS task scale-in protection through the agent's task-protection endpoint: while the worker
// holds jobs the task is protected, so a scale-in picks an idle task instead of killing a
// running job; when it goes idle, protection is dropped (after a short grace, so a worker that
// is idle for a moment between jobs does not flap). Outside ECS (no ECS_AGENT_URI) it does nothing.
import type { Logger } from '../observability/log.ts';

export class TaskProtection {
  private protectedUntil = 0;
  private idleTimer: NodeJS.Timeout | null = null;
  private pending: Promise<void> = Promise.resolve();

  constructor(
    private readonly agentUri: string | undefined,
    private readonly log: Logger,
    private readonly opts: { expiresInMinutes: number; idleGraceMs: number } = { expiresInMinutes: 60, idleGraceMs: 5_000 },
    private readonly fetchFn: typeof fetch = fetch,
  ) {}

  get enabled(): boolean {
    return Boolean(this.agentUri);
  }

  /** Called by the worker whenever it starts or stops holding jobs. */
  onBusyChange(busy: boolean): void {
    if (!this.agentUri) return;
    if (busy) {
      if (this.idleTimer) clearTimeout(this.idleTimer);
      this.idleTimer = null;
      // Renew before expiry: a job that runs longer than the protection window stays protected.
      if (Date.now() > this.protectedUntil - 10 * 60_000) this.enqueue(true);
    } else if (!this.idleTimer) {
      this.idleTimer = setTimeout(() => {
        this.idleTimer = null;
        this.enqueue(false);
      }, this.opts.idleGraceMs);
      this.idleTimer.unref();
    }
  }

  /** Drop protection now (shutdown). */
  async release(): Promise<void> {
    if (!this.agentUri) return;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.enqueue(false);
    await this.pending;
  }

  private enqueue(enabled: boolean): void {
    this.pending = this.pending.then(() => this.put(enabled));
  }

  private async put(enabled: boolean): Promise<void> {
    try {
      const res = await this.fetchFn(`${this.agentUri}/task-protection/v1/state`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(enabled ? { ProtectionEnabled: true, ExpiresInMinutes: this.opts.expiresInMinutes } : { ProtectionEnabled: false }),
      });
      if (!res.ok) throw new Error(`task protection endpoint answered ${res.status}: ${(await res.text()).slice(0, 300)}`);
      this.protectedUntil = enabled ? Date.now() + this.opts.expiresInMinutes * 60_000 : 0;
      this.log.debug({ enabled }, 'task scale-in protection updated');
    } catch (err) {
      this.log.warn({ err, enabled }, 'could not update task scale-in protection');
    }
  }
}
