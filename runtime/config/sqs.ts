// The SQS settings from the environment, read in this one place so the worker, the API (its
// relay, live view and on-call routes), the jobs command and the local stack's helpers agree on
// them and on their defaults. The region is AWS_REGION. Only next to a local SQS endpoint
// (JOBS_SQS_ENDPOINT, which ignores regions) may it default to us-east-1; anywhere else a missing
// region is refused rather than guessed, because a guess signs every call for the wrong region
// and fails far from the cause. Every URL given is checked to be a URL.
//
// Priority lanes: JOBS_QUEUE_URL / JOBS_DLQ_URL are the bulk lane's; JOBS_URGENT_QUEUE_URL /
// JOBS_URGENT_DLQ_URL the urgent lane's. Without an urgent queue the urgent lane shares the bulk
// queue and DLQ; with one, whoever needs the DLQ needs the urgent DLQ too.
//
// JOBS_SQS_MAX_ATTEMPTS: attempts per SQS call before its error reaches the caller (the SDK
// client's maxAttempts, which the wire takes too); unset, the client's default of 5.
//
// JOBS_SQS_HTTP_CLIENT: what sends the hot path's calls, `platform` (the default: the platform's
// own HTTP/1.1 client, runtime/queue/http1.ts) or `node` (node:http, at about twice the CPU a call).

import { ENV, intFromEnv, requiredUrl } from './env.ts';
import { ConfigError, type RuleViolation } from './rules.ts';

type Env = Record<string, string | undefined>;

/** The HTTP clients the SQS hot path can send through (JOBS_SQS_HTTP_CLIENT; runtime/queue/sqs-wire.ts). */
export const SQS_HTTP_CLIENTS = ['platform', 'node'] as const;
export type SqsHttpClient = (typeof SQS_HTTP_CLIENTS)[number];

/** The region assumed next to a local SQS endpoint; `jobs local` writes it to .jobs-local/env as AWS_REGION. */
export const LOCAL_SQS_REGION = 'us-east-1';

export interface SqsSettings {
  /** JOBS_QUEUE_URL: the job queue. */
  queueUrl: string;
  /** JOBS_DLQ_URL: the dead-letter queue, when given. */
  dlqUrl?: string;
  /** JOBS_URGENT_QUEUE_URL: the urgent lane's queue; absent, the urgent lane shares queueUrl. */
  urgentQueueUrl?: string;
  /** JOBS_URGENT_DLQ_URL: the urgent lane's DLQ (given whenever urgentQueueUrl is and the DLQ is needed). */
  urgentDlqUrl?: string;
  /** JOBS_SQS_ENDPOINT: a local SQS endpoint (the emulator); absent in AWS. */
  endpoint?: string;
  /** AWS_REGION, or LOCAL_SQS_REGION next to a local endpoint. */
  region: string;
  /** JOBS_SQS_MAX_ATTEMPTS, when set: attempts per SQS call, the first included. */
  maxAttempts?: number;
  /** JOBS_SQS_HTTP_CLIENT, when set: what sends the hot path's calls. */
  httpClient?: SqsHttpClient;
}

/** The bounds of JOBS_SQS_MAX_ATTEMPTS: one attempt at least; past 10 the backoff (capped at 20 s) holds a caller for minutes. */
export const SQS_MAX_ATTEMPTS_RANGE = { min: 1, max: 10 } as const;

export interface SqsNeeds {
  /** JOBS_DLQ_URL must be set (the worker sends dead letters there); otherwise it is optional and checked when set. */
  dlq?: boolean;
}

/**
 * The SQS settings, checked: every problem is reported at once in one ConfigError, each naming
 * its variable and rule (the API merges them into its own report).
 */
