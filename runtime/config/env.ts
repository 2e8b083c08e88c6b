// Reads the services' configuration from the environment and checks it with the same rules
// the CDK app applies at synth (rules.ts). A bad value stops the start with its variable name,
// its value and the rule it broke. The variable names are the contract with lib/ (the ECS task
// definitions set them) and with the local stack (.jobs-local/env).

import { accessSync, constants, statSync } from 'node:fs';
import { assertJobTimings, ConfigError, DEFAULT_JOB_TIMINGS, type JobTimings, type RuleViolation } from './rules.ts';

export const ENV = {
  databaseUrl: 'DATABASE_URL',
  /** The RDS-generated Secrets Manager secret as JSON ({host, port, username, password, dbname}), injected by ECS. */
  databaseSecret: 'DATABASE_SECRET',
  /**
   * The ARN of the secret ECS injects as DATABASE_SECRET: with it the services read the secret
   * again when PostgreSQL refuses a login and every hour, so a rotated password needs no restart
   * (runtime/db/credentials.ts). Not a secret itself.
   */
  databaseSecretArn: 'DATABASE_SECRET_ARN',
  /** A URL for what administers the schema (`jobs migrate`) when DATABASE_URL is a role without DDL, as in the local stack. */
  databaseAdminUrl: 'DATABASE_ADMIN_URL',
  /**
   * CA bundle (PEM) to verify the database's TLS certificate and host name against, for a URL
   * built from DATABASE_SECRET (sslmode=verify-full). The images carry the RDS bundle; the stack
   * sets it (lib/services/container-config.ts, the schema bootstrap).
   */
  databaseCaFile: 'DATABASE_CA_FILE',
  /** The schema bootstrap function's: the migrations hash its bundle carries (runtime/bootstrap/handler.ts tells a rollback by it). */
  migrationsHash: 'JOBS_MIGRATIONS_HASH',
  /** The bulk lane's queue and DLQ (the only ones before priority lanes, so a deployed queue is kept). */
  queueUrl: 'JOBS_QUEUE_URL',
  dlqUrl: 'JOBS_DLQ_URL',
  /** The urgent lane's queue and DLQ; unset, the urgent lane shares the bulk queue and DLQ. */
  urgentQueueUrl: 'JOBS_URGENT_QUEUE_URL',
  urgentDlqUrl: 'JOBS_URGENT_DLQ_URL',
  region: 'AWS_REGION',
  sqsEndpoint: 'JOBS_SQS_ENDPOINT',
  /** Attempts per SQS call (the first included) before the error reaches the caller; default 5. */
  sqsMaxAttempts: 'JOBS_SQS_MAX_ATTEMPTS',
  /** The HTTP client of the SQS hot path: platform (default) or node (node:http). */
  sqsHttpClient: 'JOBS_SQS_HTTP_CLIENT',
  leaseSeconds: 'JOBS_LEASE_SECONDS',
  heartbeatSeconds: 'JOBS_HEARTBEAT_SECONDS',
  visibilityTimeoutSeconds: 'JOBS_VISIBILITY_TIMEOUT_SECONDS',
  maxAttempts: 'JOBS_MAX_ATTEMPTS',
  maxReceiveCount: 'JOBS_MAX_RECEIVE_COUNT',
  backoffBaseSeconds: 'JOBS_BACKOFF_BASE_SECONDS',
  backoffMaxSeconds: 'JOBS_BACKOFF_MAX_SECONDS',
  concurrency: 'JOBS_CONCURRENCY',
  drainSeconds: 'JOBS_DRAIN_SECONDS',
  metricsNamespace: 'JOBS_METRICS_NAMESPACE',
  workerId: 'JOBS_WORKER_ID',
  /** Jobs a worker claims ahead of a free handler slot (default: JOBS_CONCURRENCY). */
  prefetch: 'JOBS_PREFETCH',
  /** How often a worker in ECS asks whether a newer deployment of its service has replaced it (worker/deployment-watch.ts). */
  deploymentCheckSeconds: 'JOBS_DEPLOYMENT_CHECK_SECONDS',
  /** The ERP clients' bearer token: every /v1 route. */
  apiToken: 'API_TOKEN',
  /** The on-call operator's bearer token: the on-call routes (runtime/http/oncall-routes.ts) need it when set; accepted on every /v1 route. */
  apiOperatorToken: 'API_OPERATOR_TOKEN',
  port: 'PORT',
  apiPoolSize: 'API_POOL_SIZE',
  logLevel: 'LOG_LEVEL',
} as const;

