// The per-environment parameters of the job platform: every knob a platform engineer turns
// lives here, typed, in one object per environment. `resolveConfig()` checks an environment's
// config before a single construct exists: the job timings go through the same rules the
// worker applies at start (runtime/config/rules.ts), and the connection budget is checked
// against the database instance class. A bad combination fails `cdk synth` with the values,
// the rule and the knob to turn.

import { DEFAULT_RETENTION, retentionViolations, type Retention } from '../runtime/config/retention.ts';
import { SQS_HTTP_CLIENTS } from '../runtime/config/sqs.ts';
import { DEFAULT_STUCK_THRESHOLDS, MAX_STUCK_SECONDS, type StuckThresholds } from '../runtime/config/stuck-thresholds.ts';
import {
  assertJobTimings,
  ConfigError,
  DEFAULT_JOB_TIMINGS,
  MAX_PREFETCH,
  MAX_WAITING_MESSAGE_AGE_SECONDS,
  workerConnections,
  type JobTimings,
  type RuleViolation,
} from '../runtime/config/rules.ts';

export const ENVIRONMENT_NAMES = ['dev', 'staging', 'prod'] as const;
export type EnvironmentName = (typeof ENVIRONMENT_NAMES)[number];

/** CloudWatch Logs retention values the platform uses (a subset of what CloudWatch accepts). */
export type LogRetentionDays = 7 | 14 | 30 | 90 | 180 | 365;

export interface NetworkConfig {
  /** NAT gateways for the tasks' and the bootstrap's egress (ECR, SQS, Secrets Manager, CloudWatch). One per AZ for zone-independent egress. */
  natGateways: number;
  /**
   * Interface endpoints for SQS, ECR (api, dkr), Secrets Manager, CloudWatch (metrics) and Logs,
   * with the services' and the bootstrap's HTTPS egress narrowed to them and to the S3 gateway
   * endpoint (present in every environment). Costs per endpoint-hour per AZ, so prod only.
   */
  interfaceEndpoints: boolean;
}

export interface QueueConfig {
  /** How long the job queue keeps an undelivered message. The database is the source of truth; the relay re-publishes what the queue loses. */
  retentionDays: number;
  /** How long the DLQ keeps a dead letter: must be longer than the queue's so a redriven message never expires before on-call sees it. SQS caps it at 14. */
  deadLetterRetentionDays: number;
  /**
   * What the services send their SQS calls (receive, delete, visibility, send) through
   * (JOBS_SQS_HTTP_CLIENT): unset, the platform's own HTTP/1.1 client; `node`, node:http, should
   * the platform's ever misread an endpoint (README "Configuration").
   */
  httpClient?: 'platform' | 'node';
}

export interface DatabaseConfig {
  /** RDS instance class without the `db.` prefix, e.g. `t4g.micro`. Must be in INSTANCE_MEMORY_GIB (the connection budget needs its memory). */
  instanceClass: string;
  /**
   * PostgreSQL version, major.minor, pinned: automatic minor upgrades are off, so the template
   * says what runs. Upgrade by changing it here (in a maintenance window; docs/deploy.md).
   */
  engineVersion: string;
  /** Daily automated backup window, UTC, `hh:mm-hh:mm` (at least 30 minutes, not overlapping the maintenance window). */
  backupWindow: string;
  /** Weekly maintenance window, UTC, `ddd:hh:mm-ddd:hh:mm`. */
  maintenanceWindow: string;
  /** Performance Insights with its free 7-day retention (staging, prod). */
  performanceInsights: boolean;
  /** Statements slower than this are logged (`log_min_duration_statement`), with lock waits past deadlock_timeout (`log_lock_waits`). */
  slowStatementMilliseconds: number;
  /**
   * The services' connections end a transaction left idle this long
   * (`idle_in_transaction_session_timeout`, set through PGOPTIONS on the API and worker tasks
   * only). Far above any gap inside a job's transaction; no statement_timeout for the worker.
   * docs/deploy.md#database-diagnostics says why.
   */
  idleInTransactionTimeoutSeconds: number;
  allocatedStorageGiB: number;
  /** Storage autoscaling ceiling. */
  maxAllocatedStorageGiB: number;
  multiAz: boolean;
  /**
   * Days between rotations of the services' database password (lib/password-rotation.ts:
   * alternating users, no restart); 1–365. The first rotation runs when the schedule is created.
   */
  passwordRotationDays: number;
  /** Automated backup retention; 0 disables automated backups. */
  backupRetentionDays: number;
  deletionProtection: boolean;
  /** What CloudFormation does with the instance when it leaves the stack. */
  removal: 'snapshot' | 'destroy';
  /** Overrides the max_connections estimate from the instance's memory (set it when a parameter group pins max_connections). */
  maxConnections?: number;
}

export interface ServiceSizing {
  /** Fargate task CPU units (256 = 0.25 vCPU). */
  cpu: 256 | 512 | 1024 | 2048 | 4096;
  memoryMiB: number;
  minTasks: number;
  maxTasks: number;
  /**
   * ECS deployment maximumPercent: during a rolling deployment old and new tasks run side by side,
   * so the connection budget counts maxTasks × this / 100.
   */
  deploymentMaxPercent: number;
}

export interface ApiConfig extends ServiceSizing {
  /** Connections one API task opens (API_POOL_SIZE). */
  poolSize: number;
  /**
   * ACM certificate ARN for the load balancer's HTTPS listener (443, TLS 1.2+; port 80 only
   * redirects). `-c apiCertificateArn=ARN` on the command line wins over this.
   */
  certificateArn?: string;
  /** Serve plain HTTP when there is no certificate (dev only); otherwise synth refuses without one. */
  allowPlainHttp: boolean;
  /** Load balancer deletion protection (prod): `cdk destroy` of the services stack stops at it. */
  deletionProtection: boolean;
}

export interface WorkerConfig extends ServiceSizing {
  /**
   * Jobs a task claims ahead of a free handler slot (JOBS_PREFETCH; default: jobTimings.concurrency).
   * Prefetched jobs are leased and heartbeated, and released at once on SIGTERM. Deep (hundreds)
   * for floods of short jobs — it is what the benchmark's top figure uses; low for long ERP
   * jobs, so an idle task gets the next one instead of a busy task sitting on it.
   */
  prefetch?: number;
  /** Target tracking keeps visible messages ÷ running tasks near this value. */
  backlogPerTaskTarget: number;
  scaleOutCooldownSeconds: number;
  scaleInCooldownSeconds: number;
}

