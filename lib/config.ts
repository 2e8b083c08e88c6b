// The per-environment parameters of the job platform: every knob a platform engineer turns
// lives here, typed, in one object per environment. `resolveConfig()` checks an environment's
// config before a single construct exists: the job timings go through the same rules the
// worker applies at start (runtime/config/rules.ts), and the connection budget is checked
// against the database instance class. A bad combination fails `cdk synth` with the values,
// the rule and the knob to turn.

import { DEFAULT_STUCK_THRESHOLDS, MAX_STUCK_SECONDS, type StuckThresholds } from '../runtime/config/stuck-thresholds.ts';
import { assertJobTimings, ConfigError, DEFAULT_JOB_TIMINGS, MAX_PREFETCH, workerPoolSize, type JobTimings, type RuleViolation } from '../runtime/config/rules.ts';

export const ENVIRONMENT_NAMES = ['dev', 'staging', 'prod'] as const;
export type EnvironmentName = (typeof ENVIRONMENT_NAMES)[number];

/** CloudWatch Logs retention values the platform uses (a subset of what CloudWatch accepts). */
export type LogRetentionDays = 7 | 14 | 30 | 90 | 180 | 365;

export interface NetworkConfig {
  /** NAT gateways for the tasks' and the bootstrap's egress (ECR, SQS, Secrets Manager, CloudWatch). One per AZ for zone-independent egress. */
  natGateways: number;
}

export interface QueueConfig {
  /** How long the job queue keeps an undelivered message. The database is the source of truth; the relay re-publishes what the queue loses. */
  retentionDays: number;
  /** How long the DLQ keeps a dead letter: must be longer than the queue's so a redriven message never expires before on-call sees it. SQS caps it at 14. */
  deadLetterRetentionDays: number;
}

export interface DatabaseConfig {
  /** RDS instance class without the `db.` prefix, e.g. `t4g.micro`. Must be in INSTANCE_MEMORY_GIB (the connection budget needs its memory). */
  instanceClass: string;
  allocatedStorageGiB: number;
  /** Storage autoscaling ceiling. */
  maxAllocatedStorageGiB: number;
  multiAz: boolean;
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
  /** ACM certificate ARN for the load balancer's HTTPS listener. Without one the API is plain HTTP (dev only, see docs/deploy.md). */
  certificateArn?: string;
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
  /** The job queue's oldest message older than this alarms. Includes running jobs (their message stays until they finish), so keep it above the longest job. */
  queueOldestMessageAgeSeconds: number;
  /** A dead letter older than this alarms: nobody has triaged the DLQ. */
  deadLetterOldestMessageAgeSeconds: number;
  /** Lease losses per 15 minutes at which on-call is paged (a crashed worker costs a few). */
  leasesLostPer15Minutes: number;
  /** Jobs dead-lettered per 5 minutes at which on-call is paged. */
  jobsDeadLetteredPer5Minutes: number;
  /** Load balancer 5xx responses per 5 minutes at which on-call is paged. */
  api5xxPer5Minutes: number;
  /**
   * When a job counts as stuck (JobsStuck alarm, `jobs stuck`, GET /v1/stuck-jobs), given to both
   * services as JOBS_STUCK_RUNNING_SECONDS / JOBS_STUCK_PENDING_SECONDS: running longer than
   * runningSeconds (for a job type without its own expectedMaxSeconds), or due and not picked up
   * for longer than pendingSeconds.
   */
  stuckJobs: StuckThresholds;
}

export interface EnvironmentConfig {
  envName: EnvironmentName;
  /** Prefix of the stack names: `<prefix>-Data`, `<prefix>-Services`. */
  stackPrefix: string;
  /** Termination protection on the stateful stack (database, queues). */
  terminationProtection: boolean;
  /** Retention of the services', the bootstrap's and the VPC flow logs' log groups. */
  logRetentionDays: LogRetentionDays;
  /** Days the load balancer's access logs are kept. */
  accessLogRetentionDays: number;
  network: NetworkConfig;
  queues: QueueConfig;
  database: DatabaseConfig;
  jobTimings: JobTimings;
  api: ApiConfig;
  worker: WorkerConfig;
  alarms: AlarmConfig;
}

