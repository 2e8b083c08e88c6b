// The API service: what ECS runs in the API image and `jobs api` runs locally. Reads and checks
// its configuration, then serves the HTTP API (server.ts) with an outbox relay beside it, so a
// job this process committed but could not publish (SQS hiccup, crash between COMMIT and send)
// is published within seconds (DESIGN 7). On SIGTERM it stops accepting connections, finishes
// the requests in flight, stops the relay, flushes the publisher and closes the pool, then exits 0.
// Like every worker task, it runs the schedules (maintenance/scheduler.ts): the database makes each
// occurrence one job, so schedules fire while any task is up.
// A bad configuration exits 1 before touching anything.

import { authWarnings } from './auth-warnings.ts';
import { checkSchema, runService, type SchemaWatch } from './entry.ts';

export { authWarnings } from './auth-warnings.ts';
import { serviceCredentials } from './service-credentials.ts';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { registerJobTypes } from '../store/job-types.ts';
import { JobClient } from '../store/client.ts';
import {
  databaseSecretArnFromEnv,
  databaseTlsUnverified,
  databaseUrlFromEnv,
  ENV,
  intFromEnv,
  jobTimingsFromEnv,
  redact,
} from '../config/env.ts';
import { keepFinishedDaysFromEnv } from '../config/retention.ts';
import { ConfigError, type RuleViolation } from '../config/rules.ts';
import { type SqsHttpClient, sqsFromEnv } from '../config/sqs.ts';
import { createPool, endPool, SERVICE_IDLE_TIMEOUT_MS, warmPool } from '../db/pool.ts';
import { defaultRegistry } from '../handlers/index.ts';
import type { JobRegistry } from '../handlers/registry.ts';
import { checkSchedules, type ScheduleDefinition } from '../handlers/schedule.ts';
import { defaultSchedules } from '../handlers/schedules.ts';
import { liveConfigFromEnv, startLive, type LiveConfig } from '../http/live.ts';
import { announceCancel, announceScheduled } from '../live/events.ts';
import { Scheduler } from '../maintenance/scheduler.ts';
import type { Job } from '../domain/job.ts';
import { CloudWatchMetrics } from '../observability/cloudwatch.ts';
import { createLogger, type Logger } from '../observability/log.ts';
import type { Metrics } from '../observability/metrics.ts';
import { ecsTask } from './ecs-metadata.ts';
import { sqsLanes } from '../queue/lanes.ts';
import type { JobQueue } from '../queue/types.ts';
import { Publisher } from '../store/outbox.ts';
import { DEFAULT_RELAY, OutboxRelay } from '../store/outbox-relay.ts';
import { createApiServer } from '../http/server.ts';
import { OpsRoutes } from '../http/oncall-routes.ts';
import { createOpsServices, opsConfigFromEnv, type OpsConfig } from '../oncall/services.ts';

type Env = Record<string, string | undefined>;

export const DEFAULT_API_PORT = 8080;
export const DEFAULT_API_POOL_SIZE = 10;
/** Longest a request may keep a stopping API waiting; ECS sends SIGKILL 30 s after SIGTERM by default. */
export const SHUTDOWN_GRACE_MS = 20_000;
/** An API statement that runs longer than this is a fault, not a slow answer: the pool is small. */
const STATEMENT_TIMEOUT_MS = 15_000;

export interface ApiConfig {
  databaseUrl: string;
  /** The database connections' application_name (`jobs connections`); default `jobs-api`, in ECS `jobs-api <task id>`. */
  applicationName?: string;
  queueUrl: string;
  /** The urgent lane's queue (JOBS_URGENT_QUEUE_URL); absent, the urgent lane shares queueUrl. */
  urgentQueueUrl?: string;
  region: string;
  sqsEndpoint?: string;
  /** JOBS_SQS_MAX_ATTEMPTS, when set. */
  sqsMaxAttempts?: number;
  /** JOBS_SQS_HTTP_CLIENT, when set: what sends the publisher's SQS calls. */
  sqsHttpClient?: SqsHttpClient;
  apiToken?: string;
  /** The on-call operator's token (API_OPERATOR_TOKEN): the on-call routes need it when set. */
  operatorToken?: string;
  port: number;
  poolSize: number;
  defaultMaxAttempts: number;
  /** Days a finished job is kept when its type does not say (JOBS_KEEP_FINISHED_DAYS). */
  defaultKeepFinishedDays?: number;
  /** The secret DATABASE_SECRET came from (DATABASE_SECRET_ARN): read again when a login is refused and hourly. */
  databaseSecretArn?: string;
  /**
   * CloudWatch namespace (JOBS_METRICS_NAMESPACE) for what the API counts: the reads of that secret
   * that failed, and its age (the "database secret unreadable" and "not rotated" alarms).
   */
  metricsNamespace?: string;
  /** Set when the database certificate will not be verified (DATABASE_SECRET without DATABASE_CA_FILE): logged at start. */
  databaseTlsWarning?: string;
}

