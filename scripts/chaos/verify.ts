// The chaos run's verdict: pure checks over what was collected from the database and the queues
// after the run (collect.ts), so each check can be tested on crafted data (test/chaos/verify.test.ts).
//
// What must hold, from issue 5 and DESIGN:
//   final-state     every committed job ended as planned: succeeded, or dead when planned dead
//                   (a job planned to succeed may die only when faults used up its attempts,
//                   which its attempt log must show)
//   dead-lettered   every dead job has its reason on the DLQ
//   exact-effects   every succeeded ledger.post has exactly `entries` ledger rows, every
//                   inventory.cost exactly one cost row per SKU with the right total; any other
//                   job has none; no row belongs to no job (double effects = 0)
//   rolled-back     no job of a rolled-back transaction exists, ran, wrote, or was published
//   lost            every committed job exists (lost = 0)
//   stuck           every committed job is terminal at the end (stuck = 0)
//   idempotency     one active job per idempotency key at any time; a burst of concurrent
//                   enqueues with one key got one job
//   concurrency-keys no key ever had more jobs running at once than its limit (keys.ts)
//   dlq-only-dead   nothing reached the DLQ but dead jobs' reports (no live job redriven there)
//   faults-injected every kind of fault was injected at least once (a run that injected nothing proves nothing)

import { costSku, inventoryCost } from '../../runtime/handlers/inventory-cost.ts';
import { ledgerPost } from '../../runtime/handlers/ledger-post.ts';
import { checkKeys, type KeyFigures, type KeySamples } from './keys.ts';

export const TERMINAL = ['succeeded', 'dead', 'cancelled'];

export interface PlannedJob {
  id: string;
  type: string;
  expect: 'succeeded' | 'dead';
  /** How it was enqueued: through the API, or by a publisher killed after COMMIT. */
  via: 'api' | 'publisher-killed';
  idempotencyKey?: string;
}

export interface KeyBurst {
  key: string;
  type: string;
  /** The job id each of the concurrent enqueues got back. */
  returnedIds: string[];
}

export interface RolledBack {
  jobIds: string[];
  batch: string;
}

export interface TrackedJob {
  id: string;
  attempt: number;
  /** When the next attempt was first seen claimed (ms since epoch), if it was. */
  resumedAt: number | null;
  outcome: 'resumed' | 'finished-before' | 'dead-on-final-attempt' | 'not-resumed';
}

export interface KillRecord {
  workerId: string;
  at: number;
  jobs: TrackedJob[];
}

export interface FinalJob {
  id: string;
  type: string;
  state: string;
  attempt: number;
  releases: number;
  maxAttempts: number;
  idempotencyKey: string | null;
  payload: unknown;
  result?: unknown;
  createdAt: string;
  finishedAt: string | null;
  /** The concurrency key and limit, and the last claim's time (the start of the last attempt). */
  concurrencyKey?: string | null;
  concurrencyLimit?: number | null;
  claimedAt?: string | null;
  lastError: string | null;
  /** attempt_log entries: outcome, error name and message. */
  attemptLog: { outcome: string; name?: string; message?: string }[];
}

export interface Observations {
  planned: PlannedJob[];
  bursts: KeyBurst[];
  rolledBack: RolledBack[];
  kills: KillRecord[];
  pauses: KillRecord[];
  /** Jobs a killed publisher committed: tracked from COMMIT to their first claim. */
  unpublished: KillRecord[];
  jobs: FinalJob[];
  ledger: { jobId: string; batch: string; rows: number }[];
  inventory: { jobId: string; rows: number; total: number }[];
  /** Bodies of the messages on the DLQ and left on the job queue at the end. */
  dlq: string[];
  queue: string[];
  /** Jobs the event bus saw claimed or reclaimed. */
  claimedJobIds: string[];
  faults: Record<string, number>;
  events: Record<string, number>;
  /** Enqueue requests that failed (not counted as committed; a 503 during the failover). */
  enqueueErrors: number;
  /** Database failover over → first claim after it (ms). */
  failoverToClaim: number[];
  /** Queue purged → every job pending then claimed again or ended (ms). */
  purgeToHealed: number[];
  /** Processes that ended without the kill fault ending them (a failover must end none). */
  unexpectedExits: string[];
  /** The running jobs per concurrency key, sampled while the load ran. */
  keySamples?: KeySamples;
  /** Dead jobs whose report a sweeper sent (their worker was killed first, or the DLQ refused it). */
  deadReportedBySweeper?: number;
}

export interface Check {
  name: string;
  ok: boolean;
  /** One line on what was checked. */
  summary: string;
  violations: string[];
}