export interface AlarmConfig {
  /** E-mail addresses subscribed to the on-call topic (each confirms by mail once). */
  emails: string[];
  /**
   * HTTPS endpoints subscribed to the on-call topic: a pager's integration URL (PagerDuty's or
   * Opsgenie's Amazon CloudWatch integration, an incident webhook), which confirms the subscription
   * itself. Its URL usually carries the integration's key: give it on the command line
   * (`-c alarmEndpoints=https://…`), not here in git.
   */
  httpsEndpoints?: string[];
  /**
   * The job queue's oldest message older than this alarms. Includes running jobs (their message
   * stays until they finish) and their waits: at least the longest job + stuckJobs.pendingSeconds
   * + 30 min (checked: queueAgeBelowJobRuns).
   */
  queueOldestMessageAgeSeconds: number;
  /** A dead letter older than this alarms: nobody has triaged the DLQ. */
  deadLetterOldestMessageAgeSeconds: number;
  /** Lease losses per 15 minutes at which on-call is paged (a crashed worker costs a few). */
  leasesLostPer15Minutes: number;
  /** Jobs dead-lettered per 5 minutes at which on-call is paged. */
  jobsDeadLetteredPer5Minutes: number;
  /** Load balancer 5xx responses per 5 minutes at which on-call is paged. */
  api5xxPer5Minutes: number;
  /** Database CPU (%) sustained for 15 minutes at which on-call is paged. */
  databaseCpuPercent: number;
  /**
   * Free storage below this share of the allocated storage for 15 minutes pages on-call: below RDS
   * storage autoscaling's own trigger (10 % for 5 minutes), so it pages when autoscaling did not
   * keep up or hit its ceiling, not at the moment it is about to act (stack review).
   */
  databaseFreeStorageFraction: number;
  /** Freeable memory below this share of the instance class's memory pages on-call. */
  databaseFreeableMemoryFraction: number;
  /** Minutes the worker may sit at worker.maxTasks with more than backlogPerTaskTarget messages per task before on-call is paged. */
  workerAtMaximumMinutes: number;
  /**
   * When a job counts as stuck (JobsStuck alarm, `jobs stuck`, GET /v1/stuck-jobs), given to both
   * services as JOBS_STUCK_RUNNING_SECONDS / JOBS_STUCK_PENDING_SECONDS: running longer than
   * runningSeconds (for a job type without its own expectedMaxSeconds), or due and not picked up
   * for longer than pendingSeconds.
   */
  stuckJobs: StuckThresholds;
}

export interface SecretReadersConfig {
  /**
   * Who besides the API may read the API token (to configure the ERP clients) and who besides
   * the API may read the operator token (on-call): IAM role names, `*` wildcards allowed (SSO
   * roles carry a suffix), in the deploying account. The secrets' resource policies deny
   * secretsmanager:GetSecretValue to everyone else. docs/deploy.md#secrets.
   */
  apiTokenRoleNames: string[];
  operatorTokenRoleNames: string[];
}

export interface EnvironmentConfig {
  envName: EnvironmentName;
  /** Prefix of the stack names: `<prefix>-Data`, `<prefix>-Services`. */
  stackPrefix: string;
  /** Termination protection on the stateful stack (database, queues). */
  terminationProtection: boolean;
  /** Retention of the services', the bootstrap's, the database's and the VPC flow logs' log groups. */
  logRetentionDays: LogRetentionDays;
  /** Keep the log groups when their stack is deleted (prod: logs are evidence). */
  retainLogs: boolean;
  /** Days the load balancer's access logs are kept. */
  accessLogRetentionDays: number;
  network: NetworkConfig;
  queues: QueueConfig;
  database: DatabaseConfig;
  jobTimings: JobTimings;
  /**
   * How long the job table keeps what has ended, given to both services as JOBS_KEEP_*: finished
   * jobs (for a type without its own keepFinishedDays), discarded dead jobs, poison messages' records
   * and the operators' trail, in days. The workers' pruner deletes what is older. README "Retention".
   */
  jobRetention: Retention;
  api: ApiConfig;
  worker: WorkerConfig;
  alarms: AlarmConfig;
  secretReaders: SecretReadersConfig;
}

/** The PostgreSQL minor every environment runs (pinned; see DatabaseConfig.engineVersion). */
export const POSTGRES_VERSION = '17.9';

/**
 * One hour: a job's transaction opens at its handler's first query and stays open until the
 * completion commits, so it may legitimately sit idle while the handler computes between writes.
 * An hour of silence is far beyond that (the stuck-job threshold, alarms.stuckJobs.runningSeconds,
 * is an hour too), and still ends what only a frozen process leaves behind: a transaction that
 * holds row locks and keeps VACUUM from cleaning the job table.
 */
export const IDLE_IN_TRANSACTION_TIMEOUT_SECONDS = 3_600;

const DATABASE_AND_SCALING_ALARMS = {
  databaseCpuPercent: 80,
  databaseFreeStorageFraction: 0.05,
  databaseFreeableMemoryFraction: 0.1,
  workerAtMaximumMinutes: 15,
} as const;

/**
 * Who may read the tokens besides the API (docs/deploy.md#secrets): IAM Identity Center permission
 * sets' roles by default. Change them to the roles your organisation uses before the first deploy.
 */
const SECRET_READERS: SecretReadersConfig = {
  apiTokenRoleNames: ['AWSReservedSSO_ErpJobsAdmin_*'],
  operatorTokenRoleNames: ['AWSReservedSSO_ErpJobsOnCall_*', 'AWSReservedSSO_ErpJobsAdmin_*'],
};

