// A worker process as ECS runs one (runtime/apps/worker.ts: the worker service with its
// maintenance loops, production log level unless LOG_LEVEL says otherwise, configuration from
// the environment), knowing the benchmark's no-op and latency-probe types beside the
// deployment's. bench/deployed.ts starts several; each tells it when it is ready over the IPC
// channel (not by a log line, which a LOG_LEVEL above info would not print).
//
// The latency runs ask it, over the same channel, how its own event loop and garbage collector
// did over their steady window: 'watch' starts the window, 'report' ends it and answers
// { loop: { delayP99, delayMax, gcPausesOver5 } } (ms), as the benchmark measures its own.
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { runService } from '../runtime/apps/entry.ts';
import { startWorkerService } from '../runtime/apps/worker.ts';
import { JOB_DEFINITIONS } from '../runtime/handlers/index.ts';
import { JobRegistry } from '../runtime/handlers/registry.ts';
import { benchNoop, benchProbeInProcess } from './jobs.ts';
import { loopStats } from './loop-stats.ts';

await runService('bench worker', () =>
  startWorkerService(process.env, new JobRegistry([...JOB_DEFINITIONS, benchNoop, benchProbeInProcess])),
);

const loop = monitorEventLoopDelay({ resolution: 5 });
let gcPauses: number[] | null = null;
new PerformanceObserver((list) => {
  if (gcPauses) for (const e of list.getEntries()) if (e.duration > 5) gcPauses.push(Math.round(e.duration));
}).observe({ entryTypes: ['gc'] });
process.on('message', (m) => {
  if (m === 'watch') {
    loop.reset();
    loop.enable();
    gcPauses = [];
  } else if (m === 'report') {
    loop.disable();
    process.send?.({ loop: loopStats(loop, gcPauses ?? []) });
    gcPauses = null;
  }
});
process.send?.('ready');
