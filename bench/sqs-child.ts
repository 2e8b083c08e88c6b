// Runs the local SQS endpoint in its own process for the benchmark, so the worker's CPU figure
// does not include the emulator's. Prints one JSON line with the endpoint and queue URLs.
import { startLocalSqs } from '../runtime/local/fauxqs.ts';

const sqs = await startLocalSqs({ timings: { visibilityTimeoutSeconds: 60, maxReceiveCount: 10 }, prefix: 'bench' });
process.stdout.write(`${JSON.stringify({ endpoint: sqs.endpoint, queueUrl: sqs.queueUrl, dlqUrl: sqs.dlqUrl })}\n`);
process.on('SIGTERM', () => void sqs.stop().then(() => process.exit(0)));
