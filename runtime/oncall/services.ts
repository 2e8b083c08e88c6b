// The on-call services as the API and the CLI use them, built once from what the process already
// has (its pool, publisher and job queue) and the DLQs' URLs (each priority lane's, dlq-lanes.ts).
// Without a DLQ URL the dead-letter routes and commands answer that it is not configured;
// everything else works from the database.

import type pg from 'pg';
import { DEFAULT_JOB_TIMINGS } from '../config/rules.ts';
import { dlqUrlFromEnv, urgentDlqUrlFromEnv } from '../config/sqs.ts';
import type { Lane } from '../domain/lanes.ts';
import type { JobRegistry } from '../handlers/registry.ts';
import type { ScheduleDefinition } from '../handlers/schedule.ts';
import { SCHEDULES } from '../handlers/schedules.ts';
import type { Logger } from '../observability/log.ts';
import { createSqsClient } from '../queue/sqs.ts';
import type { JobQueue } from '../queue/types.ts';
import { JobClient } from '../store/client.ts';
import type { Publisher } from '../store/outbox.ts';
import { DeadJobService } from './dead-jobs.ts';
import { DeadLetterService, SqsDeadLetterQueue } from './dlq.ts';
import { LaneDeadLetters } from './dlq-lanes.ts';
import { RepublishService } from './republish.ts';
import { ScheduleService } from './schedules.ts';
import { DEFAULT_STUCK_THRESHOLDS, stuckThresholdsFromEnv, type StuckThresholds } from './stuck.ts';

export interface OpsServices {
  pool: pg.Pool;
  registry: JobRegistry;
  deadJobs: DeadJobService;
  /** Fresh messages for pending jobs whose message is lost (jobs republish). */
  republish: RepublishService;
  /** Every lane's DLQ; null when this process was given no DLQ URL. */
  deadLetters: LaneDeadLetters | null;
  stuck: StuckThresholds;
  /** The declared schedules: list, pause, resume, trigger (jobs schedules). */
  schedules: ScheduleService;
}

export interface OpsServicesOptions {
  pool: pg.Pool;
  registry: JobRegistry;
  publisher: Publisher;
  /** The job queue (resends go here). */
  queue: JobQueue;
  log: Logger;
  queueUrl?: string;
  dlqUrl?: string;
  /** The urgent lane's queue and DLQ, when it has its own (else its dead letters are in the bulk DLQ). */
  urgentQueueUrl?: string;
  urgentDlqUrl?: string;
  region?: string;
  /** A local SQS endpoint (no StartMessageMoveTask there). */
  endpoint?: string;
  stuck?: StuckThresholds;
  /** The schedules this build declares; default SCHEDULES (handlers/schedules.ts). */
  schedules?: readonly ScheduleDefinition[];
  /** Enqueues a triggered schedule's job; default a client on this pool, registry and publisher. */
  client?: JobClient;
  /** The attempt cap for a triggered job whose type and schedule set none (JOBS_MAX_ATTEMPTS); default the platform's. */
  defaultMaxAttempts?: number;
}

export function createOpsServices(o: OpsServicesOptions): OpsServices {
  let deadLetters: LaneDeadLetters | null = null;
  if (o.dlqUrl && o.queueUrl) {
    const client = createSqsClient({ ...(o.region ? { region: o.region } : {}), ...(o.endpoint ? { endpoint: o.endpoint } : {}) });
    const lane = (lane: Lane, dlqUrl: string, queueUrl: string) => ({
      lane,
      service: new DeadLetterService({
        pool: o.pool,
        dlq: new SqsDeadLetterQueue({ dlqUrl, queueUrl, client, local: Boolean(o.endpoint) }),
        queue: o.queue,
        log: o.log,
        lane,
      }),
    });
    deadLetters = new LaneDeadLetters([
      ...(o.urgentDlqUrl && o.urgentQueueUrl ? [lane('urgent', o.urgentDlqUrl, o.urgentQueueUrl)] : []),
      lane('bulk', o.dlqUrl, o.queueUrl),
    ]);
  }
  return {
    pool: o.pool,
    registry: o.registry,
    deadJobs: new DeadJobService(o.pool, o.publisher),
    republish: new RepublishService(o.pool, o.publisher),
    deadLetters,
    stuck: o.stuck ?? DEFAULT_STUCK_THRESHOLDS,
    schedules: new ScheduleService(
      o.pool,
      o.client ??
        new JobClient({
          pool: o.pool,
          registry: o.registry,
          publisher: o.publisher,
          defaultMaxAttempts: o.defaultMaxAttempts ?? DEFAULT_JOB_TIMINGS.maxAttempts,
        }),
      o.schedules ?? SCHEDULES,
    ),
  };
}

/** What the API needs beyond its own configuration to serve the on-call routes. */
export interface OpsConfig {
  /** The DLQ (JOBS_DLQ_URL); absent: the /v1/dlq routes answer 501. */
  dlqUrl?: string;
  /** The urgent lane's DLQ (JOBS_URGENT_DLQ_URL), when it has its own. */
  urgentDlqUrl?: string;
  stuck: StuckThresholds;
}

export function opsConfigFromEnv(env: Record<string, string | undefined>): OpsConfig {
  const dlqUrl = dlqUrlFromEnv(env);
  const urgentDlqUrl = urgentDlqUrlFromEnv(env);
  return { ...(dlqUrl ? { dlqUrl } : {}), ...(urgentDlqUrl ? { urgentDlqUrl } : {}), stuck: stuckThresholdsFromEnv(env) };
}