export interface Figures {
  committed: number;
  byType: Record<string, number>;
  succeeded: number;
  dead: number;
  deadByFaults: number;
  deadReportedBySweeper: number;
  doubleEffects: number;
  missingEffects: number;
  lost: number;
  stuck: number;
  rolledBack: number;
  keys: number;
  duplicatesReturned: number;
  resumedFromCheckpoint: number;
  killToResumption: Stats;
  pauseToReclaim: Stats;
  commitToClaimAfterPublisherKilled: Stats;
  failoverToClaim: Stats;
  purgeToHealed: Stats;
  concurrencyKeys: KeyFigures;
}

export interface Stats {
  n: number;
  medianMs: number | null;
  maxMs: number | null;
}

export interface Verdict {
  ok: boolean;
  checks: Check[];
  figures: Figures;
}

/** The fault kinds a run must have injected at least once. */
export const REQUIRED_FAULTS = [
  'duplicate',
  'kill',
  'restart',
  'pause',
  'rollback',
  'publisher-killed',
  'sqs-error',
  'db-connections-dropped',
  'db-failover',
  'queue-purged',
];

const short = (id: string) => id.slice(-8);

export function stats(ms: number[]): Stats {
  if (ms.length === 0) return { n: 0, medianMs: null, maxMs: null };
  const s = [...ms].sort((a, b) => a - b);
  const mid = s.length >> 1;
  const median = s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
  return { n: s.length, medianMs: Math.round(median), maxMs: Math.round(s.at(-1)!) };
}

/** The rows and total a job's effects must have, given its final state. */
export function expectedEffects(job: FinalJob): { rows: number; total?: number } {
  if (job.state !== 'succeeded') return { rows: 0 };
  if (job.type === 'ledger.post') return { rows: ledgerPost.parse(job.payload).entries };
  if (job.type === 'inventory.cost') {
    const p = inventoryCost.parse(job.payload);
    let total = 0;
    for (let i = 0; i < p.skus; i++) total += costSku(p.store, p.period, i, p.movementsPerSku).totalCost;
    return { rows: p.skus, total: Math.round(total * 100) / 100 };
  }
  return { rows: 0 };
}

/** Attempts a job lost to something other than its handler's own (simulated) failure. */
function faultAttempts(job: FinalJob): number {
  return job.attemptLog.filter((a) => a.outcome !== 'released' && !/simulated failure/.test(a.message ?? '')).length;
}

interface DlqEntry {
  jobId: string | null;
  reason: string | null;
}

function parseDlq(body: string): DlqEntry {
  try {
    const o = JSON.parse(body) as { jobId?: unknown; reason?: unknown };
    return { jobId: typeof o.jobId === 'string' ? o.jobId : null, reason: typeof o.reason === 'string' ? o.reason : null };
  } catch {
    return { jobId: null, reason: null };
  }
}

