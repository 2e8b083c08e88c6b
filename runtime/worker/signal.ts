// A wake-up without a value: whoever waits when it fires goes on (the fetcher's loop, its hand-backs).

/** Wakes whoever waits on it, each time it fires. */
export class Signal {
  private waiters: (() => void)[] = [];
  wait(): Promise<void> {
    return new Promise<void>((r) => this.waiters.push(r));
  }
  fire(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
}
