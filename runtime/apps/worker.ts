// The worker service: what ECS runs in the worker image and `jobs worker` runs locally.
// Reads and checks its configuration, then runs the worker with its maintenance loops (outbox
// relay, rescuer, dead-report sweeper, reconciler, pruner, scheduler), CloudWatch metrics and
// ECS task protection (and, replaced by a newer deployment, retirement), until SIGTERM: then it drains (DESIGN 10) and exits 0. A bad
// configuration exits 1 before touching anything.

import { ECSClient } from '@aws-sdk/client-ecs';
import { defaultWorkerId, ecsDeploymentProbe, ecsTask } from './ecs-task.ts';
import { checkSchema, runService, type SchemaWatch } from './entry.ts';
import { serviceCredentials } from './service-credentials.ts';
import { databaseSecretArnFromEnv, databaseTlsUnverified, databaseUrlFromEnv, ENV, intFromEnv, jobTimingsFromEnv } from '../config/env.ts';
import { retentionFromEnv } from '../config/retention.ts';
import {
  MAINTENANCE_QUERY_TIMEOUT_MS,
  MAX_PREFETCH,
  WORKER_MAINTENANCE_CONNECTIONS,
  workerPoolSize,
  workerQueryTimeoutMs,
} from '../config/rules.ts';
import { isLocalEndpoint, sqsFromEnv } from '../config/sqs.ts';
import { createPool, endPool, SERVICE_IDLE_TIMEOUT_MS } from '../db/pool.ts';
import { defaultRegistry } from '../handlers/index.ts';
import type { JobRegistry } from '../handlers/registry.ts';
import { checkSchedules, type ScheduleDefinition } from '../handlers/schedule.ts';
import { defaultSchedules } from '../handlers/schedules.ts';
import { announceScheduled, eventsEnabled, workerEventSink } from '../live/events.ts';
import { METRIC } from '../observability/metric-names.ts';
import { CloudWatchMetrics } from '../observability/cloudwatch.ts';
import { createLogger } from '../observability/log.ts';
import type { Metrics } from '../observability/metrics.ts';
import { withSqsFaults } from '../queue/fault-injection.ts';
import { JobClient } from '../store/client.ts';
import { sqsLanes } from '../queue/lanes.ts';
import { JobStore } from '../store/job-store.ts';
import { Publisher } from '../store/outbox.ts';
import { DEFAULT_RELAY, OutboxRelay } from '../store/outbox-relay.ts';
import { DeadReportSweeper, deadReportTimings } from '../maintenance/dead-reports.ts';
import { Pruner } from '../maintenance/pruner.ts';
import { Reconciler, reconcilerTimings } from '../maintenance/reconciler.ts';
import { Rescuer } from '../maintenance/rescuer.ts';
import { Scheduler } from '../maintenance/scheduler.ts';
import { cloudWatchGauge, DEFAULT_STUCK_CHECK_SECONDS, STUCK_ENV, StuckJobReporter, stuckThresholdsFromEnv } from '../oncall/stuck.ts';
import { DeploymentWatch, RETIRED_DRAIN_SECONDS } from '../worker/deployment-watch.ts';
import { TaskProtection } from '../worker/task-protection.ts';
import { Worker } from '../worker/worker.ts';

export interface RunningWorker {
  worker: Worker;
  /** Graceful stop: drain, release, close. Resolves when everything is closed. */
  shutdown(reason: string): Promise<void>;
  /** Settles if a schema check skipped at start (the database did not answer) finds it behind later (entry.ts). */
  schemaBehind: Promise<Error>;
}

