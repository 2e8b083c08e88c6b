// The benchmark's own job type, shared by the in-bench worker and the worker processes it starts
// (bench/worker-child.ts): a handler that does nothing, so what is measured is the platform.
import { defineJob } from '../runtime/handlers/types.ts';

export const benchNoop = defineJob<unknown, null>({
  type: 'bench.noop',
  description: 'does nothing',
  parse: (p) => p,
  run: async () => null,
});
