// How late a process's event loop ran and its garbage collector's long pauses, in ms: the
// benchmark's own process and a separate worker process (bench/worker-child.ts) report alike.
import type { IntervalHistogram } from 'node:perf_hooks';

export interface LoopStats {
  delayP99: number;
  delayMax: number;
  gcPausesOver5: number[];
}

/** From a monitorEventLoopDelay({ resolution: 5 }) histogram: each interval in ns, late = interval − 5 ms. */
export function loopStats(h: IntervalHistogram, gcPausesOver5: number[]): LoopStats {
  const late = (ns: number) => Math.max(0, ns / 1e6 - 5);
  return { delayP99: late(h.percentile(99)), delayMax: late(h.max), gcPausesOver5 };
}
