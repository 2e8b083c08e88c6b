// Runs the local SQS endpoint in its own process for the benchmark, so the worker's CPU figure
// does not include the emulator's. Prints one JSON line with the endpoint and queue URLs.
import { startLocalSqs } from '../dev/fauxqs.ts';

// BENCH_VISIBILITY: the queue's visibility timeout. A worker killed with SIGKILL may leave a long
// poll that the endpoint still answers; the message it takes comes back after this long.
const sqs = await startLocalSqs({
  timings: { visibilityTimeoutSeconds: Number(process.env.BENCH_VISIBILITY ?? 60), maxReceiveCount: 10 },
  prefix: 'bench',
});
process.stdout.write(`${JSON.stringify({ endpoint: sqs.endpoint, queueUrl: sqs.queueUrl, dlqUrl: sqs.dlqUrl })}\n`);
process.on('SIGTERM', () => void sqs.stop().then(() => process.exit(0)));
