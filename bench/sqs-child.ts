// Runs the local SQS endpoint in its own process for the benchmark, so the worker's CPU figure
// does not include the emulator's (or the delaying proxy's). Prints one JSON line with the
// endpoint and the URLs of both lanes' queues and DLQs (as the stack deploys them). The endpoint
// is the proxy (bench/sqs-proxy.ts), which counts the calls, unless BENCH_SQS_PROXY=0;
// BENCH_SQS_LATENCY_MS adds that many milliseconds to each (default 0).
import { startLocalSqs } from '../dev/fauxqs.ts';
import { SqsQueue } from '../runtime/queue/sqs.ts';
import { warmQueue } from './sqs-local.ts';
import { startSqsProxy } from './sqs-proxy.ts';

// BENCH_VISIBILITY: the queue's visibility timeout. A worker killed with SIGKILL may leave a long
// poll that the endpoint still answers; the message it takes comes back after this long.
const sqs = await startLocalSqs({
  timings: { visibilityTimeoutSeconds: Number(process.env.BENCH_VISIBILITY ?? 60), maxReceiveCount: 10 },
  prefix: 'bench',
});
// Warmed directly (not through the delaying proxy), before anyone is told the endpoint exists.
await warmQueue(new SqsQueue({ queueUrl: sqs.queueUrl, endpoint: sqs.endpoint }));
// BENCH_SQS_PROXY=0: no proxy (nothing counted, nothing delayed), the endpoint itself.
const proxy = process.env.BENCH_SQS_PROXY === '0' ? null : await startSqsProxy(sqs.endpoint, Number(process.env.BENCH_SQS_LATENCY_MS ?? 0));
process.stdout.write(
  `${JSON.stringify({
    endpoint: proxy?.endpoint ?? sqs.endpoint,
    queueUrl: sqs.queueUrl,
    dlqUrl: sqs.dlqUrl,
    urgentQueueUrl: sqs.urgentQueueUrl,
    urgentDlqUrl: sqs.urgentDlqUrl,
  })}\n`,
);
process.on('SIGTERM', () => void Promise.all([proxy?.stop(), sqs.stop()]).then(() => process.exit(0)));