/** The API's configuration from the environment. Every bad value is reported at once, each with its variable, value and rule. */
export function apiConfigFromEnv(env: Env): ApiConfig {
  const violations: RuleViolation[] = [];
  const check = <T>(read: () => T): T | undefined => {
    try {
      return read();
    } catch (err) {
      if (err instanceof ConfigError) {
        violations.push(...err.violations);
        return undefined;
      }
      throw err;
    }
  };
  const databaseUrl = check(() => databaseUrlFromEnv(env));
  const databaseSecretArn = check(() => databaseSecretArnFromEnv(env));
  const sqs = check(() => sqsFromEnv(env));
  const port = check(() => intFromEnv(env, ENV.port, DEFAULT_API_PORT, 0, 65_535));
  const poolSize = check(() => intFromEnv(env, ENV.apiPoolSize, DEFAULT_API_POOL_SIZE, 1, 200));
  // The attempt cap for jobs that set none: the same JOBS_* timings the worker checks.
  const timings = check(() => jobTimingsFromEnv(env));
  const keepFinishedDays = check(() => keepFinishedDaysFromEnv(env));
  const apiToken = env[ENV.apiToken] || undefined;
  if (apiToken !== undefined && !/^[\x21-\x7e]+$/.test(apiToken)) {
    // Never echo a secret: name the rule only.
    violations.push({
      rule: 'api-token-printable',
      message: `${ENV.apiToken} must be printable ASCII without spaces (it travels in an Authorization header)`,
    });
  }
  const operatorToken = env[ENV.apiOperatorToken] || undefined;
  if (operatorToken !== undefined && !/^[\x21-\x7e]+$/.test(operatorToken)) {
    violations.push({
      rule: 'api-operator-token-printable',
      message: `${ENV.apiOperatorToken} must be printable ASCII without spaces (it travels in an Authorization header)`,
    });
  } else if (operatorToken !== undefined && operatorToken === apiToken) {
    // The same value would let every ERP client use the on-call routes: refuse rather than pretend.
    violations.push({
      rule: 'api-operator-token-distinct',
      message: `${ENV.apiOperatorToken} must differ from ${ENV.apiToken}: the on-call routes are closed to the ERP clients' token`,
    });
  }
  if (violations.length > 0) throw new ConfigError('environment', violations);
  const tlsWarning = databaseTlsUnverified(env);
  const metricsNamespace = env[ENV.metricsNamespace]?.trim();
  return {
    databaseUrl: databaseUrl!,
    queueUrl: sqs!.queueUrl,
    ...(sqs!.urgentQueueUrl ? { urgentQueueUrl: sqs!.urgentQueueUrl } : {}),
    region: sqs!.region,
    ...(sqs!.endpoint ? { sqsEndpoint: sqs!.endpoint } : {}),
    ...(sqs!.maxAttempts !== undefined ? { sqsMaxAttempts: sqs!.maxAttempts } : {}),
    ...(sqs!.httpClient !== undefined ? { sqsHttpClient: sqs!.httpClient } : {}),
    ...(apiToken ? { apiToken } : {}),
    ...(operatorToken ? { operatorToken } : {}),
    port: port!,
    poolSize: poolSize!,
    defaultMaxAttempts: timings!.maxAttempts,
    defaultKeepFinishedDays: keepFinishedDays!,
    ...(tlsWarning ? { databaseTlsWarning: tlsWarning } : {}),
    ...(databaseSecretArn ? { databaseSecretArn } : {}),
    ...(metricsNamespace ? { metricsNamespace } : {}),
  };
}

export interface RunningApi {
  server: http.Server;
  /** The port it listens on (PORT, or the ephemeral one for PORT=0). */
  port: number;
  /** Graceful stop: no new connections, in-flight requests finish, relay stopped, publisher flushed, pool closed. */
  shutdown(reason: string): Promise<void>;
  /** Settles if a schema check skipped at start (the database did not answer) finds it behind later (entry.ts). */
  schemaBehind: Promise<Error>;
}