export function sqsFromEnv(env: Env, needs: { dlq: true }): SqsSettings & { dlqUrl: string };
export function sqsFromEnv(env: Env, needs?: SqsNeeds): SqsSettings;
export function sqsFromEnv(env: Env, needs: SqsNeeds = {}): SqsSettings {
  const violations: RuleViolation[] = [];
  const url = (name: string, required: boolean): string | undefined => {
    if (!required && !env[name]?.trim()) return undefined;
    try {
      return requiredUrl(env, name);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      violations.push(...err.violations);
      return undefined;
    }
  };
  const queueUrl = url(ENV.queueUrl, true);
  const dlqUrl = url(ENV.dlqUrl, needs.dlq === true);
  const urgentQueueUrl = url(ENV.urgentQueueUrl, false);
  const urgentDlqUrl = url(ENV.urgentDlqUrl, needs.dlq === true && urgentQueueUrl !== undefined);
  if (urgentQueueUrl && urgentQueueUrl === queueUrl) {
    violations.push({
      rule: 'urgent-queue-distinct',
      message: `${ENV.urgentQueueUrl} must differ from ${ENV.queueUrl} (the urgent lane's own queue; leave it unset to share the bulk queue)`,
    });
  }
  if (urgentDlqUrl && !env[ENV.urgentQueueUrl]?.trim()) {
    violations.push({
      rule: 'urgent-dlq-with-queue',
      message: `${ENV.urgentDlqUrl} is set without ${ENV.urgentQueueUrl}: the urgent lane's DLQ belongs with its own queue (set both, or neither to share the bulk queue and DLQ)`,
    });
  }
  if (urgentDlqUrl && urgentDlqUrl === dlqUrl) {
    violations.push({
      rule: 'urgent-dlq-distinct',
      message: `${ENV.urgentDlqUrl} must differ from ${ENV.dlqUrl} (each lane's DLQ is its own)`,
    });
  }
  const endpoint = url(ENV.sqsEndpoint, false);
  let maxAttempts: number | undefined;
  if (env[ENV.sqsMaxAttempts]?.trim()) {
    try {
      maxAttempts = intFromEnv(env, ENV.sqsMaxAttempts, 5, SQS_MAX_ATTEMPTS_RANGE.min, SQS_MAX_ATTEMPTS_RANGE.max);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      violations.push(...err.violations);
    }
  }
  const httpClient = env[ENV.sqsHttpClient]?.trim() || undefined;
  if (httpClient !== undefined && !(SQS_HTTP_CLIENTS as readonly string[]).includes(httpClient)) {
    violations.push({
      rule: 'sqs-http-client',
      message: `${ENV.sqsHttpClient} must be one of ${SQS_HTTP_CLIENTS.join(', ')} (got ${JSON.stringify(httpClient)}); unset, platform`,
    });
  }
  const region = env[ENV.region]?.trim() || (env[ENV.sqsEndpoint]?.trim() ? LOCAL_SQS_REGION : undefined);
  if (!region) {
    violations.push({
      rule: 'aws-region-set',
      message: `${ENV.region} is required (the region of the queues, e.g. ${ENV.region}=eu-west-1); it defaults to ${LOCAL_SQS_REGION} only next to a local ${ENV.sqsEndpoint}, as in .jobs-local/env`,
    });
  }
  if (violations.length > 0) throw new ConfigError('environment', violations);
  return {
    queueUrl: queueUrl!,
    ...(dlqUrl ? { dlqUrl } : {}),
    ...(urgentQueueUrl ? { urgentQueueUrl } : {}),
    ...(urgentDlqUrl ? { urgentDlqUrl } : {}),
    ...(endpoint ? { endpoint } : {}),
    region: region!,
    ...(maxAttempts !== undefined ? { maxAttempts } : {}),
    ...(httpClient !== undefined ? { httpClient: httpClient as SqsHttpClient } : {}),
  };
}

/**
 * For the jobs command, which also works on the database alone: null when JOBS_QUEUE_URL is not
 * set (the outbox relay publishes what it enqueues), else the same settings and refusals as the
 * services — a missing region included.
 */
export function sqsFromEnvIfSet(env: Env): SqsSettings | null {
  return env[ENV.queueUrl]?.trim() ? sqsFromEnv(env) : null;
}

/** JOBS_DLQ_URL alone, when given (checked to be a URL): for what only shows or reads the DLQ beside a queue configured elsewhere. */
export function dlqUrlFromEnv(env: Env): string | undefined {
  return env[ENV.dlqUrl]?.trim() ? requiredUrl(env, ENV.dlqUrl) : undefined;
}

/** JOBS_URGENT_DLQ_URL alone, when given (checked to be a URL), as dlqUrlFromEnv. */
export function urgentDlqUrlFromEnv(env: Env): string | undefined {
  return env[ENV.urgentDlqUrl]?.trim() ? requiredUrl(env, ENV.urgentDlqUrl) : undefined;
}

/**
 * Whether an SQS endpoint is on this machine (the local stack's emulator), whose message counts
 * are exact at once: a VPC interface endpoint's name is not, and keeps SQS's count lag.
 */
export function isLocalEndpoint(endpoint: string | undefined): boolean {
  if (!endpoint) return false;
  try {
    const host = new URL(endpoint).hostname.replace(/^\[|\]$/g, '');
    return host === 'localhost' || host.endsWith('.localhost') || host === '::1' || /^127\./.test(host);
  } catch {
    return false;
  }
}
