// The local SQS endpoint for a benchmark, in its own process (bench/sqs-child.ts), so the CPU a
// benchmark measures in its own process is the platform's, not the emulator's or the proxy's.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

export async function startSqsChild(
  visibilitySeconds = 60,
  latencyMs = 0,
  /** false: the endpoint itself, no counting proxy in between (the latency runs: production has no proxy hop). */
  proxy = true,
): Promise<{ child: ChildProcess; endpoint: string; queueUrl: string; dlqUrl: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'sqs-child.ts')], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: {
      ...process.env,
      BENCH_VISIBILITY: String(visibilitySeconds),
      BENCH_SQS_LATENCY_MS: String(latencyMs),
      BENCH_SQS_PROXY: proxy ? '1' : '0',
    },
  });
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