const dev: EnvironmentConfig = {
  envName: 'dev',
  stackPrefix: 'ErpJobs-dev',
  terminationProtection: false,
  logRetentionDays: 14,
  accessLogRetentionDays: 14,
  network: { natGateways: 1 },
  queues: { retentionDays: 4, deadLetterRetentionDays: 14 },
  database: {
    instanceClass: 't4g.micro',
    allocatedStorageGiB: 20,
    maxAllocatedStorageGiB: 50,
    multiAz: false,
    backupRetentionDays: 1,
    deletionProtection: false,
    removal: 'destroy',
  },
  jobTimings: { ...DEFAULT_JOB_TIMINGS, concurrency: 4, maxAttempts: 3, maxReceiveCount: 8, drainSeconds: 30 },
  api: { cpu: 256, memoryMiB: 512, minTasks: 1, maxTasks: 2, deploymentMaxPercent: 200, poolSize: 5 },
  worker: { cpu: 256, memoryMiB: 512, minTasks: 1, maxTasks: 2, deploymentMaxPercent: 200, backlogPerTaskTarget: 8, scaleOutCooldownSeconds: 60, scaleInCooldownSeconds: 300 },
  alarms: {
    emails: [],
    queueOldestMessageAgeSeconds: 3_600,
    deadLetterOldestMessageAgeSeconds: 3 * 86_400,
    leasesLostPer15Minutes: 5,
    jobsDeadLetteredPer5Minutes: 5,
    api5xxPer5Minutes: 20,
    stuckJobs: { ...DEFAULT_STUCK_THRESHOLDS },
  },
};

const staging: EnvironmentConfig = {
  envName: 'staging',
  stackPrefix: 'ErpJobs-staging',
  terminationProtection: true,
  logRetentionDays: 30,
  accessLogRetentionDays: 30,
  network: { natGateways: 1 },
  queues: { retentionDays: 4, deadLetterRetentionDays: 14 },
  database: {
    instanceClass: 't4g.medium',
    allocatedStorageGiB: 50,
    maxAllocatedStorageGiB: 200,
    multiAz: false,
    backupRetentionDays: 7,
    deletionProtection: true,
    removal: 'snapshot',
  },
  jobTimings: { ...DEFAULT_JOB_TIMINGS },
  api: { cpu: 512, memoryMiB: 1024, minTasks: 2, maxTasks: 4, deploymentMaxPercent: 200, poolSize: 10 },
  worker: { cpu: 1024, memoryMiB: 2048, minTasks: 1, maxTasks: 6, deploymentMaxPercent: 200, backlogPerTaskTarget: 20, scaleOutCooldownSeconds: 60, scaleInCooldownSeconds: 300 },
  alarms: {
    emails: ['erp-jobs-staging@example.com'],
    queueOldestMessageAgeSeconds: 2 * 3_600,
    deadLetterOldestMessageAgeSeconds: 86_400,
    leasesLostPer15Minutes: 5,
    jobsDeadLetteredPer5Minutes: 3,
    api5xxPer5Minutes: 20,
    stuckJobs: { ...DEFAULT_STUCK_THRESHOLDS },
  },
};

const prod: EnvironmentConfig = {
  envName: 'prod',
  stackPrefix: 'ErpJobs-prod',
  terminationProtection: true,
  logRetentionDays: 90,
  accessLogRetentionDays: 365,
  // Two NAT gateways: one per AZ, so losing a zone does not cut the other zone's tasks off SQS.
  network: { natGateways: 2 },
  queues: { retentionDays: 7, deadLetterRetentionDays: 14 },
  database: {
    instanceClass: 'r7g.large',
    allocatedStorageGiB: 100,
    maxAllocatedStorageGiB: 1_000,
    multiAz: true,
    backupRetentionDays: 30,
    deletionProtection: true,
    removal: 'snapshot',
  },
  jobTimings: { ...DEFAULT_JOB_TIMINGS },
  api: { cpu: 1024, memoryMiB: 2048, minTasks: 2, maxTasks: 6, deploymentMaxPercent: 200, poolSize: 10 },
  worker: { cpu: 2048, memoryMiB: 4096, minTasks: 2, maxTasks: 20, deploymentMaxPercent: 200, backlogPerTaskTarget: 20, scaleOutCooldownSeconds: 60, scaleInCooldownSeconds: 600 },
  alarms: {
    emails: ['erp-jobs-oncall@example.com'],
    queueOldestMessageAgeSeconds: 2 * 3_600,
    deadLetterOldestMessageAgeSeconds: 4 * 3_600,
    leasesLostPer15Minutes: 3,
    jobsDeadLetteredPer5Minutes: 1,
    api5xxPer5Minutes: 10,
    stuckJobs: { ...DEFAULT_STUCK_THRESHOLDS },
  },
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
  workerPoolSize: number;
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
  const wPool = workerPoolSize(c.jobTimings.concurrency);
  const total = workerPeak * wPool + apiPeak * c.api.poolSize + BOOTSTRAP_CONNECTIONS;
  return {
    workerPeakTasks: workerPeak,
    workerPoolSize: wPool,
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
    out.push({ rule: `${name}-min-tasks`, message: `${name}.minTasks = ${s.minTasks} must be a whole number ≥ 1 (the ${name === 'worker' ? 'backlog-per-task scaling divides by running tasks and the relay runs in the worker' : 'load balancer needs a target'})` });
  }
  if (!Number.isInteger(s.maxTasks) || s.maxTasks < s.minTasks) {
    out.push({ rule: `${name}-max-tasks`, message: `${name}.maxTasks = ${s.maxTasks} must be a whole number ≥ ${name}.minTasks = ${s.minTasks}` });
  }
  if (s.deploymentMaxPercent < 100 || s.deploymentMaxPercent > 200) {
    out.push({ rule: `${name}-deployment-max-percent`, message: `${name}.deploymentMaxPercent = ${s.deploymentMaxPercent} must be between 100 and 200` });
  }
  return out;
}

