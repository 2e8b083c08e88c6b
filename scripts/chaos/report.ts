// The chaos run's table: faults injected by kind, jobs, the guarantees with the value they must
// have, the time from a kill to the job's resumption, then every check with its violations, and
// a closing `chaos: N passed, N failed` line (the form CI reads).

import type { ChaosResult } from './run.ts';
import type { KeyFigures } from './keys.ts';
import type { Stats } from './verify.ts';

const secs = (ms: number | null) => (ms === null ? '–' : `${(ms / 1000).toFixed(1)} s`);
const timing = (label: string, s: Stats): [string, string, string] =>
  s.n === 0 ? [label, 'n/a', 'none measured'] : [label, secs(s.medianMs), `median; max ${secs(s.maxMs)} (n=${s.n})`];

/** Per limit, the most jobs of one key seen running at once: `limit 1: 1/1 on 40 keys` (recorded/sampled). */
function keyLine(k: KeyFigures): string {
  const byLimit = new Map<number, { keys: number; recorded: number; sampled: number }>();
  for (const x of Object.values(k.perKey)) {
    const g = byLimit.get(x.limit) ?? { keys: 0, recorded: 0, sampled: 0 };
    byLimit.set(x.limit, { keys: g.keys + 1, recorded: Math.max(g.recorded, x.recorded), sampled: Math.max(g.sampled, x.sampled) });
  }
  const parts = [...byLimit].sort(([a], [b]) => a - b).map(([limit, g]) => `limit ${limit}: ${g.recorded}/${g.sampled} on ${g.keys} keys`);
  return `${k.keys} keys; most running at once on one key, recorded/sampled: ${parts.join(', ') || 'none'} (${k.samples} samples)`;
}

function table(rows: [string, string | number, string?][], head: [string, string, string?]): string[] {
  const w0 = Math.max(head[0].length, ...rows.map((r) => r[0].length));
  const w1 = Math.max(head[1].length, ...rows.map((r) => String(r[1]).length));
  const line = (r: [string, string | number, string?]) => `  ${r[0].padEnd(w0)}  ${String(r[1]).padStart(w1)}${r[2] ? `   ${r[2]}` : ''}`;
  return [line(head), `  ${'─'.repeat(w0)}  ${'─'.repeat(w1)}`, ...rows.map(line)];
}

export function formatReport(r: ChaosResult, wallSeconds: number): string {
  const { verdict: v, observations: o, notes, options, timings: t } = r;
  const f = v.figures;
  const fault = (k: string) => o.faults[k] ?? 0;
  const out: string[] = [];
  out.push('');
  out.push(
    `Chaos run: ${options.seconds} s of load and faults on the local stack, ${options.workers + 1} worker processes ` +
      `(1 with ${Math.round(options.sqsErrorRate * 100)} % SQS errors), lease ${t.leaseSeconds} s, heartbeat ${t.heartbeatSeconds} s, ` +
      `seed ${options.seed}; drained in ${notes.drainSeconds.toFixed(1)} s, ${Math.round(wallSeconds)} s in all.`,
  );
  out.push('');
  out.push(
    ...table(
      [
        [
          'duplicate deliveries, concurrent with the first',
          fault('duplicate'),
          `${o.events['duplicate-ignored'] ?? 0} ignored by a worker (live lease)`,
        ],
        ['kill -9 of a worker mid-job', fault('kill'), `holding ${notes.heldAtKill} jobs`],
        ['worker restarts', fault('restart')],
        [
          `SIGSTOP for ${t.leaseSeconds + 4} s (lease ${t.leaseSeconds} s), then SIGCONT`,
          fault('pause'),
          `holding ${notes.heldAtPause} jobs; ${notes.zombieRefusals} zombie writes refused (lease lost)`,
        ],
        ['enqueue, then ROLLBACK', fault('rollback'), `${f.rolledBack} jobs`],
        ['publisher killed -9 between COMMIT and publish', fault('publisher-killed')],
        ['SQS errors (request failed or response lost)', fault('sqs-error')],
        ['database connections dropped (pg_terminate_backend)', fault('db-connections-dropped'), `${notes.connectionsDropped} connections`],
        [
          `database failover: connections reset, refused for ${notes.failoverSeconds} s`,
          fault('db-failover'),
          `${o.enqueueErrors} enqueue requests answered 503 meanwhile`,
        ],
        ['job queue purged (PurgeQueue)', fault('queue-purged'), `${notes.purgedPending} pending jobs lost their message`],
      ],
      ['faults injected', 'count'],
    ),
  );
  out.push('');
  const types = Object.entries(f.byType)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');
  out.push(
    ...table(
      [
        ['committed', f.committed, types + (o.enqueueErrors ? `; ${o.enqueueErrors} enqueue requests failed` : '')],
        ['succeeded', f.succeeded],
        [
          'dead, reason on the DLQ',
          f.dead,
          (f.deadByFaults ? `${f.deadByFaults} planned to succeed, attempts used up by faults` : 'all planned to fail past their cap') +
            (f.deadReportedBySweeper ? `; ${f.deadReportedBySweeper} reported by a sweeper (their worker could not)` : ''),
        ],
        ['idempotency keys (concurrent bursts of 4)', f.keys, `${f.duplicatesReturned} enqueues answered with the existing job`],
        ['inventory runs resumed from a checkpoint', f.resumedFromCheckpoint],
        ['jobs with a concurrency key', f.concurrencyKeys.jobs, keyLine(f.concurrencyKeys)],
        [
          'events seen on the bus',
          Object.values(o.events).reduce((a, b) => a + b, 0),
          `claimed ${o.events.claimed ?? 0}, reclaimed ${o.events.reclaimed ?? 0}, lease lost ${o.events['lease-lost'] ?? 0}, retried ${o.events.retried ?? 0}`,
        ],
      ],
      ['jobs', 'count'],
    ),
  );
  out.push('');
  out.push(
    ...table(
      [
        ['double effects', f.doubleEffects, 'must be 0'],
        ['missing effects', f.missingEffects, 'must be 0'],
        ['lost', f.lost, 'must be 0'],
        ['stuck', f.stuck, 'must be 0'],
        ['key overlaps (more running than a key allows)', f.concurrencyKeys.overlaps, 'must be 0'],
        timing('kill -9 → job resumed by another worker', f.killToResumption),
        timing('SIGSTOP → job reclaimed by another worker', f.pauseToReclaim),
        timing('publisher killed → relay published, job claimed', f.commitToClaimAfterPublisherKilled),
        timing('database back → claims resume', f.failoverToClaim),
        timing('queue purged → every pending job claimed again', f.purgeToHealed),
      ],
      ['guarantees', 'value'],
    ),
  );
  out.push('');
  for (const c of v.checks) {
    out.push(`  ${c.ok ? '✓' : '✗'} ${c.name.padEnd(18)} ${c.summary}`);
    for (const x of c.violations.slice(0, 10)) out.push(`      - ${x}`);
    if (c.violations.length > 10) out.push(`      … and ${c.violations.length - 10} more`);
  }
  const passed = v.checks.filter((c) => c.ok).length;
  out.push('');
  out.push(v.ok ? 'All guarantees held.' : 'GUARANTEES VIOLATED: see the ✗ checks above.');
  out.push(`chaos: ${passed} passed, ${v.checks.length - passed} failed`);
  return out.join('\n');
}