const TIMING_VARS: Record<keyof JobTimings, string> = {
  leaseSeconds: ENV.leaseSeconds,
  heartbeatSeconds: ENV.heartbeatSeconds,
  visibilityTimeoutSeconds: ENV.visibilityTimeoutSeconds,
  maxAttempts: ENV.maxAttempts,
  maxReceiveCount: ENV.maxReceiveCount,
  backoffBaseSeconds: ENV.backoffBaseSeconds,
  backoffMaxSeconds: ENV.backoffMaxSeconds,
  concurrency: ENV.concurrency,
  drainSeconds: ENV.drainSeconds,
};

type Env = Record<string, string | undefined>;

/**
 * DATABASE_URL as given, or built from the RDS secret JSON that ECS injects. A URL built from the
 * secret always uses TLS (the instance forces it): verified against DATABASE_CA_FILE, certificate
 * and host name (sslmode=verify-full), when that is set — as the stack does; encrypted but not
 * verified (sslmode=no-verify) when it is not, which databaseTlsUnverified() reports so the
 * services can warn at start.
 */
export function databaseUrlFromEnv(env: Env): string {
  const url = env[ENV.databaseUrl]?.trim();
  if (url) {
    if (!/^postgres(ql)?:\/\//.test(url)) {
      throw new ConfigError('environment', [
        { rule: 'database-url-scheme', message: `${ENV.databaseUrl} must start with postgres:// or postgresql:// (got "${redact(url)}")` },
      ]);
    }
    return url;
  }
  const secret = env[ENV.databaseSecret]?.trim();
  if (secret) {
    let s: Record<string, unknown>;
    try {
      s = JSON.parse(secret) as Record<string, unknown>;
    } catch {
      throw new ConfigError('environment', [
        {
          rule: 'database-secret-json',
          message: `${ENV.databaseSecret} is not valid JSON (expected the RDS secret: host, port, username, password, dbname)`,
        },
      ]);
    }
    const missing = ['host', 'username', 'password'].filter((k) => typeof s[k] !== 'string' || s[k] === '');
    if (missing.length > 0) {
      throw new ConfigError('environment', [
        {
          rule: 'database-secret-fields',
          message: `${ENV.databaseSecret} lacks ${missing.join(', ')} (expected the RDS secret: host, port, username, password, dbname)`,
        },
      ]);
    }
    const u = new URL('postgres://placeholder');
    u.hostname = String(s.host);
    u.port = String(s.port ?? 5432);
    u.username = encodeURIComponent(String(s.username));
    u.password = encodeURIComponent(String(s.password));
    u.pathname = `/${String(s.dbname ?? 'postgres')}`;
    const ca = env[ENV.databaseCaFile]?.trim();
    if (ca) {
      if (!isReadableFile(ca)) {
        throw new ConfigError('environment', [
          {
            rule: 'database-ca-file-readable',
            message: `${ENV.databaseCaFile} = ${ca} is not a readable file (the PEM bundle to verify the database's certificate; the images carry the RDS bundle at ${RDS_CA_BUNDLE_PATH})`,
          },
        ]);
      }
      u.searchParams.set('sslmode', 'verify-full');
      u.searchParams.set('sslrootcert', ca);
    } else {
      u.searchParams.set('sslmode', 'no-verify');
    }
    return u.toString();
  }
  throw new ConfigError('environment', [
    {
      rule: 'database-configured',
      message: `set ${ENV.databaseUrl} (postgres://user:password@host:port/db) or ${ENV.databaseSecret} (the RDS secret JSON). Locally: no stack is running in this directory (no .jobs-local/env); \`npm start\` runs one, and the jobs command finds it`,
    },
  ]);
}

/**
 * DATABASE_SECRET_ARN when set, checked: an ARN of Secrets Manager, beside the DATABASE_SECRET it
 * renews (a DATABASE_URL would take precedence over both, so the pair with one is refused).
 */