/** Every rule beyond the job timings that an environment's config breaks. */
export function checkEnvironment(c: EnvironmentConfig): RuleViolation[] {
  const out: RuleViolation[] = [...checkSizing('api', c.api), ...checkSizing('worker', c.worker)];
  const q = c.queues;
  if (q.retentionDays < 1 || q.retentionDays > 14 || q.deadLetterRetentionDays < 1 || q.deadLetterRetentionDays > 14) {
    out.push({ rule: 'queue-retention-range', message: `queues.retentionDays = ${q.retentionDays} and queues.deadLetterRetentionDays = ${q.deadLetterRetentionDays} must be between 1 and 14 (SQS limits)` });
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
  if (c.database.multiAz && c.database.backupRetentionDays < 1) {
    out.push({ rule: 'backups-with-multi-az', message: `database.backupRetentionDays = 0 with multiAz: a production-grade database keeps automated backups; set at least 1` });
  }
  if (c.worker.prefetch !== undefined && (!Number.isInteger(c.worker.prefetch) || c.worker.prefetch < 0 || c.worker.prefetch > MAX_PREFETCH)) {
    out.push({ rule: 'worker-prefetch', message: `worker.prefetch = ${c.worker.prefetch} must be a whole number from 0 to ${MAX_PREFETCH} (jobs claimed ahead of a free handler slot)` });
  }
  for (const key of ['runningSeconds', 'pendingSeconds'] as const) {
    const v = c.alarms.stuckJobs[key];
    if (!Number.isInteger(v) || v < 1 || v > MAX_STUCK_SECONDS) {
      out.push({ rule: 'stuck-jobs-threshold', message: `alarms.stuckJobs.${key} = ${v} must be a whole number of seconds from 1 to ${MAX_STUCK_SECONDS} (a week)` });
    }
  }
  if (c.worker.backlogPerTaskTarget <= 0) {
    out.push({ rule: 'worker-backlog-target', message: `worker.backlogPerTaskTarget = ${c.worker.backlogPerTaskTarget} must be positive` });
  }
  if (out.length > 0) return out;

  const b = connectionBudget(c);
  if (b.total > b.allowed) {
    out.push({
      rule: 'connection-budget',
      message:
        `the services may open ${b.total} connections — worker ${b.workerPeakTasks} tasks at deployment peak (worker.maxTasks = ${c.worker.maxTasks} × worker.deploymentMaxPercent = ${c.worker.deploymentMaxPercent} %) ` +
        `× pool ${b.workerPoolSize} (workerPoolSize(jobTimings.concurrency = ${c.jobTimings.concurrency})) + ` +
        `API ${b.apiPeakTasks} tasks (api.maxTasks = ${c.api.maxTasks} × api.deploymentMaxPercent = ${c.api.deploymentMaxPercent} %) × api.poolSize = ${c.api.poolSize} + bootstrap ${b.bootstrap} — ` +
        `but ${c.database.instanceClass} allows about ${b.maxConnections} (max_connections) of which ${Math.round(CONNECTION_BUDGET_SHARE * 100)} % = ${b.allowed} may be planned; ` +
        `lower worker.maxTasks, jobTimings.concurrency, api.maxTasks or api.poolSize, or choose a larger database.instanceClass`,
    });
  }
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
export function resolveConfig(name: unknown, environments: Readonly<Record<string, EnvironmentConfig>> = ENVIRONMENTS): EnvironmentConfig {
  const valid = Object.keys(environments).join(', ');
  if (typeof name !== 'string' || name.trim() === '') {
    throw new Error(`No environment given: run with -c env=<name>, where <name> is one of: ${valid}`);
  }
  const c = Object.hasOwn(environments, name) ? environments[name] : undefined;
  if (!c) throw new Error(`Unknown environment "${name}": -c env=<name> must be one of: ${valid}`);
  return assertEnvironment(c);
}
