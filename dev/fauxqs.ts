// A local SQS endpoint (the fauxqs npm package) with the job queues of both priority lanes (bulk:
// the job queue; urgent), each with its DLQ and the redrive policy the CDK stack sets, for the
// tests and `jobs local`. Dev dependency only.
import type { JobTimings } from '../runtime/config/rules.ts';
import { importDevDependency } from './dev-dependency.ts';

export interface LocalSqs {
  endpoint: string;
  port: number;
  queueUrl: string;
  dlqUrl: string;
  queueName: string;
  dlqName: string;
  /** The urgent lane's queue and DLQ (JOBS_URGENT_QUEUE_URL / JOBS_URGENT_DLQ_URL). */
  urgentQueueUrl: string;
  urgentDlqUrl: string;
  urgentQueueName: string;
  urgentDlqName: string;
  stop(): Promise<void>;
  /** Non-destructive look at a queue's messages (fauxqs inspection API). */
  inspect(name: string): { ready: number; delayed: number; inflight: number; bodies: string[] };
}

export async function startLocalSqs(opts: {
  port?: number;
  timings: Pick<JobTimings, 'visibilityTimeoutSeconds' | 'maxReceiveCount'>;
  prefix?: string;
}): Promise<LocalSqs> {
  const { startFauxqs } = await importDevDependency('fauxqs', () => import('fauxqs'));
  const server = await startFauxqs({ port: opts.port ?? 0, logger: false });
  const prefix = opts.prefix ?? 'erp-jobs';
  const dlqName = `${prefix}-dlq`;
  const queueName = `${prefix}-queue`;
  const urgentDlqName = `${prefix}-urgent-dlq`;
  const urgentQueueName = `${prefix}-urgent-queue`;
  // Each lane: a queue whose redrive policy sends a message received too often to the lane's own DLQ.
  const lane = (name: string, deadName: string) => {
    const dlq = server.createQueue(deadName, { attributes: { MessageRetentionPeriod: String(14 * 24 * 3600) } });
    const queue = server.createQueue(name, {
      attributes: {
        VisibilityTimeout: String(opts.timings.visibilityTimeoutSeconds),
        MessageRetentionPeriod: String(4 * 24 * 3600),
        RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlq.queueArn, maxReceiveCount: opts.timings.maxReceiveCount }),
      },
    });
    return { queue, dlq };
  };
  const { queue, dlq } = lane(queueName, dlqName);
  const urgent = lane(urgentQueueName, urgentDlqName);
  return {
    endpoint: `http://127.0.0.1:${server.port}`,
    port: server.port,
    queueUrl: queue.queueUrl,
    dlqUrl: dlq.queueUrl,
    queueName,
    dlqName,
    urgentQueueUrl: urgent.queue.queueUrl,
    urgentDlqUrl: urgent.dlq.queueUrl,
    urgentQueueName,
    urgentDlqName,
    stop: () => server.stop(),
    inspect(name) {
      const q = server.inspectQueue(name);
      if (!q) throw new Error(`no local queue ${name}`);
      const all = [...q.messages.ready, ...q.messages.delayed, ...q.messages.inflight.map((i) => i.message)];
      return {
        ready: q.messages.ready.length,
        delayed: q.messages.delayed.length,
        inflight: q.messages.inflight.length,
        bodies: all.map((m) => m.body),
      };
    },
  };
}