export async function startWorkerService(
  env: Record<string, string | undefined> = process.env,
  ownRegistry?: JobRegistry,
  /** Default: the deployment's (handlers/schedules.ts) with the default registry, none with a registry of the caller's own. */
  ownSchedules?: readonly ScheduleDefinition[],
): Promise<RunningWorker> {
  const registry = ownRegistry ?? defaultRegistry();
  // The schedules go with the job types: a caller that brings its own types brings its own schedules.
  const schedules = ownSchedules ?? (ownRegistry ? [] : defaultSchedules(env));
  const log = createLogger('jobs-worker');
  // Everything from the environment first: a bad value stops the start before any connection.
  const timings = jobTimingsFromEnv(env);
  const databaseUrl = databaseUrlFromEnv(env);
  const secretArn = databaseSecretArnFromEnv(env);
  const tlsWarning = databaseTlsUnverified(env);
  if (tlsWarning) log.warn(tlsWarning);
  const sqs = sqsFromEnv(env, { dlq: true });
  const { queueUrl, endpoint, region } = sqs;
  // In ECS, the task's id first: a job's owner names the task to stop (ecs-task.ts).
  const task = await ecsTask(env);
  const workerId = env[ENV.workerId]?.trim() || defaultWorkerId(task?.taskId);
  // Short jobs go faster with a deeper prefetch; long ones want it small, so idle workers get them.
  const prefetch = intFromEnv(env, ENV.prefetch, timings.concurrency, 0, MAX_PREFETCH);
  const stuckThresholds = stuckThresholdsFromEnv(env);
  const stuckCheckSeconds = intFromEnv(env, STUCK_ENV.checkSeconds, DEFAULT_STUCK_CHECK_SECONDS, 1, 3600);
  const retention = retentionFromEnv(env);
  // A schedule whose type this worker does not know, or whose payload its type refuses, stops the start.
  checkSchedules(schedules, registry);

  const namespace = env[ENV.metricsNamespace]?.trim();
  const cloudwatch = namespace ? new CloudWatchMetrics(namespace, log) : null;
  const metrics: Metrics = cloudwatch ?? { count: () => undefined, timing: () => undefined };
  // A rotated password reaches new connections without a restart; failed reads are counted.
  const credentials = serviceCredentials({ secretArn, databaseUrl, log, metrics });
  const pool = createPool({
    url: databaseUrl,
    ...(credentials ? { credentials } : {}),
    max: workerPoolSize(timings.concurrency),
    platformQueryTimeoutMs: workerQueryTimeoutMs(timings),
    applicationName: `jobs-worker ${workerId}`.slice(0, 63),
    idleTimeoutMs: SERVICE_IDLE_TIMEOUT_MS,
    onError: (err) => log.warn({ err }, 'database connection dropped; it will be replaced'),
  });
  // The maintenance loops' pool, apart from the worker's: a slow SQS call inside the relay's or the
  // reconciler's transaction holds one of these, never a connection the heartbeat needs (rules.ts).
  const maintenancePool = createPool({
    url: databaseUrl,
    ...(credentials ? { credentials } : {}),
    max: WORKER_MAINTENANCE_CONNECTIONS,
    platformQueryTimeoutMs: MAINTENANCE_QUERY_TIMEOUT_MS,
    applicationName: `jobs-worker-maintenance ${workerId}`.slice(0, 63),
    idleTimeoutMs: SERVICE_IDLE_TIMEOUT_MS,
    onError: (err) => log.warn({ err }, 'database connection dropped; it will be replaced'),
  });
  let schema: SchemaWatch;
  try {
    schema = await checkSchema(pool, 'worker', log);
  } catch (err) {
    await Promise.all([endPool(pool), endPool(maintenancePool)]);
    throw err;
  }
  // Live view (JOBS_EVENTS=notify, local stack): worker events on a PostgreSQL NOTIFY channel.
  const events = workerEventSink(env, pool, workerId, { log, running: () => worker.runningJobs.length });
  // Each lane's queue and DLQ (the urgent lane shares the bulk ones when it has none of its own).
  // Chaos runs only (JOBS_FAULT_SQS_ERROR_RATE, refused without a local endpoint): fail some SQS calls.
  const lanes = sqsLanes(sqs, {
    wrap: (q) =>
      withSqsFaults(q, env, (op, when) =>
        events?.push({
          kind: 'fault',
          fault: 'sqs-error',
          workerId,
          at: new Date().toISOString(),
          detail: `${op}: ${when === 'before' ? 'request failed' : 'response lost'}`,
        }),
      ),
  });
  const queue = lanes.queue;
  const dlq = lanes.dlq!;
  const publisher = new Publisher(pool, queue, log);
  const protection = new TaskProtection(env.ECS_AGENT_URI, log);
  const worker = new Worker({
    pool,
    maintenancePool,
    queue,
    dlq,
    registry,
    publisher,
    timings,
    workerId,
    prefetch,
    log,
    metrics,
    onBusyChange: (busy) => protection.onBusyChange(busy),
    keepFinishedDays: retention.finishedDays,
    ...(events ? { onEvent: (e) => events.push(e) } : {}),
  });
  // Replaced by a newer deployment of the service: stop taking jobs, finish the running ones, go idle (deployment-watch.ts).
  const deployments = task?.cluster
    ? new DeploymentWatch({
        probe: ecsDeploymentProbe(new ECSClient({ region, requestHandler: { requestTimeout: 10_000 } }), task),
        log,
        intervalMs: intFromEnv(env, ENV.deploymentCheckSeconds, 30, 1, 3600) * 1000,
        onSuperseded: (s) => {
          log.info(
            { deployment: s.own, newer: s.primary, newerTasksRunning: s.primaryRunning, runningJobs: worker.runningJobs.length },
            'a newer deployment of the worker service is running: this task takes no more jobs, finishes the ones it runs and then lets ECS stop it',
          );
          void worker
            .stop(RETIRED_DRAIN_SECONDS)
            .then(() => {
              // Still held after the stop: handlers that ignored their abort (logged at error by the stop).
              const abandoned = worker.runningJobs;
              if (abandoned.length === 0) log.info('retired: every job handed on or finished; waiting for ECS to stop this task');
              else
                log.warn(
                  { abandoned },
                  'retired: every job handed on, but handlers that ignored their abort signal still run in this process; waiting for ECS to stop this task',
                );
            })
            .catch((err: unknown) => log.error({ err }, 'retiring this worker failed; ECS stops the task once its protection lapses'));
        },
      })
    : null;
  const store = new JobStore(maintenancePool);
  const relay = new OutboxRelay(maintenancePool, queue, log, DEFAULT_RELAY, metrics);
  const rescuer = new Rescuer(store, publisher, log, {
    // One heartbeat: a live owner never lets its lease run out (it renews every heartbeat), so
    // the grace only gives the returning message the first go. It is short because the message
    // can be gone: a long poll left open by a worker killed mid-receive still takes a message
    // from SQS (the emulator too) and hides it for the queue's visibility timeout. Measured: that
    // case resumed 2 s after the lease with a grace of 2 s; the rescuer and a returning message
    // racing is harmless (each is one conditional UPDATE; exactly one claims).
    graceSeconds: Math.max(timings.heartbeatSeconds, 1),
    intervalMs: Math.max(1000, Math.min(10_000, timings.heartbeatSeconds * 1000)),
    batchSize: 100,
    countDead: (n) => metrics.count(METRIC.jobsDeadLettered, n),
    onDead: async (job) => {
      await worker.reportDeadJob(job, 'lease-expired-final-attempt');
    },
  });

  // Dead jobs whose report never reached the DLQ (their worker died first, or the DLQ refused it): reported now.
  const deadReports = new DeadReportSweeper({
    pool: maintenancePool,
    report: (job, reason) => worker.reportDeadJob(job, reason),
    log,
    timings: deadReportTimings(timings),
  });

  // Messages the queue lost (a purge, expiry, a stray consumer): published again from the job table.
  const reconciler = new Reconciler({
    pool: maintenancePool,
    publisher,
    // Each lane's queue against its own jobs (lanes sharing a queue counted together).
    queues: queue.queues.map((q, i) => ({ lanes: q.lanes, countMessages: (signal) => lanes.sqsQueues[i]!.approximateCount(signal) })),
    log,
    metrics,
    // A local endpoint (the emulator) counts its messages exactly and at once: no lag to allow for
    // (SQS's own count lags a send by up to a minute, and a purge then heals a minute later).
    timings: reconcilerTimings(timings, { exactCount: isLocalEndpoint(endpoint) }),
  });

  // Stuck jobs (runtime/oncall/stuck.ts): counted once per interval, published as the JobsStuck gauge the stack alarms on.
  const stuck = new StuckJobReporter({
    pool: maintenancePool,
    registry,
    log,
    thresholds: stuckThresholds,
    intervalMs: stuckCheckSeconds * 1000,
    ...(namespace ? { publish: cloudWatchGauge(namespace, log) } : {}),
  });

  // What has ended leaves the tables once its retention is over (runtime/maintenance/pruner.ts).
  const pruner = new Pruner(maintenancePool, log, { retention });
  // Every task runs the schedules; the database makes each occurrence one job (maintenance/scheduler.ts).
  const scheduler = new Scheduler({
    pool: maintenancePool,
    client: new JobClient({ pool: maintenancePool, registry, publisher, defaultMaxAttempts: timings.maxAttempts }),
    schedules,
    log,
    metrics,
    ...(eventsEnabled(env)
      ? {
          onFired: (def, f) =>
            announceScheduled(
              maintenancePool,
              { schedule: def.name, occurrence: f.occurrence.label, job: f.job, late: f.late },
              workerId,
              log,
            ),
        }
      : {}),
  });

  cloudwatch?.start();
  credentials?.start();
  worker.start();
  relay.start();
  rescuer.start();
  deadReports.start();
  reconciler.start();
  stuck.start();
  pruner.start();
  scheduler.start();
  deployments?.start();
  log.info(
    {
      workerId,
      queueUrl,
      urgentQueueUrl: sqs.urgentQueueUrl ?? '(shares the bulk queue)',
      region,
      endpoint,
      timings,
      retention,
      metricsNamespace: namespace ?? null,
      taskProtection: protection.enabled,
      deploymentWatch: deployments !== null,
    },
    'worker service started',
  );

  let shuttingDown: Promise<void> | null = null;
  return {
    worker,
    schemaBehind: schema.behind,
    shutdown(reason: string) {
      shuttingDown ??= (async () => {
        log.info({ reason, drainSeconds: timings.drainSeconds }, 'shutting down');
        schema.stop();
        deployments?.stop();
        await worker.stop(timings.drainSeconds);
        await Promise.all([
          relay.stop(),
          rescuer.stop(),
          deadReports.stop(),
          reconciler.stop(),
          stuck.stop(),
          pruner.stop(),
          scheduler.stop(),
        ]);
        await publisher.flush();
        await protection.release();
        await events?.stop();
        // Before the last flush: a secret read under way is counted in it.
        await credentials?.stop();
        await cloudwatch?.stop();
        await Promise.all([endPool(pool), endPool(maintenancePool)]);
        log.info('shut down cleanly');
      })();
      return shuttingDown;
    },
  };
}

/** Entry point: start, and shut down gracefully on SIGTERM / SIGINT. */
export async function runWorker(env: Record<string, string | undefined> = process.env): Promise<void> {
  await runService('jobs worker', () => startWorkerService(env));
}
