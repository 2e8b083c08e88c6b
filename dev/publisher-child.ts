// A publisher that dies between COMMIT and publish, for the fault injector (faults.ts): a real
// process enqueues one job through JobClient.enqueue in its own transaction, COMMITs, prints
// `committed <job id>` and then waits before calling afterCommit(). The injector SIGKILLs it on
// that line, so the job row and its outbox row are committed and no message was ever sent:
// the outbox relay must publish it (DESIGN 7).
//
// Usage: node --import tsx dev/publisher-child.ts '<EnqueueSpec JSON>'
// with DATABASE_URL, JOBS_QUEUE_URL, JOBS_SQS_ENDPOINT, AWS_REGION from the local stack.

import { JobClient, type EnqueueSpec } from '../runtime/store/client.ts';
import { databaseUrlFromEnv, jobTimingsFromEnv } from '../runtime/config/env.ts';
import { sqsFromEnv } from '../runtime/config/sqs.ts';
import { createPool } from '../runtime/db/pool.ts';
import { defaultRegistry } from '../runtime/handlers/index.ts';
import { silentLogger } from '../runtime/observability/log.ts';
import { sqsLanes } from '../runtime/queue/lanes.ts';
import { Publisher } from '../runtime/store/outbox.ts';

const spec = JSON.parse(process.argv[2] ?? '{}') as EnqueueSpec;
const pool = createPool({ url: databaseUrlFromEnv(process.env), max: 1, applicationName: 'jobs-local publisher-child' });
const queue = sqsLanes(sqsFromEnv(process.env)).queue;
const client = new JobClient({
  pool,
  registry: defaultRegistry(),
  publisher: new Publisher(pool, queue, silentLogger),
  defaultMaxAttempts: jobTimingsFromEnv(process.env).maxAttempts,
});

const tx = await pool.connect();
await tx.query('BEGIN');
const { jobs, afterCommit } = await client.enqueue(tx, spec);
await tx.query('COMMIT');
process.stdout.write(`committed ${jobs[0]!.job.id}\n`);
// The injector kills this process here. Should it not, publish late rather than never.
await new Promise((r) => setTimeout(r, 30_000));
await afterCommit();
tx.release();
await pool.end();