const dev: EnvironmentConfig = {
  envName: 'dev',
  stackPrefix: 'ErpJobs-dev',
  terminationProtection: false,
  logRetentionDays: 14,
  retainLogs: false,
  accessLogRetentionDays: 14,
  network: { natGateways: 1, interfaceEndpoints: false },
  queues: { retentionDays: 4, deadLetterRetentionDays: 14 },
  database: {
    instanceClass: 't4g.micro',
    engineVersion: POSTGRES_VERSION,
    backupWindow: '02:00-02:30',
    maintenanceWindow: 'sun:03:00-sun:03:30',
    performanceInsights: false,
    slowStatementMilliseconds: 1_000,
    idleInTransactionTimeoutSeconds: IDLE_IN_TRANSACTION_TIMEOUT_SECONDS,
    allocatedStorageGiB: 20,
    maxAllocatedStorageGiB: 50,
    multiAz: false,
    passwordRotationDays: 30,
    backupRetentionDays: 1,
    deletionProtection: false,
    removal: 'destroy',
  },
  jobTimings: { ...DEFAULT_JOB_TIMINGS, concurrency: 4, maxAttempts: 3, maxReceiveCount: 8, drainSeconds: 30 },
  // No certificate in dev: plain HTTP, allowed here only.
  jobRetention: { ...DEFAULT_RETENTION },
  api: {
    cpu: 256,
    memoryMiB: 512,
    minTasks: 1,
    maxTasks: 2,
    deploymentMaxPercent: 200,
    poolSize: 5,
    allowPlainHttp: true,
    deletionProtection: false,
  },
  worker: {
    cpu: 256,
    memoryMiB: 512,
    minTasks: 1,
    maxTasks: 2,
    deploymentMaxPercent: 200,
    backlogPerTaskTarget: 8,
    scaleOutCooldownSeconds: 60,
    scaleInCooldownSeconds: 300,
  },
  alarms: {
    emails: [],
    // A healthy hour-long job's message reaches 6,300 s (queueAgeBelowJobRuns): less would page.
    queueOldestMessageAgeSeconds: 2 * 3_600,
    deadLetterOldestMessageAgeSeconds: 3 * 86_400,
    leasesLostPer15Minutes: 5,
    jobsDeadLetteredPer5Minutes: 5,
    api5xxPer5Minutes: 20,
    ...DATABASE_AND_SCALING_ALARMS,
    stuckJobs: { ...DEFAULT_STUCK_THRESHOLDS },
  },
  secretReaders: SECRET_READERS,
};

const staging: EnvironmentConfig = {
  envName: 'staging',
  stackPrefix: 'ErpJobs-staging',
  terminationProtection: true,
  logRetentionDays: 30,
  retainLogs: false,
  accessLogRetentionDays: 30,
  network: { natGateways: 1, interfaceEndpoints: false },
  queues: { retentionDays: 4, deadLetterRetentionDays: 14 },
  database: {
    instanceClass: 't4g.medium',
    engineVersion: POSTGRES_VERSION,
    // A day before prod's: a maintenance that goes wrong shows here first.
    backupWindow: '01:00-01:30',
    maintenanceWindow: 'sat:02:00-sat:02:30',
    performanceInsights: true,
    slowStatementMilliseconds: 1_000,
    idleInTransactionTimeoutSeconds: IDLE_IN_TRANSACTION_TIMEOUT_SECONDS,
    allocatedStorageGiB: 50,
    maxAllocatedStorageGiB: 200,
    multiAz: false,
    passwordRotationDays: 30,
    backupRetentionDays: 7,
    deletionProtection: true,
    removal: 'snapshot',
  },
  jobTimings: { ...DEFAULT_JOB_TIMINGS },
  // certificateArn: set here or pass -c apiCertificateArn=ARN; synth refuses without one.
  jobRetention: { ...DEFAULT_RETENTION },
  api: {
    cpu: 512,
    memoryMiB: 1024,
    minTasks: 2,
    maxTasks: 4,
    deploymentMaxPercent: 200,
    poolSize: 10,
    allowPlainHttp: false,
    deletionProtection: false,
  },
  worker: {
    cpu: 1024,
    memoryMiB: 2048,
    minTasks: 1,
    maxTasks: 6,
    deploymentMaxPercent: 200,
    backlogPerTaskTarget: 20,
    scaleOutCooldownSeconds: 60,
    scaleInCooldownSeconds: 300,
  },
  alarms: {
    emails: ['erp-jobs-staging@example.com'], // a placeholder synth refuses (checkAlarmEmails): yours here, or -c alarmEmails
    queueOldestMessageAgeSeconds: 2 * 3_600,
    deadLetterOldestMessageAgeSeconds: 86_400,
    leasesLostPer15Minutes: 5,
    jobsDeadLetteredPer5Minutes: 3,
    api5xxPer5Minutes: 20,
    ...DATABASE_AND_SCALING_ALARMS,
    stuckJobs: { ...DEFAULT_STUCK_THRESHOLDS },
  },
  secretReaders: SECRET_READERS,
};

const prod: EnvironmentConfig = {
  envName: 'prod',
  stackPrefix: 'ErpJobs-prod',
  terminationProtection: true,
  logRetentionDays: 90,
  retainLogs: true,
  accessLogRetentionDays: 365,
  // Two NAT gateways: one per AZ, so losing a zone does not cut the other zone's bootstrap off
  // Lambda's API; the tasks reach AWS through the interface endpoints.
  network: { natGateways: 2, interfaceEndpoints: true },
  queues: { retentionDays: 7, deadLetterRetentionDays: 14 },
  database: {
    instanceClass: 'r7g.large',
    engineVersion: POSTGRES_VERSION,
    // Quiet hours for the ERP (Europe): backups after midnight, maintenance early Sunday.
    backupWindow: '00:30-01:00',
    maintenanceWindow: 'sun:02:00-sun:02:30',
    performanceInsights: true,
    slowStatementMilliseconds: 1_000,
    idleInTransactionTimeoutSeconds: IDLE_IN_TRANSACTION_TIMEOUT_SECONDS,
    allocatedStorageGiB: 100,
    maxAllocatedStorageGiB: 1_000,
    multiAz: true,
    passwordRotationDays: 30,
    backupRetentionDays: 30,
    deletionProtection: true,
    removal: 'snapshot',
  },
  jobTimings: { ...DEFAULT_JOB_TIMINGS },
  // certificateArn: set here or pass -c apiCertificateArn=ARN; synth refuses without one.
  jobRetention: { ...DEFAULT_RETENTION },
  api: {
    cpu: 1024,
    memoryMiB: 2048,
    minTasks: 2,
    maxTasks: 6,
    deploymentMaxPercent: 200,
    poolSize: 10,
    allowPlainHttp: false,
    deletionProtection: true,
  },
  worker: {
    cpu: 2048,
    memoryMiB: 4096,
    minTasks: 2,
    maxTasks: 20,
    deploymentMaxPercent: 200,
    backlogPerTaskTarget: 20,
    scaleOutCooldownSeconds: 60,
    scaleInCooldownSeconds: 600,
  },
  alarms: {
    emails: ['erp-jobs-oncall@example.com'], // a placeholder synth refuses (checkAlarmEmails): yours here, or -c alarmEmails
    queueOldestMessageAgeSeconds: 2 * 3_600,
    deadLetterOldestMessageAgeSeconds: 4 * 3_600,
    leasesLostPer15Minutes: 3,
    jobsDeadLetteredPer5Minutes: 1,
    api5xxPer5Minutes: 10,
    ...DATABASE_AND_SCALING_ALARMS,
    stuckJobs: { ...DEFAULT_STUCK_THRESHOLDS },
  },
  secretReaders: SECRET_READERS,
};

