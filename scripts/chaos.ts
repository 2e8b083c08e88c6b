// `npm run chaos`: prove the guarantees under faults with the real processes (issue 5).
//
//   npm run chaos                       the short run CI does (30 s of load, about a minute in all)
//   npm run chaos -- --long             5 minutes of load
//   npm run chaos -- --seconds 120      any length
//   options: --workers N (plain workers, plus one with SQS errors), --rate JOBS_PER_S,
//            --seed N (repeat a run's load), --sqs-error-rate R, --verbose (services' warnings),
//            --failover-seconds N (the database failover's outage; 8, or 20 with --long),
//            --report FILE (JSON; default test-artifacts/chaos-report.json)
//
// Prints the table (scripts/chaos/report.ts) and exits 0 when every check passed, 1 on any
// violation, 2 when the run itself could not be carried out.

import { mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import { formatReport } from './chaos/report.ts';
import { DEFAULT_CHAOS, runChaos } from './chaos/run.ts';

// Known and only noise here (the images run Node 22): the AWS SDK's Node 22 notice, off for this process and its children.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

function num(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min || n > max) {
    process.stderr.write(`chaos: --${name} must be a number from ${min} to ${max} (got ${raw})\n`);
    process.exit(2);
  }
  return n;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      long: { type: 'boolean' },
      seconds: { type: 'string' },
      workers: { type: 'string' },
      rate: { type: 'string' },
      seed: { type: 'string' },
      'sqs-error-rate': { type: 'string' },
      'drain-timeout': { type: 'string' },
      'failover-seconds': { type: 'string' },
      report: { type: 'string', default: 'test-artifacts/chaos-report.json' },
      verbose: { type: 'boolean' },
    },
  });
  const options = {
    seconds: num('seconds', values.seconds, values.long ? 300 : DEFAULT_CHAOS.seconds, 15, 3600),
    workers: num('workers', values.workers, DEFAULT_CHAOS.workers, 2, 16),
    rate: num('rate', values.rate, DEFAULT_CHAOS.rate, 0.5, 50),
    seed: num('seed', values.seed, DEFAULT_CHAOS.seed, 0, 2 ** 32 - 1),
    sqsErrorRate: num('sqs-error-rate', values['sqs-error-rate'], DEFAULT_CHAOS.sqsErrorRate, 0.01, 0.9),
    drainTimeoutSeconds: num('drain-timeout', values['drain-timeout'], DEFAULT_CHAOS.drainTimeoutSeconds, 10, 3600),
    failoverSeconds: num('failover-seconds', values['failover-seconds'], values.long ? 20 : DEFAULT_CHAOS.failoverSeconds, 1, 120),
    verbose: Boolean(values.verbose),
  };
  const t0 = Date.now();
  const log = (l: string) => process.stdout.write(`chaos: ${l}\n`);
  // Ctrl-C: stop injecting and draining, stop the stack (children, then PostgreSQL), report what there is.
  const ac = new AbortController();
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => ac.abort());
  const result = await runChaos({ ...options, log, signal: ac.signal });
  if (ac.signal.aborted) {
    process.stdout.write('chaos: interrupted; the stack is stopped. No verdict.\n');
    return 130;
  }
  const wall = (Date.now() - t0) / 1000;
  process.stdout.write(`${formatReport(result, wall)}\n`);
  if (values.report) {
    await mkdir(dirname(values.report), { recursive: true });
    await writeFile(values.report, JSON.stringify({ ...result, wallSeconds: wall }, null, 2));
  }
  return result.verdict.ok ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`chaos: the run could not be carried out: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(2);
  },
);