export function databaseSecretArnFromEnv(env: Env): string | undefined {
  const arn = env[ENV.databaseSecretArn]?.trim();
  if (!arn) return undefined;
  const violations: RuleViolation[] = [];
  if (!/^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:.+$/.test(arn)) {
    violations.push({
      rule: 'database-secret-arn',
      message: `${ENV.databaseSecretArn} must be a Secrets Manager secret ARN (arn:aws:secretsmanager:<region>:<account>:secret:<name>), got "${arn}"`,
    });
  }
  if (env[ENV.databaseUrl]?.trim() || !env[ENV.databaseSecret]?.trim()) {
    violations.push({
      rule: 'database-secret-arn-pairs-secret',
      message: `${ENV.databaseSecretArn} renews the credentials of ${ENV.databaseSecret}: set it with ${ENV.databaseSecret} and without ${ENV.databaseUrl}`,
    });
  }
  if (violations.length > 0) throw new ConfigError('environment', violations);
  return arn;
}

/** Where the service images keep the RDS CA bundle (docker/*.Dockerfile); the stack points DATABASE_CA_FILE at it. */
export const RDS_CA_BUNDLE_PATH = '/etc/ssl/certs/rds-global-bundle.pem';

/**
 * Why the database connection will be encrypted but its certificate not verified, or null: a
 * URL built from DATABASE_SECRET without DATABASE_CA_FILE. For a warning at start.
 */
export function databaseTlsUnverified(env: Env): string | null {
  if (env[ENV.databaseUrl]?.trim() || !env[ENV.databaseSecret]?.trim() || env[ENV.databaseCaFile]?.trim()) return null;
  return `${ENV.databaseCaFile} is not set: the database connection is encrypted but its certificate is not verified (sslmode=no-verify); set it to the RDS CA bundle (${RDS_CA_BUNDLE_PATH} in the images)`;
}

function isReadableFile(path: string): boolean {
  try {
    accessSync(path, constants.R_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** The job timings from JOBS_* variables (defaults for the unset ones), checked by the rules. */
export function jobTimingsFromEnv(env: Env, defaults: JobTimings = DEFAULT_JOB_TIMINGS): JobTimings {
  const violations: RuleViolation[] = [];
  const t = { ...defaults };
  for (const [key, name] of Object.entries(TIMING_VARS) as [keyof JobTimings, string][]) {
    const raw = env[name];
    if (raw === undefined || raw.trim() === '') continue;
    const n = Number(raw);
    if (!Number.isFinite(n)) {
      violations.push({ rule: `${key}-is-a-number`, message: `${name} = "${raw}" is not a number` });
      continue;
    }
    t[key] = n;
  }
  if (violations.length > 0) throw new ConfigError('environment', violations);
  try {
    return assertJobTimings(t, 'environment');
  } catch (err) {
    if (err instanceof ConfigError) {
      // Name the variables, not the TypeScript keys: that is what the person will edit.
      throw new ConfigError(
        'environment',
        err.violations.map((v) => ({
          rule: v.rule,
          message: (Object.entries(TIMING_VARS) as [string, string][]).reduce(
            (m, [key, name]) => m.replace(new RegExp(`\\b${key}\\b`, 'g'), name),
            v.message,
          ),
        })),
      );
    }
    throw err;
  }
}

export function requiredUrl(env: Env, name: string): string {
  const v = env[name]?.trim();
  if (!v) throw new ConfigError('environment', [{ rule: `${name.toLowerCase()}-set`, message: `${name} is required` }]);
  try {
    new URL(v);
  } catch {
    throw new ConfigError('environment', [{ rule: `${name.toLowerCase()}-url`, message: `${name} = "${v}" is not a URL` }]);
  }
  return v;
}

export function intFromEnv(env: Env, name: string, dflt: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return dflt;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new ConfigError('environment', [
      { rule: `${name.toLowerCase()}-range`, message: `${name} = "${raw}" must be a whole number between ${min} and ${max}` },
    ]);
  }
  return n;
}

/** Hide the password of a connection string in messages and logs. */
export function redact(url: string): string {
  return url.replace(/(\/\/[^:/@]+:)[^@]*@/, '$1***@');
}