export const ENVIRONMENTS: Readonly<Record<EnvironmentName, EnvironmentConfig>> = { dev, staging, prod };

// ---------------------------------------------------------------------------------------------
// Connection budget
// ---------------------------------------------------------------------------------------------

/** Memory of the RDS instance classes the platform may use, in GiB. Add a class here before using it. */
export const INSTANCE_MEMORY_GIB: Readonly<Record<string, number>> = {
  't4g.micro': 1,
  't4g.small': 2,
  't4g.medium': 4,
  't4g.large': 8,
  't4g.xlarge': 16,
  'm7g.large': 8,
  'm7g.xlarge': 16,
  'm7g.2xlarge': 32,
  'r7g.large': 16,
  'r7g.xlarge': 32,
  'r7g.2xlarge': 64,
};

/**
 * RDS PostgreSQL's default max_connections is LEAST(DBInstanceClassMemory / 9531392, 5000), where
 * DBInstanceClassMemory is the instance's memory less what the OS and RDS reserve. We count 90 %
 * of the nominal memory, which is at or below what RDS reports for these classes.
 */
export const RDS_BYTES_PER_CONNECTION = 9_531_392;
export const RESERVED_MEMORY_FRACTION = 0.1;
/**
 * The services may plan for at most this share of max_connections. The rest is for
 * superuser_reserved_connections, rdsadmin, an operator's psql or `jobs` CLI, and a bootstrap
 * that retries while tasks are up.
 */
export const CONNECTION_BUDGET_SHARE = 0.8;
/** The schema bootstrap holds one connection while it migrates. */
export const BOOTSTRAP_CONNECTIONS = 1;

export function estimatedMaxConnections(db: DatabaseConfig): number {
  if (db.maxConnections !== undefined) return db.maxConnections;
  const gib = INSTANCE_MEMORY_GIB[db.instanceClass];
  if (gib === undefined) {
    throw new ConfigError('database', [
      {
        rule: 'instance-class-known',
        message:
          `database.instanceClass = ${db.instanceClass} is not in INSTANCE_MEMORY_GIB (lib/config.ts), so its max_connections is unknown; ` +
          `add its memory there or set database.maxConnections. Known: ${Object.keys(INSTANCE_MEMORY_GIB).join(', ')}`,
      },
    ]);
  }
  const bytes = gib * 1024 ** 3 * (1 - RESERVED_MEMORY_FRACTION);
  return Math.min(Math.floor(bytes / RDS_BYTES_PER_CONNECTION), 5_000);
}

export interface ConnectionBudget {
  workerPeakTasks: number;
  /** Connections per worker task: its pool and the maintenance loops' (workerConnections). */
  workerConnections: number;
  apiPeakTasks: number;
  apiPoolSize: number;
  bootstrap: number;
  total: number;
  maxConnections: number;
  allowed: number;
}

/** Tasks a service can run at once: its maximum, with old and new side by side during a deployment. */
export function peakTasks(s: ServiceSizing): number {
  return Math.ceil((s.maxTasks * s.deploymentMaxPercent) / 100);
}

