// A worker process as ECS runs one (runtime/apps/worker.ts: the worker service with its
// maintenance loops, production log level unless LOG_LEVEL says otherwise, configuration from
// the environment), knowing the benchmark's no-op and latency-probe types beside the
// deployment's. bench/deployed.ts starts several; each tells it when it is ready over the IPC
// channel (not by a log line, which a LOG_LEVEL above info would not print).
import { runService } from '../runtime/apps/entry.ts';
import { startWorkerService } from '../runtime/apps/worker.ts';
import { JOB_DEFINITIONS } from '../runtime/handlers/index.ts';
import { JobRegistry } from '../runtime/handlers/registry.ts';
import { benchNoop, benchProbeInProcess } from './jobs.ts';

await runService('bench worker', () =>
  startWorkerService(process.env, new JobRegistry([...JOB_DEFINITIONS, benchNoop, benchProbeInProcess])),
);
process.send?.('ready');
