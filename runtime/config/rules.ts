// The configuration rules of the job platform, as one pure function.
//
// The worker checks its environment with these rules at start, and the CDK app checks each
// environment's config with the same rules at synth, so a combination that would let a healthy
// job lose its lease, or let SQS dead-letter a job the database still wants to retry, never
// reaches a running system. No I/O here: lib/ imports this file.

/** SQS's hard limit on a message's visibility timeout (12 hours). */
export const SQS_MAX_VISIBILITY_SECONDS = 43_200;
/** SQS's limits on a redrive policy's maxReceiveCount. */
export const SQS_MAX_RECEIVE_COUNT = 1_000;
/** ECS stops a task with SIGKILL at most 120 s after SIGTERM (Fargate's stopTimeout cap). */
export const ECS_MAX_STOP_TIMEOUT_SECONDS = 120;
/** Time the worker needs after its drain deadline to release what is left (fenced UPDATE + visibility 0). */
export const RELEASE_MARGIN_SECONDS = 10;
/** A heartbeat must fit this many times into the lease and into the visibility timeout. */
export const HEARTBEAT_MARGIN = 3;
/** Receives SQS may spend on one job beyond one per attempt: duplicate deliveries, early arrivals, lost claims. */
export const RECEIVE_HEADROOM = 3;
/** Most jobs a worker claims ahead of a free handler slot (JOBS_PREFETCH). */
export const MAX_PREFETCH = 1_000;

export interface JobTimings {
  /** How long a claim is valid without a heartbeat. */
  leaseSeconds: number;
  /** How often a worker renews all its leases (one statement) and extends its messages. */
  heartbeatSeconds: number;
  /** The queue's visibility timeout: how long a received message stays hidden before the first heartbeat. */
  visibilityTimeoutSeconds: number;
  /** The database's attempt cap for a job that does not set its own. */
  maxAttempts: number;
  /** The SQS redrive policy's maxReceiveCount (the net for what the worker cannot reach). */
  maxReceiveCount: number;
  /** First retry delay; doubles per attempt. */
  backoffBaseSeconds: number;
  /** Cap on the retry delay. */
  backoffMaxSeconds: number;
  /** Jobs one worker process runs at once. */
  concurrency: number;
  /** How long a stopping worker lets running jobs finish before it releases them. */
  drainSeconds: number;
}

export interface RuleViolation {
  /** Stable name of the rule, e.g. `heartbeat-within-lease`. */
  rule: string;
  /** What a person reads: the values, the rule, the fix. */
  message: string;
}

export class ConfigError extends Error {
  readonly violations: RuleViolation[];
  constructor(source: string, violations: RuleViolation[]) {
    super(`${source}: invalid job platform configuration:\n${violations.map((v) => `  - [${v.rule}] ${v.message}`).join('\n')}`);
    this.name = 'ConfigError';
    this.violations = violations;
  }
}

interface Bound {
  key: keyof JobTimings;
  min: number;
  max: number;
  integer: boolean;
  why: string;
}

const BOUNDS: Bound[] = [
  {
    key: 'leaseSeconds',
    min: 2,
    max: SQS_MAX_VISIBILITY_SECONDS,
    integer: false,
    why: 'a lease shorter than 2 s cannot survive one database round trip under load; longer than 12 h outlives the message that carries it',
  },
  {
    key: 'heartbeatSeconds',
    min: 0.2,
    max: SQS_MAX_VISIBILITY_SECONDS,
    integer: false,
    why: 'a heartbeat more often than every 200 ms costs more than the jobs it guards',
  },
  {
    key: 'visibilityTimeoutSeconds',
    min: 1,
    max: SQS_MAX_VISIBILITY_SECONDS,
    integer: true,
    why: 'SQS accepts whole seconds up to 12 h (43200)',
  },
  { key: 'maxAttempts', min: 1, max: 100, integer: true, why: 'a job gets at least one attempt; past 100 a failure is not transient' },
  { key: 'maxReceiveCount', min: 1, max: SQS_MAX_RECEIVE_COUNT, integer: true, why: 'SQS accepts 1 to 1000' },
  {
    key: 'backoffBaseSeconds',
    min: 0.1,
    max: SQS_MAX_VISIBILITY_SECONDS,
    integer: false,
    why: 'the first retry delay must be positive and fit a message visibility',
  },
  {
    key: 'backoffMaxSeconds',
    min: 0.1,
    max: SQS_MAX_VISIBILITY_SECONDS,
    integer: false,
    why: 'a retry delay must fit one SQS visibility timeout (12 h)',
  },
  { key: 'concurrency', min: 1, max: 500, integer: true, why: 'one process runs at least one job and at most 500' },
  {
    key: 'drainSeconds',
    min: 0,
    max: ECS_MAX_STOP_TIMEOUT_SECONDS - RELEASE_MARGIN_SECONDS,
    integer: false,
    why: `ECS kills a task ${ECS_MAX_STOP_TIMEOUT_SECONDS} s after SIGTERM and the release needs ${RELEASE_MARGIN_SECONDS} s after the drain`,
  },
];

/**
 * Every rule the timings break, each with the values and the fix. Empty when the
 * configuration is sound.
 */