export function connectionBudget(c: EnvironmentConfig): ConnectionBudget {
  const maxConnections = estimatedMaxConnections(c.database);
  const workerPeak = peakTasks(c.worker);
  const apiPeak = peakTasks(c.api);
  const wPool = workerConnections(c.jobTimings.concurrency);
  const total = workerPeak * wPool + apiPeak * c.api.poolSize + BOOTSTRAP_CONNECTIONS;
  return {
    workerPeakTasks: workerPeak,
    workerConnections: wPool,
    apiPeakTasks: apiPeak,
    apiPoolSize: c.api.poolSize,
    bootstrap: BOOTSTRAP_CONNECTIONS,
    total,
    maxConnections,
    allowed: Math.floor(maxConnections * CONNECTION_BUDGET_SHARE),
  };
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

function checkSizing(name: 'api' | 'worker', s: ServiceSizing): RuleViolation[] {
  const out: RuleViolation[] = [];
  if (!Number.isInteger(s.minTasks) || s.minTasks < 1) {
    out.push({
      rule: `${name}-min-tasks`,
      message: `${name}.minTasks = ${s.minTasks} must be a whole number ≥ 1 (the ${name === 'worker' ? 'backlog-per-task scaling divides by running tasks and the relay runs in the worker' : 'load balancer needs a target'})`,
    });
  }
  if (!Number.isInteger(s.maxTasks) || s.maxTasks < s.minTasks) {
    out.push({
      rule: `${name}-max-tasks`,
      message: `${name}.maxTasks = ${s.maxTasks} must be a whole number ≥ ${name}.minTasks = ${s.minTasks}`,
    });
  }
  if (s.deploymentMaxPercent < 100 || s.deploymentMaxPercent > 200) {
    out.push({
      rule: `${name}-deployment-max-percent`,
      message: `${name}.deploymentMaxPercent = ${s.deploymentMaxPercent} must be between 100 and 200`,
    });
  }
  return out;
}

/** Every rule beyond the job timings that an environment's config breaks. */
export function checkEnvironment(c: EnvironmentConfig): RuleViolation[] {
  const out: RuleViolation[] = [...checkSizing('api', c.api), ...checkSizing('worker', c.worker)];
  const q = c.queues;
  if (q.retentionDays < 1 || q.retentionDays > 14 || q.deadLetterRetentionDays < 1 || q.deadLetterRetentionDays > 14) {
    out.push({
      rule: 'queue-retention-range',
      message: `queues.retentionDays = ${q.retentionDays} and queues.deadLetterRetentionDays = ${q.deadLetterRetentionDays} must be between 1 and 14 (SQS limits)`,
    });
  } else if (q.deadLetterRetentionDays <= q.retentionDays) {
    out.push({
      rule: 'dlq-retention-above-queue',
      message:
        `queues.deadLetterRetentionDays = ${q.deadLetterRetentionDays} must be longer than queues.retentionDays = ${q.retentionDays}: ` +
        `SQS keeps a redriven message's original timestamp, so a DLQ that keeps no longer than the queue can expire a dead letter the moment it arrives; raise deadLetterRetentionDays or lower retentionDays`,
    });
  }
  if (!Number.isInteger(c.api.poolSize) || c.api.poolSize < 1) {
    out.push({ rule: 'api-pool-size', message: `api.poolSize = ${c.api.poolSize} must be a whole number ≥ 1` });
  }
  const rotation = c.database.passwordRotationDays;
  if (!Number.isInteger(rotation) || rotation < 1 || rotation > 365) {
    out.push({
      rule: 'password-rotation-days',
      message: `database.passwordRotationDays = ${rotation} must be a whole number of days from 1 to 365 (the services' database password is rotated that often)`,
    });
  }
  if (c.database.multiAz && c.database.backupRetentionDays < 1) {
    out.push({
      rule: 'backups-with-multi-az',
      message: `database.backupRetentionDays = 0 with multiAz: a production-grade database keeps automated backups; set at least 1`,
    });
  }
  if (
    c.worker.prefetch !== undefined &&
    (!Number.isInteger(c.worker.prefetch) || c.worker.prefetch < 0 || c.worker.prefetch > MAX_PREFETCH)
  ) {
    out.push({
      rule: 'worker-prefetch',
      message: `worker.prefetch = ${c.worker.prefetch} must be a whole number from 0 to ${MAX_PREFETCH} (jobs claimed ahead of a free handler slot)`,
    });
  }
  for (const key of ['runningSeconds', 'pendingSeconds'] as const) {
    const v = c.alarms.stuckJobs[key];
    if (!Number.isInteger(v) || v < 1 || v > MAX_STUCK_SECONDS) {
      out.push({
        rule: 'stuck-jobs-threshold',
        message: `alarms.stuckJobs.${key} = ${v} must be a whole number of seconds from 1 to ${MAX_STUCK_SECONDS} (a week)`,
      });
    }
  }
  out.push(...queueAgeBelowJobRuns(c, [{ type: '(any without expectedMaxSeconds)' }]));
  out.push(...retentionViolations(c.jobRetention, (key) => `jobRetention.${key}`));
  if (c.worker.backlogPerTaskTarget <= 0) {
    out.push({ rule: 'worker-backlog-target', message: `worker.backlogPerTaskTarget = ${c.worker.backlogPerTaskTarget} must be positive` });
  }
  out.push(...checkHttps(c), ...checkAlarmEmails(c), ...checkDatabase(c), ...checkValues(c));
  if (out.length > 0) return out;

  const b = connectionBudget(c);
  if (b.total > b.allowed) {
    out.push({
      rule: 'connection-budget',
      message:
        `the services may open ${b.total} connections — worker ${b.workerPeakTasks} tasks at deployment peak (worker.maxTasks = ${c.worker.maxTasks} × worker.deploymentMaxPercent = ${c.worker.deploymentMaxPercent} %) ` +
        `× ${b.workerConnections} connections (workerConnections(jobTimings.concurrency = ${c.jobTimings.concurrency}): its pool and the maintenance loops') + ` +
        `API ${b.apiPeakTasks} tasks (api.maxTasks = ${c.api.maxTasks} × api.deploymentMaxPercent = ${c.api.deploymentMaxPercent} %) × api.poolSize = ${c.api.poolSize} + bootstrap ${b.bootstrap} — ` +
        `but ${c.database.instanceClass} allows about ${b.maxConnections} (max_connections) of which ${Math.round(CONNECTION_BUDGET_SHARE * 100)} % = ${b.allowed} may be planned; ` +
        `lower worker.maxTasks, jobTimings.concurrency, api.maxTasks or api.poolSize, or choose a larger database.instanceClass`,
    });
  }
  return out;
}

/**
 * The job types whose healthy job can outlast the queue-age alarms. SQS's oldest-message age
 * counts a message from its sending, and a healthy job's message lives through: its wait to be
 * due (a delay or hide of at most MAX_WAITING_MESSAGE_AGE_SECONDS, while younger than that: at
 * most twice it; an older one is replaced by a fresh message), its wait for a worker (up to
 * alarms.stuckJobs.pendingSeconds, past which *jobs stuck* pages) and its run (the heartbeat keeps
 * the message in flight), up to the type's `expectedMaxSeconds`, else the stuck threshold. An
 * alarm below that sum would page on-call for healthy work. lib/ does not load the handlers (the
 * architecture test), so test/cdk/config.test.ts checks the registered types through this.
 */
export function queueAgeBelowJobRuns(
  c: Pick<EnvironmentConfig, 'envName' | 'alarms'>,
  types: readonly { type: string; expectedMaxSeconds?: number }[],
): RuleViolation[] {
  const limit = c.alarms.queueOldestMessageAgeSeconds;
  const waits = 2 * MAX_WAITING_MESSAGE_AGE_SECONDS + c.alarms.stuckJobs.pendingSeconds;
  return types.flatMap((t) => {
    const run = t.expectedMaxSeconds ?? c.alarms.stuckJobs.runningSeconds;
    if (run + waits <= limit) return [];
    const from = t.expectedMaxSeconds === undefined ? `alarms.stuckJobs.runningSeconds = ${run}` : `expectedMaxSeconds = ${run}`;
    return [
      {
        rule: 'queue-age-alarm-above-longest-job',
        message:
          `${c.envName}: a healthy job of type ${t.type} keeps its SQS message up to ${run + waits} s — its run (${from}), its wait for a worker ` +
          `(alarms.stuckJobs.pendingSeconds = ${c.alarms.stuckJobs.pendingSeconds}) and its wait to be due (at most ${2 * MAX_WAITING_MESSAGE_AGE_SECONDS}) — ` +
          `but alarms.queueOldestMessageAgeSeconds = ${limit}, so healthy work would page on-call (job queue oldest message age); ` +
          `raise alarms.queueOldestMessageAgeSeconds to at least ${run + waits} in lib/config.ts or lower the expected run`,
      },
    ];
  });
}

/** What `-c apiCertificateArn=…` and the other flags name, for the errors. */
export const CERTIFICATE_CONTEXT_KEY = 'apiCertificateArn';
const ACM_CERTIFICATE_ARN = /^arn:aws[a-z-]*:acm:[a-z0-9-]+:\d{12}:certificate\/[A-Za-z0-9-]+$/;

function checkHttps(c: EnvironmentConfig): RuleViolation[] {
  const arn = c.api.certificateArn;
  if (arn === undefined) {
    if (c.api.allowPlainHttp) return [];
    return [
      {
        rule: 'api-certificate',
        message:
          `the ${c.envName} API must serve HTTPS (its bearer tokens would cross the internet in clear text), and no certificate is given: ` +
          `set api.certificateArn in lib/config.ts (${c.envName}) or pass -c ${CERTIFICATE_CONTEXT_KEY}=arn:aws:acm:<region>:<account>:certificate/<id> ` +
          `(an ACM certificate for the API's host name, in the region of the deployment)`,
      },
    ];
  }
  if (!ACM_CERTIFICATE_ARN.test(arn)) {
    return [
      {
        rule: 'api-certificate-arn',
        message: `api.certificateArn = ${arn} is not an ACM certificate ARN (arn:aws:acm:<region>:<account>:certificate/<id>); set it in lib/config.ts or with -c ${CERTIFICATE_CONTEXT_KEY}=ARN`,
      },
    ];
  }
  return [];
}

/** What `-c alarmEmails=a@x.com,b@x.com` names. */
export const ALARM_EMAILS_CONTEXT_KEY = 'alarmEmails';
/** What `-c alarmEndpoints=https://…` names: a pager's integration URLs, kept out of git. */
export const ALARM_ENDPOINTS_CONTEXT_KEY = 'alarmEndpoints';
const EMAIL = /^[^@\s,]+@[^@\s,]+\.[^@\s,]+$/;
/** Domains reserved for examples and tests (RFC 2606, 6761): mail to them is never delivered. */
const RESERVED_DOMAIN = /(^|\.)(example\.(com|net|org)|example|invalid|test|localhost)$/i;

/**
 * Every alarm publishes to the on-call topic and reaches a person only through its subscriptions:
 * an address that cannot deliver, or none in an environment whose data is kept
 * (terminationProtection: staging, prod), would page nobody, silently.
 */
function checkAlarmEmails(c: EnvironmentConfig): RuleViolation[] {
  const out: RuleViolation[] = [];
  const how = `set alarms.emails in lib/config.ts (${c.envName}) or pass -c ${ALARM_EMAILS_CONTEXT_KEY}=oncall@your-company.com[,…]`;
  for (const email of c.alarms.emails) {
    if (!EMAIL.test(email))
      out.push({ rule: 'alarm-email', message: `alarms.emails has ${JSON.stringify(email)}, which is not an e-mail address; ${how}` });
    else if (RESERVED_DOMAIN.test(email.slice(email.lastIndexOf('@') + 1)))
      out.push({
        rule: 'alarm-email',
        message: `alarms.emails has ${email}, on a domain reserved for examples, where mail is never delivered: every alarm of ${c.envName} would page nobody; ${how}`,
      });
  }
  const endpointHow = `set alarms.httpsEndpoints or pass -c ${ALARM_ENDPOINTS_CONTEXT_KEY}=https://your-pager/…[,…]`;
  for (const endpoint of c.alarms.httpsEndpoints ?? []) {
    let url: URL | null = null;
    try {
      url = new URL(endpoint);
    } catch {}
    if (!url || url.protocol !== 'https:')
      out.push({
        rule: 'alarm-endpoint',
        message: `alarms.httpsEndpoints has ${JSON.stringify(endpoint)}, which is not an https:// URL (SNS delivers to a pager over HTTPS only here); ${endpointHow}`,
      });
    else if (RESERVED_DOMAIN.test(url.hostname))
      out.push({
        rule: 'alarm-endpoint',
        message: `alarms.httpsEndpoints has ${url.origin}, on a domain reserved for examples: every alarm of ${c.envName} would page nobody; ${endpointHow}`,
      });
  }
  if (c.alarms.emails.length === 0 && (c.alarms.httpsEndpoints ?? []).length === 0 && c.terminationProtection) {
    out.push({
      rule: 'alarm-email',
      message: `alarms.emails and alarms.httpsEndpoints are empty: ${c.envName} keeps its data (terminationProtection), and its alarms would page nobody; ${how}, or ${endpointHow}`,
    });
  }
  return out;
}

const BACKUP_WINDOW = /^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$/;
const MAINTENANCE_WINDOW =
  /^(mon|tue|wed|thu|fri|sat|sun):([01]\d|2[0-3]):([0-5]\d)-(mon|tue|wed|thu|fri|sat|sun):([01]\d|2[0-3]):([0-5]\d)$/;
const DAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'];

/** Minutes of the week [start, end) a window covers; daily windows repeat every day. */
function windowRanges(w: string): [number, number][] {
  const m = MAINTENANCE_WINDOW.exec(w);
  const ranges: [number, number][] = [];
  if (m) {
    const start = DAYS.indexOf(m[1]!) * 1440 + Number(m[2]) * 60 + Number(m[3]);
    let end = DAYS.indexOf(m[4]!) * 1440 + Number(m[5]) * 60 + Number(m[6]);
    if (end <= start) end += 7 * 1440;
    ranges.push([start, end]);
  } else {
    const d = BACKUP_WINDOW.exec(w)!;
    const start = Number(d[1]) * 60 + Number(d[2]);
    let end = Number(d[3]) * 60 + Number(d[4]);
    if (end <= start) end += 1440;
    for (let day = 0; day < 8; day++) ranges.push([day * 1440 + start, day * 1440 + end]);
  }
  return ranges;
}

function checkDatabase(c: EnvironmentConfig): RuleViolation[] {
  const d = c.database;
  const out: RuleViolation[] = [];
  if (!/^\d+\.\d+$/.test(d.engineVersion)) {
    out.push({
      rule: 'database-engine-version',
      message: `database.engineVersion = ${d.engineVersion} must pin a minor version, major.minor (e.g. 17.9): minor upgrades happen by changing it, never automatically`,
    });
  }
  const backupOk = BACKUP_WINDOW.test(d.backupWindow);
  const maintenanceOk = MAINTENANCE_WINDOW.test(d.maintenanceWindow);
  if (!backupOk)
    out.push({
      rule: 'database-backup-window',
      message: `database.backupWindow = ${d.backupWindow} must be hh:mm-hh:mm in UTC (e.g. 00:30-01:00)`,
    });
  if (!maintenanceOk)
    out.push({
      rule: 'database-maintenance-window',
      message: `database.maintenanceWindow = ${d.maintenanceWindow} must be ddd:hh:mm-ddd:hh:mm in UTC (e.g. sun:02:00-sun:02:30)`,
    });
  if (backupOk && maintenanceOk) {
    const [b] = windowRanges(d.backupWindow);
    if (b![1] - b![0] < 30)
      out.push({
        rule: 'database-backup-window',
        message: `database.backupWindow = ${d.backupWindow} must last at least 30 minutes (RDS)`,
      });
    const [mw] = windowRanges(d.maintenanceWindow);
    if (mw![1] - mw![0] < 30)
      out.push({
        rule: 'database-maintenance-window',
        message: `database.maintenanceWindow = ${d.maintenanceWindow} must last at least 30 minutes (RDS)`,
      });
    const overlaps = windowRanges(d.backupWindow).some(([bs, be]) =>
      [mw!, [mw![0] + 7 * 1440, mw![1] + 7 * 1440]].some(([ms, me]) => bs < me! && ms! < be),
    );
    if (overlaps)
      out.push({
        rule: 'database-windows-overlap',
        message: `database.backupWindow = ${d.backupWindow} overlaps database.maintenanceWindow = ${d.maintenanceWindow}; RDS refuses overlapping windows: move one`,
      });
  }
  if (!Number.isInteger(d.slowStatementMilliseconds) || d.slowStatementMilliseconds < 100) {
    out.push({
      rule: 'database-slow-statement',
      message: `database.slowStatementMilliseconds = ${d.slowStatementMilliseconds} must be a whole number ≥ 100 (lower logs nearly every heartbeat and claim)`,
    });
  }
  // A job's transaction may sit idle while its handler computes between writes; the timeout is
  // only for what a frozen process leaves behind. Never below the stuck-job threshold, and far
  // above the heartbeat, so nothing the platform calls healthy can hit it.
  const minIdle = Math.max(c.alarms.stuckJobs.runningSeconds, 10 * c.jobTimings.leaseSeconds);
  if (!Number.isInteger(d.idleInTransactionTimeoutSeconds) || d.idleInTransactionTimeoutSeconds < minIdle) {
    out.push({
      rule: 'database-idle-in-transaction',
      message:
        `database.idleInTransactionTimeoutSeconds = ${d.idleInTransactionTimeoutSeconds} must be a whole number ≥ ${minIdle} ` +
        `(the larger of alarms.stuckJobs.runningSeconds = ${c.alarms.stuckJobs.runningSeconds} and 10 × jobTimings.leaseSeconds = ${10 * c.jobTimings.leaseSeconds}): ` +
        `a job's transaction may be idle while its handler computes, and must not be cut while the job is healthy`,
    });
  }
  for (const key of ['databaseFreeStorageFraction', 'databaseFreeableMemoryFraction'] as const) {
    const v = c.alarms[key];
    if (!(v > 0 && v < 1)) out.push({ rule: 'database-alarm-fraction', message: `alarms.${key} = ${v} must be between 0 and 1` });
  }
  return out;
}

/** CloudWatch Logs' retention values that LogRetentionDays allows. */
const LOG_RETENTION_DAYS: readonly number[] = [7, 14, 30, 90, 180, 365];

/**
 * What TypeScript's types say but `cdk synth` would otherwise not check: the app runs through
 * tsx, which does not type-check (cdk.json type-checks first; these hold whoever runs bin/app.ts
 * without it), and some mistakes type-check. A misspelt `removal` or a misspelt
 * `deletionProtection` key turned a production database's protection off with synth exiting 0;
 * an `httpClient` the containers refuse crash-looped the deployment; a CPU alarm of 0.8 (a
 * fraction where a percent is meant) paged at 0.8 %; a DLQ age alarm past the DLQ's retention
 * could never fire.
 */
function checkValues(c: EnvironmentConfig): RuleViolation[] {
  const out: RuleViolation[] = [];
  // Old worker tasks hold task protection while they run jobs (always, in a backlog) and retire
  // only once the new deployment's tasks all run (runtime/worker/deployment-watch.ts): below 200 %
  // they have no room to start, nobody retires, and a rollout waits for the backlog to drain.
  if (c.worker.deploymentMaxPercent !== 200)
    out.push({
      rule: 'worker-deployment-max-percent',
      message: `worker.deploymentMaxPercent = ${c.worker.deploymentMaxPercent} must be 200: a rollout starts the new worker tasks beside the old ones, which hold task protection while they run jobs and retire only once the new tasks all run; with less room a rollout in a backlog waits for the backlog to drain`,
    });
  const d = c.database;
  if (d.removal !== 'snapshot' && d.removal !== 'destroy')
    out.push({
      rule: 'database-removal',
      message: `database.removal = ${JSON.stringify(d.removal)} must be 'snapshot' (keep a final snapshot) or 'destroy'`,
    });
  for (const key of ['deletionProtection', 'multiAz', 'performanceInsights'] as const) {
    if (typeof d[key] !== 'boolean')
      out.push({
        rule: 'database-flag',
        message: `database.${key} = ${JSON.stringify(d[key])} must be true or false (a misspelt key leaves it unset, and the database without it)`,
      });
  }
  for (const key of ['terminationProtection', 'retainLogs'] as const) {
    if (typeof c[key] !== 'boolean')
      out.push({ rule: 'environment-flag', message: `${key} = ${JSON.stringify(c[key])} must be true or false` });
  }
  const http = c.queues.httpClient;
  if (http !== undefined && !(SQS_HTTP_CLIENTS as readonly string[]).includes(http))
    out.push({
      rule: 'sqs-http-client',
      message: `queues.httpClient = ${JSON.stringify(http)} must be one of ${SQS_HTTP_CLIENTS.join(', ')} (JOBS_SQS_HTTP_CLIENT: the containers refuse any other and would not start), or left unset`,
    });
  const cpu = c.alarms.databaseCpuPercent;
  if (!(cpu >= 1 && cpu <= 100))
    out.push({
      rule: 'database-cpu-percent',
      message: `alarms.databaseCpuPercent = ${cpu} must be a percent from 1 to 100${cpu > 0 && cpu < 1 ? ` (${cpu} reads as a fraction: for ${Math.round(cpu * 100)} %, write ${Math.round(cpu * 100)})` : ''}`,
    });
  const dlqAge = c.alarms.deadLetterOldestMessageAgeSeconds;
  const dlqKeeps = c.queues.deadLetterRetentionDays * 86_400;
  if (!(dlqAge >= 60 && dlqAge < dlqKeeps))
    out.push({
      rule: 'dlq-age-alarm',
      message: `alarms.deadLetterOldestMessageAgeSeconds = ${dlqAge} must be at least 60 and below the DLQ's retention (queues.deadLetterRetentionDays = ${c.queues.deadLetterRetentionDays}: ${dlqKeeps} s), or the alarm could never fire: a dead letter expires first`,
    });
  if (!LOG_RETENTION_DAYS.includes(c.logRetentionDays))
    out.push({
      rule: 'log-retention',
      message: `logRetentionDays = ${c.logRetentionDays} must be one of ${LOG_RETENTION_DAYS.join(', ')}`,
    });
  if (!Number.isInteger(c.accessLogRetentionDays) || c.accessLogRetentionDays < 1)
    out.push({
      rule: 'access-log-retention',
      message: `accessLogRetentionDays = ${c.accessLogRetentionDays} must be a whole number of days ≥ 1 (S3 refuses an expiration of 0)`,
    });
  return out;
}

/** Throws a ConfigError naming every broken rule, timings first; returns the config unchanged. */
export function assertEnvironment(c: EnvironmentConfig): EnvironmentConfig {
  const source = `lib/config.ts (${c.envName})`;
  assertJobTimings(c.jobTimings, source);
  const violations = checkEnvironment(c);
  if (violations.length > 0) throw new ConfigError(source, violations);
  return c;
}

/**
 * The checked config of the environment named on the command line (`-c env=<name>`). A missing
 * or unknown name fails with the list of valid ones.
 */
export function resolveConfig(
  name: unknown,
  environments: Readonly<Record<string, EnvironmentConfig>> = ENVIRONMENTS,
  overrides: CommandLineOverrides = {},
): EnvironmentConfig {
  const valid = Object.keys(environments).join(', ');
  if (typeof name !== 'string' || name.trim() === '') {
    throw new Error(`No environment given: run with -c env=<name>, where <name> is one of: ${valid}`);
  }
  const c = Object.hasOwn(environments, name) ? environments[name] : undefined;
  if (!c) throw new Error(`Unknown environment "${name}": -c env=<name> must be one of: ${valid}`);
  return assertEnvironment(withOverrides(c, overrides));
}

/** What the command line may set over lib/config.ts: `-c apiCertificateArn=ARN`, `-c alarmEmails=a@x.com,b@x.com`. */
export interface CommandLineOverrides {
  apiCertificateArn?: unknown;
  alarmEmails?: unknown;
  alarmEndpoints?: unknown;
}

const given = (v: unknown) => v !== undefined && v !== null && v !== '';

/** The config with the command line's values, which win; the config itself is not changed. */
export function withOverrides(c: EnvironmentConfig, o: CommandLineOverrides): EnvironmentConfig {
  let out = c;
  const arn = o.apiCertificateArn;
  if (given(arn)) {
    if (typeof arn !== 'string')
      throw new ConfigError(`-c ${CERTIFICATE_CONTEXT_KEY}`, [
        { rule: 'api-certificate-arn', message: `-c ${CERTIFICATE_CONTEXT_KEY} must be an ACM certificate ARN string` },
      ]);
    out = { ...out, api: { ...out.api, certificateArn: arn.trim() } };
  }
  const emails = o.alarmEmails;
  if (given(emails)) {
    if (typeof emails !== 'string')
      throw new ConfigError(`-c ${ALARM_EMAILS_CONTEXT_KEY}`, [
        { rule: 'alarm-email', message: `-c ${ALARM_EMAILS_CONTEXT_KEY} must be e-mail addresses separated by commas` },
      ]);
    out = {
      ...out,
      alarms: {
        ...out.alarms,
        emails: emails
          .split(',')
          .map((e) => e.trim())
          .filter((e) => e !== ''),
      },
    };
  }
  const endpoints = o.alarmEndpoints;
  if (given(endpoints)) {
    if (typeof endpoints !== 'string')
      throw new ConfigError(`-c ${ALARM_ENDPOINTS_CONTEXT_KEY}`, [
        { rule: 'alarm-endpoint', message: `-c ${ALARM_ENDPOINTS_CONTEXT_KEY} must be https:// URLs separated by commas` },
      ]);
    const list = endpoints
      .split(',')
      .map((e) => e.trim())
      .filter((e) => e !== '');
    out = { ...out, alarms: { ...out.alarms, httpsEndpoints: list } };
  }
  return out;
}

/** The tags every stack of an environment carries (and, through Tags.of(app) in lib/app.ts, every resource). */
export function stackTags(c: Pick<EnvironmentConfig, 'envName'>): Record<string, string> {
  return { project: 'erp-jobs', environment: c.envName };
}