export function verify(o: Observations): Verdict {
  const checks: Check[] = [];
  const byId = new Map(o.jobs.map((j) => [j.id, j]));
  const check = (name: string, summary: string, violations: string[]) =>
    checks.push({ name, ok: violations.length === 0, summary, violations });

  // lost, stuck
  const lost = o.planned.filter((p) => !byId.has(p.id));
  const stuck = o.planned.filter((p) => byId.has(p.id) && !TERMINAL.includes(byId.get(p.id)!.state));
  check(
    'lost',
    `every one of ${o.planned.length} committed jobs exists in the job table`,
    lost.map((p) => `job ${p.id} (${p.type}, via ${p.via}) was committed and is not in the job table`),
  );
  check(
    'stuck',
    'every committed job is terminal at the end',
    stuck.map((p) => {
      const j = byId.get(p.id)!;
      return `job ${p.id} (${p.type}) is still ${j.state} at attempt ${j.attempt}/${j.maxAttempts}`;
    }),
  );

  // final state
  const finalViolations: string[] = [];
  let deadByFaults = 0;
  for (const p of o.planned) {
    const j = byId.get(p.id);
    if (!j || !TERMINAL.includes(j.state)) continue;
    if (j.state === p.expect) continue;
    if (p.expect === 'succeeded' && j.state === 'dead' && faultAttempts(j) > 0 && j.attempt - j.releases >= j.maxAttempts) {
      deadByFaults++;
      continue;
    }
    finalViolations.push(
      `job ${p.id} (${p.type}) ended ${j.state}, planned ${p.expect}${j.lastError ? ` (last error: ${j.lastError.slice(0, 120)})` : ''}`,
    );
  }
  check('final-state', 'each committed job ended as planned (succeeded, or dead when planned to fail past its cap)', finalViolations);

  // dead-lettered with reason
  const dlq = o.dlq.map(parseDlq);
  const reported = new Map<string, string>();
  for (const d of dlq) if (d.jobId && d.reason) reported.set(d.jobId, d.reason);
  const dead = o.jobs.filter((j) => j.state === 'dead');
  check(
    'dead-lettered',
    `each of ${dead.length} dead jobs has its reason on the DLQ`,
    dead
      .filter((j) => !reported.has(j.id))
      .map((j) => `dead job ${j.id} (${j.type}, ${j.lastError?.slice(0, 80) ?? 'no error'}) has no report on the DLQ`),
  );

  // exact effects
  const ledgerByJob = new Map<string, number>();
  for (const r of o.ledger) ledgerByJob.set(r.jobId, (ledgerByJob.get(r.jobId) ?? 0) + r.rows);
  const invByJob = new Map(o.inventory.map((r) => [r.jobId, r]));
  const effectViolations: string[] = [];
  let doubleEffects = 0;
  let missingEffects = 0;
  for (const j of o.jobs) {
    const want = expectedEffects(j);
    const got = j.type === 'ledger.post' ? (ledgerByJob.get(j.id) ?? 0) : j.type === 'inventory.cost' ? (invByJob.get(j.id)?.rows ?? 0) : 0;
    if (got > want.rows) {
      doubleEffects++;
      effectViolations.push(
        `job ${j.id} (${j.type}, ${j.state}, attempt ${j.attempt}) has ${got} rows, expected ${want.rows}: effects applied more than once or by a job that did not succeed`,
      );
    } else if (got < want.rows) {
      missingEffects++;
      effectViolations.push(`job ${j.id} (${j.type}, ${j.state}) has ${got} rows, expected ${want.rows}: effects missing`);
    } else if (want.total !== undefined) {
      const total = invByJob.get(j.id)?.total ?? 0;
      if (Math.abs(total - want.total) > 0.005)
        effectViolations.push(
          `job ${j.id} (inventory.cost) costed ${total}, expected ${want.total}: the figures differ from an uninterrupted run`,
        );
    }
  }
  const orphanJobs = new Set([...ledgerByJob.keys(), ...invByJob.keys()].filter((id) => !byId.has(id)));
  for (const id of orphanJobs) {
    doubleEffects++;
    effectViolations.push(`rows of job ${id} exist but the job does not: effects of a transaction that should have rolled back`);
  }
  check('exact-effects', `ledger rows and cost rows match each job's final state exactly (${o.jobs.length} jobs)`, effectViolations);

  // rolled back
  const rbViolations: string[] = [];
  const claimed = new Set(o.claimedJobIds);
  const mentioned = (id: string, bodies: string[]) => bodies.some((b) => b.includes(id));
  for (const rb of o.rolledBack) {
    for (const id of rb.jobIds) {
      if (byId.has(id)) rbViolations.push(`job ${id} of a rolled-back transaction exists (${byId.get(id)!.state})`);
      if (claimed.has(id)) rbViolations.push(`job ${id} of a rolled-back transaction was claimed by a worker`);
      if (mentioned(id, o.dlq) || mentioned(id, o.queue))
        rbViolations.push(`a message for job ${id} of a rolled-back transaction was published`);
    }
    const rows = o.ledger.filter((r) => r.batch === rb.batch).reduce((s, r) => s + r.rows, 0);
    if (rows > 0) rbViolations.push(`batch ${rb.batch} of a rolled-back transaction has ${rows} ledger rows`);
  }
  const rolledBackJobs = o.rolledBack.reduce((s, r) => s + r.jobIds.length, 0);
  check(
    'rolled-back',
    `none of ${rolledBackJobs} jobs enqueued in rolled-back transactions exists, ran, wrote or was published`,
    rbViolations,
  );

  // idempotency
  const idemViolations: string[] = [];
  const byKey = new Map<string, FinalJob[]>();
  for (const j of o.jobs)
    if (j.idempotencyKey) byKey.set(`${j.type}\u0000${j.idempotencyKey}`, [...(byKey.get(`${j.type}\u0000${j.idempotencyKey}`) ?? []), j]);
  for (const [k, jobs] of byKey) {
    const sorted = [...jobs].sort((a, b) => a.createdAt.localeCompare(b.createdAt));
    for (let i = 1; i < sorted.length; i++) {
      const prev = sorted[i - 1]!;
      if (!prev.finishedAt || prev.finishedAt > sorted[i]!.createdAt) {
        idemViolations.push(
          `key ${k.split('\u0000')[1]}: job ${sorted[i]!.id} was created while job ${prev.id} with the same key was still active`,
        );
      }
    }
  }
  let duplicatesReturned = 0;
  for (const b of o.bursts) {
    const ids = new Set(b.returnedIds);
    duplicatesReturned += b.returnedIds.length - ids.size;
    if (ids.size > 1)
      idemViolations.push(
        `key ${b.key}: ${b.returnedIds.length} concurrent enqueues got ${ids.size} different jobs (${[...ids].map(short).join(', ')})`,
      );
  }
  check('idempotency', `one active job per idempotency key (${byKey.size} keys, ${o.bursts.length} concurrent bursts)`, idemViolations);

  // DLQ holds only dead jobs' reports
  const dlqViolations: string[] = [];
  for (const d of dlq) {
    if (d.reason && d.jobId) {
      const j = byId.get(d.jobId);
      if (j && j.state !== 'dead') dlqViolations.push(`the DLQ reports job ${d.jobId} dead (${d.reason}) but it is ${j.state}`);
      continue;
    }
    const j = d.jobId ? byId.get(d.jobId) : undefined;
    if (!d.jobId) dlqViolations.push('a message the worker could not parse reached the DLQ (the chaos run sends none)');
    else if (!j) dlqViolations.push(`a message for job ${d.jobId}, which does not exist, reached the DLQ`);
    else if (j.state !== 'dead')
      dlqViolations.push(
        `job ${d.jobId} (${j.state}) had its message redriven to the DLQ: a live job drifted there through repeated receives`,
      );
  }
  const keys = checkKeys(o.jobs, o.keySamples);
  check(
    'concurrency-keys',
    `no concurrency key had more jobs running than its limit (${keys.figures.jobs} jobs on ${keys.figures.keys} keys)`,
    keys.violations,
  );

  check('dlq-only-dead', `the DLQ holds dead jobs' reports only (${o.dlq.length} messages)`, dlqViolations);

  // faults injected
  check(
    'faults-injected',
    `every kind of fault was injected (${REQUIRED_FAULTS.join(', ')})`,
    REQUIRED_FAULTS.filter((f) => !(o.faults[f]! > 0)).map((f) => `no ${f} fault was injected: the run proves nothing about it`),
  );

  check('no-exits', 'no process ended but those the kill fault killed (a database failover ends none)', o.unexpectedExits ?? []);

  // kill → resumption: every job a killed worker held was taken up again (or had ended)
  const killed = o.kills.flatMap((k) => k.jobs.map((j) => ({ ...j, at: k.at })));
  check(
    'resumed-after-kill',
    `each of ${killed.length} jobs held by a killed worker was resumed by another attempt`,
    killed
      .filter((j) => j.outcome === 'not-resumed')
      .map((j) => `job ${j.id} held at attempt ${j.attempt} by a killed worker was never resumed`),
  );

  const succeeded = o.jobs.filter((j) => j.state === 'succeeded');
  const byType: Record<string, number> = {};
  for (const p of o.planned) byType[p.type] = (byType[p.type] ?? 0) + 1;
  const resumed = (rs: KillRecord[]) => rs.flatMap((k) => k.jobs.filter((j) => j.resumedAt !== null).map((j) => j.resumedAt! - k.at));
  const figures: Figures = {
    committed: o.planned.length,
    byType,
    succeeded: o.planned.filter((p) => byId.get(p.id)?.state === 'succeeded').length,
    dead: o.planned.filter((p) => byId.get(p.id)?.state === 'dead').length,
    deadByFaults,
    deadReportedBySweeper: o.deadReportedBySweeper ?? 0,
    doubleEffects,
    missingEffects,
    lost: lost.length,
    stuck: stuck.length,
    rolledBack: rolledBackJobs,
    keys: byKey.size,
    duplicatesReturned,
    resumedFromCheckpoint: succeeded.filter(
      (j) => j.type === 'inventory.cost' && Number((j.result as { resumedFrom?: unknown } | null)?.resumedFrom) > 0,
    ).length,
    killToResumption: stats(resumed(o.kills)),
    pauseToReclaim: stats(resumed(o.pauses)),
    commitToClaimAfterPublisherKilled: stats(resumed(o.unpublished)),
    failoverToClaim: stats(o.failoverToClaim ?? []),
    purgeToHealed: stats(o.purgeToHealed ?? []),
    concurrencyKeys: keys.figures,
  };
  return { ok: checks.every((c) => c.ok), checks, figures };
}