export function checkJobTimings(t: JobTimings): RuleViolation[] {
  const out: RuleViolation[] = [];
  for (const b of BOUNDS) {
    const v = t[b.key];
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      out.push({ rule: `${b.key}-is-a-number`, message: `${b.key} = ${String(v)} is not a number` });
    } else if (b.integer && !Number.isInteger(v)) {
      out.push({ rule: `${b.key}-is-an-integer`, message: `${b.key} = ${v} must be a whole number (${b.why})` });
    } else if (v < b.min || v > b.max) {
      out.push({ rule: `${b.key}-in-range`, message: `${b.key} = ${v} must be between ${b.min} and ${b.max} (${b.why})` });
    }
  }
  // Relations only mean something between numbers that passed their own bounds.
  if (out.length > 0) return out;

  if (t.heartbeatSeconds * HEARTBEAT_MARGIN > t.leaseSeconds) {
    out.push({
      rule: 'heartbeat-within-lease',
      message:
        `heartbeatSeconds = ${t.heartbeatSeconds} must be at most 1/${HEARTBEAT_MARGIN} of leaseSeconds = ${t.leaseSeconds}, ` +
        `so a lease survives ${HEARTBEAT_MARGIN - 1} missed heartbeats; lower the heartbeat to ≤ ${round(t.leaseSeconds / HEARTBEAT_MARGIN)} or raise the lease to ≥ ${round(t.heartbeatSeconds * HEARTBEAT_MARGIN)}`,
    });
  }
  if (t.heartbeatSeconds * HEARTBEAT_MARGIN > t.visibilityTimeoutSeconds) {
    out.push({
      rule: 'heartbeat-within-visibility',
      message:
        `heartbeatSeconds = ${t.heartbeatSeconds} must be at most 1/${HEARTBEAT_MARGIN} of visibilityTimeoutSeconds = ${t.visibilityTimeoutSeconds}, ` +
        `or a message reappears to another worker before its first extension; lower the heartbeat to ≤ ${round(t.visibilityTimeoutSeconds / HEARTBEAT_MARGIN)} or raise the visibility timeout to ≥ ${Math.ceil(t.heartbeatSeconds * HEARTBEAT_MARGIN)}`,
    });
  }
  if (t.maxReceiveCount < t.maxAttempts + RECEIVE_HEADROOM) {
    out.push({
      rule: 'receive-count-above-attempts',
      message:
        `maxReceiveCount = ${t.maxReceiveCount} must be at least maxAttempts + ${RECEIVE_HEADROOM} = ${t.maxAttempts + RECEIVE_HEADROOM}: ` +
        `every attempt costs a receive and duplicate deliveries cost more, so a lower count lets SQS dead-letter a job the database still retries; raise maxReceiveCount or lower maxAttempts`,
    });
  }
  if (t.backoffMaxSeconds < t.backoffBaseSeconds) {
    out.push({
      rule: 'backoff-cap-above-base',
      message: `backoffMaxSeconds = ${t.backoffMaxSeconds} must be at least backoffBaseSeconds = ${t.backoffBaseSeconds}`,
    });
  }
  return out;
}

/** Throws a ConfigError naming every broken rule; `source` says where the values came from. */
export function assertJobTimings(t: JobTimings, source: string): JobTimings {
  const violations = checkJobTimings(t);
  if (violations.length > 0) throw new ConfigError(source, violations);
  return t;
}

/** Sensible defaults for a production worker; environments override what they need. */
export const DEFAULT_JOB_TIMINGS: JobTimings = {
  leaseSeconds: 60,
  heartbeatSeconds: 10,
  visibilityTimeoutSeconds: 90,
  maxAttempts: 5,
  maxReceiveCount: 10,
  backoffBaseSeconds: 5,
  backoffMaxSeconds: 900,
  concurrency: 10,
  drainSeconds: 90,
};

function round(n: number): number {
  return Math.round(n * 100) / 100;
}

/**
 * The worker's own pool: one connection per concurrent job (its fenced transaction) plus two for
 * the heartbeat, the claims and the completions.
 */
export function workerPoolSize(concurrency: number): number {
  return concurrency + 2;
}

/**
 * The maintenance loops' pool in a worker process (outbox relay, rescuer, reconciler, dead-report
 * sweeper, stuck count, pruner, scheduler), apart from the worker's: the relay sends to SQS inside
 * its transaction and the reconciler counts the queue inside its own, so a slow SQS holds their
 * connections; sharing the worker's pool, that starved the heartbeat and healthy jobs lost their
 * leases.
 */
export const WORKER_MAINTENANCE_CONNECTIONS = 2;

/**
 * How long the worker's own statements (claims, renewals, completions, its database probe) wait
 * for an answer: a third of the lease, between 5 and 20 s (20 s in production, lease 60 s). A
 * renewal that has not answered by then will not save the lease anyway; failing it as
 * unavailable closes the gate and frees the connection, where a server gone without a reset
 * would hold it until TCP gives up (~15 min). Never under 5 s: a claim queued behind a migration's
 * lock waits up to 2 s by design (migrate.ts), and is not an outage.
 */
export function workerQueryTimeoutMs(t: Pick<JobTimings, 'leaseSeconds'>): number {
  return Math.round(Math.min(20_000, Math.max(5_000, (t.leaseSeconds * 1000) / 3)));
}

/** The maintenance loops' statements: a minute (a prune batch, the reconciler's count). */
export const MAINTENANCE_QUERY_TIMEOUT_MS = 60_000;

/** Connections one worker process may open, both pools: what the CDK connection budget counts per task. */
export function workerConnections(concurrency: number): number {
  return workerPoolSize(concurrency) + WORKER_MAINTENANCE_CONNECTIONS;
}

/**
 * A message older than this is not hidden again to wait for its job's time (a future run_at, a
 * retry's backoff): a fresh message replaces it. SQS's oldest-message age (the queue-age alarm)
 * counts a message from its sending across every receive and hide, so without this a job due in
 * hours, or a long job's retry, would make a healthy queue look hours behind. With it, a message
 * waits at most twice this before its job is due (a delay or a hide of at most this, when younger
 * than this): lib/config.ts checks the alarm against it.
 */
export const MAX_WAITING_MESSAGE_AGE_SECONDS = 900; // SQS's longest message delay (queue/types.ts SQS_MAX_DELAY_SECONDS)
