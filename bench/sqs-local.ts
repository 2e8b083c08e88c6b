// The local SQS endpoint for a benchmark, in its own process (bench/sqs-child.ts), so the CPU a
// benchmark measures in its own process is the platform's, not the emulator's or the proxy's.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { LaneQueues } from '../runtime/queue/lanes.ts';
import { SqsQueue } from '../runtime/queue/sqs.ts';
import type { JobQueue } from '../runtime/queue/types.ts';

/** The local endpoint and its queues: a queue and a DLQ per priority lane, as the stack deploys them (lib/queues.ts). */
export interface LocalSqsEndpoint {
  endpoint: string;
  queueUrl: string;
  dlqUrl: string;
  urgentQueueUrl: string;
  urgentDlqUrl: string;
}

/**
 * The job queues and DLQs as a worker configured like the stack sees them: the urgent lane on its
 * own queue (`split`, the default of `npm run bench`, as deployed), or sharing the bulk queue
 * (`--urgent-queue false`: JOBS_URGENT_QUEUE_URL unset).
 */
export function laneQueues(s: LocalSqsEndpoint, split: boolean): { queue: LaneQueues; dlq: LaneQueues } {
  const q = (queueUrl: string) => new SqsQueue({ queueUrl, endpoint: s.endpoint });
  return {
    queue: new LaneQueues({ bulk: q(s.queueUrl), urgent: split ? q(s.urgentQueueUrl) : null }),
    dlq: new LaneQueues({ bulk: q(s.dlqUrl), urgent: split ? q(s.urgentDlqUrl) : null }),
  };
}

/**
 * SQS itself is a warm service; the emulator is a fresh Node process compiling its code while the
 * first drain is measured. In 6 A/B pairs (no-op jobs, concurrency 10, 5,000 jobs, one run
 * each), one cold 0 ms drain ran at 55 % of its 15 ms one (the hiding ratio read 182 %; the other
 * cold pairs 89–102 %); warm, the ratios were 93–103 %, and the endpoint's own CPU per 1,000 jobs
 * went from a median of 0.134 to 0.121 s. Warm it, and the client making the calls, with the
 * calls a job makes (send, receive, delete) before anything is measured; the queue is left empty.
 */
export async function warmQueue(queue: JobQueue & { approximateCount(): Promise<number> }, rounds = 300): Promise<void> {
  const remove = async (receipts: string[]) => {
    const failed = await queue.delete(receipts);
    if (failed.length > 0) throw new Error(`warming the local SQS endpoint: ${failed.length} deletes failed (${failed[0]!.code})`);
  };
  for (let i = 0; i < rounds; i++) {
    await queue.send(Array.from({ length: 10 }, (_, k) => ({ body: JSON.stringify({ warm: i * 10 + k }) })));
    const got = await queue.receive(10, 0);
    if (got.length > 0) await remove(got.map((m) => m.receipt));
  }
  for (let got = await queue.receive(10, 0); got.length > 0; got = await queue.receive(10, 0)) await remove(got.map((m) => m.receipt));
  // A warm-up message left behind would come back inside a measured drain.
  const left = await queue.approximateCount();
  if (left > 0) throw new Error(`warming the local SQS endpoint left ${left} messages in the queue`);
}

export async function startSqsChild(
  visibilitySeconds = 60,
  latencyMs = 0,
  /** false: the endpoint itself, no counting proxy in between (the latency runs: production has no proxy hop). */
  proxy = true,
): Promise<LocalSqsEndpoint & { child: ChildProcess }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'sqs-child.ts')], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: {
      ...process.env,
      BENCH_VISIBILITY: String(visibilitySeconds),
      BENCH_SQS_LATENCY_MS: String(latencyMs),
      BENCH_SQS_PROXY: proxy ? '1' : '0',
    },
  });
  // Should the benchmark exit first (an error, Ctrl-C), the endpoint must not outlive it.
  const kill = () => child.kill('SIGTERM');
  process.once('exit', kill);
  child.once('exit', () => process.off('exit', kill));
  const line = await new Promise<string>((resolve, reject) => {
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const nl = buf.indexOf('\n');
      if (nl >= 0) resolve(buf.slice(0, nl));
    });
    child.once('exit', (code) => reject(new Error(`local SQS exited with ${code}`)));
  });
  return { child, ...JSON.parse(line) };
}
