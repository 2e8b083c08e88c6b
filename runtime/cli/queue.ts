// The queue a `jobs` command publishes to: SQS when the environment names one (each lane's queue),
// else a stand-in whose send fails, so what the command enqueued stays in the outbox for the
// services' relay.

import { ENV } from '../config/env.ts';
import type { SqsSettings } from '../config/sqs.ts';
import { sqsClientOptions, sqsLanes } from '../queue/lanes.ts';
import { createSqsClient } from '../queue/sqs.ts';
import type { JobQueue } from '../queue/types.ts';

export function cliQueue(sqs: SqsSettings | null | undefined): JobQueue {
  // A one-shot command: its few calls stay on the SDK (the client handed in says so, queue/sqs.ts).
  if (sqs) return sqsLanes(sqs, { client: createSqsClient(sqsClientOptions(sqs)) }).queue;
  return {
    send: async () => {
      throw new Error(`${ENV.queueUrl} is not set: the outbox relay will publish`);
    },
    receive: async () => [],
    changeVisibility: async () => [],
    delete: async () => [],
  };
}
