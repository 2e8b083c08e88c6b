// A worker process as ECS runs one (runtime/apps/worker.ts: the worker service with its
// maintenance loops, production log level unless LOG_LEVEL says otherwise, configuration from
// the environment), knowing the benchmark's no-op type beside the deployment's. bench/deployed.ts
// starts several and reads when each is ready from its 'worker service started' log line.
import { runService } from '../runtime/apps/entry.ts';
import { startWorkerService } from '../runtime/apps/worker.ts';
import { JOB_DEFINITIONS } from '../runtime/handlers/index.ts';
import { JobRegistry } from '../runtime/handlers/registry.ts';
import { benchNoop } from './jobs.ts';

await runService('bench worker', () => startWorkerService(process.env, new JobRegistry([...JOB_DEFINITIONS, benchNoop])));
