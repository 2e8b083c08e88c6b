// A maintenance pass that runs every few seconds until stopped (the outbox relay, the rescuer,
// the stuck-job reporter): one pass at a time, a failed pass logged and retried at the next
// interval, and stop() waits for the pass in progress so a process never exits mid-write.
import type { Logger } from '../observability/log.ts';

export class MaintenanceLoop<T> {
  private timer: NodeJS.Timeout | null = null;
  private stopped = true;
  private running: Promise<T> | null = null;

  constructor(
    private readonly name: string,
    private readonly pass: () => Promise<T>,
    private readonly log: Logger,
    private readonly intervalMs: number,
    /** Delay before the first pass (default: one interval). */
    private readonly firstDelayMs = intervalMs,
  ) {}

  start(): void {
    this.stopped = false;
    const tick = async () => {
      if (this.stopped) return;
      await this.runOnce().catch((err: unknown) => this.log.warn({ err }, `${this.name} pass failed; retrying at the next interval`));
      if (!this.stopped) this.timer = setTimeout(tick, this.intervalMs);
    };
    this.timer = setTimeout(tick, this.firstDelayMs);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running?.catch(() => undefined);
  }

  /** One pass now (waits for a pass already running, then runs its own). */
  async runOnce(): Promise<T> {
    while (this.running) await this.running.catch(() => undefined);
    this.running = this.pass();
    try {
      return await this.running;
    } finally {
      this.running = null;
    }
  }
}
