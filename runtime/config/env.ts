// Reads the services' configuration from the environment and checks it with the same rules
// the CDK app applies at synth (rules.ts). A bad value stops the start with its variable name,
// its value and the rule it broke. The variable names are the contract with lib/ (the ECS task
// definitions set them) and with the local stack (.jobs-local/env).

import { assertJobTimings, ConfigError, DEFAULT_JOB_TIMINGS, type JobTimings, type RuleViolation } from './rules.ts';

export const ENV = {
  databaseUrl: 'DATABASE_URL',
  /** The RDS-generated Secrets Manager secret as JSON ({host, port, username, password, dbname}), injected by ECS. */
  databaseSecret: 'DATABASE_SECRET',
  queueUrl: 'JOBS_QUEUE_URL',
  dlqUrl: 'JOBS_DLQ_URL',
  region: 'AWS_REGION',
  sqsEndpoint: 'JOBS_SQS_ENDPOINT',
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
  /** The ERP clients' bearer token: every /v1 route. */
  apiToken: 'API_TOKEN',
  /** The on-call operator's bearer token: the on-call routes (runtime/ops/api.ts) need it when set; accepted on every /v1 route. */
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

/** DATABASE_URL as given, or built from the RDS secret JSON that ECS injects. */
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
      throw new ConfigError('environment', [{ rule: 'database-secret-json', message: `${ENV.databaseSecret} is not valid JSON (expected the RDS secret: host, port, username, password, dbname)` }]);
    }
    const missing = ['host', 'username', 'password'].filter((k) => typeof s[k] !== 'string' || s[k] === '');
    if (missing.length > 0) {
      throw new ConfigError('environment', [{ rule: 'database-secret-fields', message: `${ENV.databaseSecret} lacks ${missing.join(', ')} (expected the RDS secret: host, port, username, password, dbname)` }]);
    }
    const u = new URL('postgres://placeholder');
    u.hostname = String(s.host);
    u.port = String(s.port ?? 5432);
    u.username = encodeURIComponent(String(s.username));
    u.password = encodeURIComponent(String(s.password));
    u.pathname = `/${String(s.dbname ?? 'postgres')}`;
    // RDS requires TLS; verify against the system trust store plus the RDS bundle in the image.
    u.searchParams.set('sslmode', 'no-verify');
    return u.toString();
  }
  throw new ConfigError('environment', [
    {
      rule: 'database-configured',
      message: `set ${ENV.databaseUrl} (postgres://user:password@host:port/db) or ${ENV.databaseSecret} (the RDS secret JSON); locally, \`npm start\` runs a stack whose .jobs-local/env the jobs command reads`,
    },
  ]);
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
    throw new ConfigError('environment', [{ rule: `${name.toLowerCase()}-range`, message: `${name} = "${raw}" must be a whole number between ${min} and ${max}` }]);
  }
  return n;
}

/** Hide the password of a connection string in messages and logs. */
export function redact(url: string): string {
  return url.replace(/(\/\/[^:/@]+:)[^@]*@/, '$1***@');
}