export interface ApiDeps {
  /** The queue to publish to; default: SqsQueue on the configured URL (tests pass a MemoryQueue). */
  queue?: JobQueue;
  registry?: JobRegistry;
  log?: Logger;
  /** Interface to listen on; default all. */
  host?: string;
  shutdownGraceMs?: number;
  /** Serve the live view (GET /, /live/*) with this configuration; absent: no live view. */
  live?: LiveConfig;
  /** The on-call routes' settings (runtime/http/oncall-routes.ts); default: no DLQ, default stuck thresholds. */
  ops?: OpsConfig;
  /** The schedules this task runs and on-call sees; default SCHEDULES (runtime/handlers/schedules.ts), none with a registry of the caller's own. */
  schedules?: readonly ScheduleDefinition[];
  /** Where the API's metrics go; default CloudWatch when config.metricsNamespace is set, else nowhere. */
  metrics?: Metrics;
}

export async function startApiService(config: ApiConfig, deps: ApiDeps = {}): Promise<RunningApi> {
  const log = deps.log ?? createLogger('jobs-api');
  const registry = deps.registry ?? defaultRegistry();
  // A schedule whose type is not registered, or whose payload its type refuses, stops the start.
  // The schedules go with the job types: a caller that brings its own types brings its own schedules.
  const schedules = deps.schedules ?? (deps.registry ? [] : defaultSchedules({}));
  checkSchedules(schedules, registry);
  const cloudwatch = !deps.metrics && config.metricsNamespace ? new CloudWatchMetrics(config.metricsNamespace, log) : null;
  const metrics = deps.metrics ?? cloudwatch;
  cloudwatch?.start();
  // A rotated password reaches new connections without a restart; failed reads are counted.
  const credentials = serviceCredentials({ secretArn: config.databaseSecretArn, databaseUrl: config.databaseUrl, log, metrics });
  credentials?.start();
  const pool = createPool({
    url: config.databaseUrl,
    ...(credentials ? { credentials } : {}),
    max: config.poolSize,
    applicationName: config.applicationName ?? 'jobs-api',
    statementTimeoutMs: STATEMENT_TIMEOUT_MS,
    // A server gone without a reset answers nothing: the platform's statements give up 5 s after
    // the server's own timeout would have (db/pool.ts platformQueryTimeoutMs), freeing the connection.
    platformQueryTimeoutMs: STATEMENT_TIMEOUT_MS + 5_000,
    idleTimeoutMs: SERVICE_IDLE_TIMEOUT_MS,
    onError: (err) => log.warn({ err }, 'database connection dropped; it will be replaced'),
  });
  let schema: SchemaWatch;
  try {
    schema = await checkSchema(pool, 'API', log);
  } catch (err) {
    await endPool(pool);
    await credentials?.stop();
    await cloudwatch?.stop();
    throw err;
  }
  // Each lane's queue: an urgent job's message goes to the urgent queue (the bulk one when it has none).
  const sqsSettings = {
    queueUrl: config.queueUrl,
    ...(config.urgentQueueUrl ? { urgentQueueUrl: config.urgentQueueUrl } : {}),
    region: config.region,
    ...(config.sqsEndpoint ? { endpoint: config.sqsEndpoint } : {}),
    ...(config.sqsMaxAttempts !== undefined ? { maxAttempts: config.sqsMaxAttempts } : {}),
    ...(config.sqsHttpClient !== undefined ? { httpClient: config.sqsHttpClient } : {}),
  };
  const queue = deps.queue ?? sqsLanes(sqsSettings).queue;
  const publisher = new Publisher(pool, queue, log);
  const relay = new OutboxRelay(pool, queue, log, DEFAULT_RELAY, metrics ?? undefined);
  const client = new JobClient({
    pool,
    registry,
    publisher,
    defaultMaxAttempts: config.defaultMaxAttempts,
    ...(config.defaultKeepFinishedDays ? { defaultKeepFinishedDays: config.defaultKeepFinishedDays } : {}),
    // The live view's feed shows a cancel and who asked (only when its event bus is on).
    ...(deps.live?.events ? { onCancelled: (job: Job) => announceCancel(pool, job, 'api', log) } : {}),
  });
  const live = deps.live
    ? await startLive(deps.live, {
        databaseUrl: config.databaseUrl,
        ...(credentials ? { credentials } : {}),
        pool,
        store: client.store,
        log,
        // Queue depths only against real SQS (tests that pass a queue have none to ask).
        ...(deps.queue ? {} : { sqs: sqsSettings }),
      })
    : null;
  // On-call routes (issue 7): dead jobs, poison messages, stuck jobs from the database; the DLQ when its URL is given.
  const ops = new OpsRoutes(
    createOpsServices({
      pool,
      registry,
      publisher,
      queue,
      log,
      queueUrl: config.queueUrl,
      region: config.region,
      ...(config.sqsEndpoint ? { endpoint: config.sqsEndpoint } : {}),
      ...(deps.ops?.dlqUrl ? { dlqUrl: deps.ops.dlqUrl } : {}),
      ...(config.urgentQueueUrl ? { urgentQueueUrl: config.urgentQueueUrl } : {}),
      ...(deps.ops?.urgentDlqUrl ? { urgentDlqUrl: deps.ops.urgentDlqUrl } : {}),
      ...(deps.ops ? { stuck: deps.ops.stuck } : {}),
      client,
      schedules,
    }),
  );
  const scheduler = new Scheduler({
    pool,
    client,
    schedules,
    log,
    ...(deps.live?.events
      ? {
          onFired: (def, f) =>
            announceScheduled(pool, { schedule: def.name, occurrence: f.occurrence.label, job: f.job, late: f.late }, 'api', log),
        }
      : {}),
  });
  const server = createApiServer({
    pool,
    client,
    registry,
    log,
    ...(config.apiToken ? { apiToken: config.apiToken } : {}),
    ...(config.operatorToken ? { operatorToken: config.operatorToken } : {}),
    ...(live ? { live: live.routes } : {}),
    ops,
  });

  // The connections the first requests need, before the load balancer sends any (best effort: a
  // database that does not answer within 5 s is connected to on demand, as before).
  const warmed = await warmPool(pool, config.poolSize);
  log.debug({ opened: warmed.opened, ms: Math.round(warmed.ms) }, 'database connections opened');
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ port: config.port, ...(deps.host ? { host: deps.host } : {}) }, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    schema.stop();
    await live?.stop();
    await credentials?.stop();
    await cloudwatch?.stop();
    await pool.end().catch(() => undefined);
    throw err;
  }
  relay.start();
  // What SQL callers may enqueue (jobs.enqueue): this build's types. Not awaited: serving does not wait on it.
  registerJobTypes(
    pool,
    registry,
    {
      maxAttempts: config.defaultMaxAttempts,
      ...(config.defaultKeepFinishedDays ? { keepFinishedDays: config.defaultKeepFinishedDays } : {}),
    },
    'api',
  ).catch((err) => log.warn({ err }, 'could not register the job types for jobs.enqueue; those registered before stay'));
  scheduler.start();
  const port = (server.address() as AddressInfo).port;
  for (const warning of authWarnings(config)) log.warn(warning);
  if (config.databaseTlsWarning) log.warn(config.databaseTlsWarning);
  log.info(
    {
      port,
      queueUrl: config.queueUrl,
      urgentQueueUrl: config.urgentQueueUrl ?? null,
      region: config.region,
      sqsEndpoint: config.sqsEndpoint ?? null,
      database: redact(config.databaseUrl),
      poolSize: config.poolSize,
      auth: Boolean(config.apiToken),
      operatorAuth: Boolean(config.operatorToken),
    },
    'api service started',
  );

  const graceMs = deps.shutdownGraceMs ?? SHUTDOWN_GRACE_MS;
  let shuttingDown: Promise<void> | null = null;
  return {
    server,
    port,
    schemaBehind: schema.behind,
    shutdown(reason: string) {
      shuttingDown ??= (async () => {
        schema.stop();
        log.info({ reason, graceMs }, 'shutting down: no new connections, finishing requests in flight');
        // Live view streams never end by themselves: close them first so they do not hold the drain.
        await live?.stop();
        // close() stops accepting and closes idle keep-alive connections; busy ones close after
        // their response (the server marks responses `connection: close` once it is not listening).
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        const idle = setInterval(() => server.closeIdleConnections(), 250);
        let timer: NodeJS.Timeout | undefined;
        const late = await Promise.race([
          closed.then(() => false),
          new Promise<boolean>((resolve) => {
            timer = setTimeout(() => resolve(true), graceMs);
          }),
        ]);
        clearInterval(idle);
        clearTimeout(timer);
        if (late) {
          log.warn({ graceMs }, 'requests still in flight after the grace period; closing their connections');
          server.closeAllConnections();
          await closed;
        }
        await Promise.all([relay.stop(), scheduler.stop()]);
        await publisher.drain();
        await credentials?.stop();
        await cloudwatch?.stop();
        await endPool(pool);
        log.info('shut down cleanly');
      })();
      return shuttingDown;
    },
  };
}

/** Entry point (`jobs api`, the API image): start, and shut down gracefully on SIGTERM / SIGINT. Resolves once listening. */
export function runApi(env: Env = process.env): Promise<RunningApi> {
  return runService('jobs api', async () => {
    const config = apiConfigFromEnv(env);
    // In ECS, the task's id names its connections (`jobs connections`: which task holds how many).
    const taskId = (await ecsTask(env))?.taskId;
    return startApiService(taskId ? { ...config, applicationName: `jobs-api ${taskId}` } : config, {
      live: liveConfigFromEnv(env),
      ops: opsConfigFromEnv(env),
      schedules: defaultSchedules(env),
    });
  });
}
