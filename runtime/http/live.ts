// The live view inside the API service: its configuration from the environment and the parts
// it runs (the LISTEN feed, queue-depth reads, the routes). api/main.ts starts it beside the API
// and stops it first on shutdown, so open streams do not hold the drain.
//
//   JOBS_EVENTS=notify          the event bus is on (the local stack sets it): the API LISTENs
//   JOBS_DLQ_URL                the DLQ whose depth the page shows (n/a without it)
//   JOBS_URGENT_DLQ_URL         the urgent lane's DLQ, counted with it (the urgent queue comes with the API's queues)
//   JOBS_LIVE_FAULTS_URL/TOKEN  the local stack's fault control (never set in production)

import type pg from 'pg';
import type { DatabaseCredentialSource } from '../db/credentials.ts';
import { jobTimingsFromEnv } from '../config/env.ts';
import { dlqUrlFromEnv, urgentDlqUrlFromEnv } from '../config/sqs.ts';
import { createSqsClient } from '../queue/sqs.ts';
import type { Logger } from '../observability/log.ts';
import type { JobStore } from '../store/job-store.ts';
import { eventsEnabled } from '../live/events.ts';
import { LiveFeed } from '../live/feed.ts';
import { CachedQueueDepth, laneQueueDepth, queueDepth } from '../live/queue-depth.ts';
import { createLiveRoutes, type LiveRoutes } from './live-routes.ts';

export const FAULTS_URL_ENV = 'JOBS_LIVE_FAULTS_URL';
export const FAULTS_TOKEN_ENV = 'JOBS_LIVE_FAULTS_TOKEN';

export interface LiveConfig {
  events: boolean;
  dlqUrl?: string;
  urgentDlqUrl?: string;
  faults?: { url: string; token: string };
  leaseSeconds: number;
  heartbeatSeconds: number;
  /** The attempt cap of jobs that set none: the page warns that fault clicks spend attempts. */
  maxAttempts: number;
}

export function liveConfigFromEnv(env: Record<string, string | undefined>): LiveConfig {
  const timings = jobTimingsFromEnv(env);
  const dlqUrl = dlqUrlFromEnv(env);
  const urgentDlqUrl = urgentDlqUrlFromEnv(env);
  const faultsUrl = env[FAULTS_URL_ENV]?.trim();
  const faultsToken = env[FAULTS_TOKEN_ENV]?.trim();
  return {
    events: eventsEnabled(env),
    ...(dlqUrl ? { dlqUrl } : {}),
    ...(urgentDlqUrl ? { urgentDlqUrl } : {}),
    ...(faultsUrl && faultsToken ? { faults: { url: faultsUrl, token: faultsToken } } : {}),
    leaseSeconds: timings.leaseSeconds,
    heartbeatSeconds: timings.heartbeatSeconds,
    maxAttempts: timings.maxAttempts,
  };
}

export interface RunningLive {
  routes: LiveRoutes;
  feed: LiveFeed | null;
  stop(): Promise<void>;
}

export async function startLive(
  config: LiveConfig,
  deps: {
    databaseUrl: string;
    /** The services' credentials as last read (db/credentials.ts), for the feed's LISTEN session. */
    credentials?: DatabaseCredentialSource;
    pool: pg.Pool;
    store: JobStore;
    log: Logger;
    sqs?: { queueUrl: string; urgentQueueUrl?: string; region: string; endpoint?: string };
  },
): Promise<RunningLive> {
  const feed = config.events
    ? new LiveFeed({ url: deps.databaseUrl, log: deps.log, ...(deps.credentials ? { credentials: deps.credentials } : {}) })
    : null;
  await feed?.start();
  const client = deps.sqs
    ? createSqsClient({ region: deps.sqs.region, maxAttempts: 1, ...(deps.sqs.endpoint ? { endpoint: deps.sqs.endpoint } : {}) })
    : null;
  // Both lanes' queues together when the urgent lane has its own (each lane's own beside).
  const depth = (url: string | undefined, urgentUrl: string | undefined) => {
    if (!client || !url) return undefined;
    const read = urgentUrl
      ? () =>
          laneQueueDepth(
            () => queueDepth(client, urgentUrl),
            () => queueDepth(client, url),
          )
      : () => queueDepth(client, url);
    const cached = new CachedQueueDepth(read, 1000);
    return () => cached.get();
  };
  const queueDepthFn = depth(deps.sqs?.queueUrl, deps.sqs?.urgentQueueUrl);
  const dlqDepthFn = depth(config.dlqUrl, config.urgentDlqUrl);
  const routes = createLiveRoutes({
    pool: deps.pool,
    store: deps.store,
    feed,
    ...(queueDepthFn ? { queueDepth: queueDepthFn } : {}),
    ...(dlqDepthFn ? { dlqDepth: dlqDepthFn } : {}),
    ...(config.faults ? { faults: config.faults } : {}),
    leaseSeconds: config.leaseSeconds,
    heartbeatSeconds: config.heartbeatSeconds,
    maxAttempts: config.maxAttempts,
    log: deps.log,
  });
  return {
    routes,
    feed,
    async stop() {
      routes.close();
      await feed?.stop();
      client?.destroy();
    },
  };
}
