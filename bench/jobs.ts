// The benchmark's own job type, shared by the in-bench worker and the worker processes it starts
// (bench/worker-child.ts): a handler that does nothing, so what is measured is the platform.
import { defineJob } from '../runtime/handlers/types.ts';

export const benchNoop = defineJob<unknown, null>({
  type: 'bench.noop',
  description: 'does nothing',
  parse: (p) => p,
  run: async () => null,
});

/**
 * The latency probe as a worker process runs it (bench/worker-child.ts): it tells the benchmark
 * over the IPC channel when its handler started, on the wall clock in ms (sub-millisecond: the
 * same machine's clock in both processes), so enqueue → start spans the two processes.
 */
export const benchProbeInProcess = defineJob<{ seq: number }, null>({
  type: 'bench.probe',
  description: 'reports when it started',
  parse: (p) => p as { seq: number },
  run: async (p) => {
    process.send?.({ probe: p.seq, at: performance.timeOrigin + performance.now() });
    return null;
  },
});
