// The on-call commands of `jobs` (runtime/cli/main.ts dispatches here): dead jobs, the DLQ,
// poison messages, stuck jobs, and `show --watch`. They talk to PostgreSQL and SQS directly, with
// the operator's own credentials, like the rest of the CLI. Every command prints what it did
// and why for each job or message; --json prints the same as one JSON document.
//
// Exit codes: 0 done; 1 something asked for did not happen (a job skipped, a message not found,
// a move refused, a watched job that did not succeed); 2 bad usage (UsageError).
//
// `jobs dead` is in oncall-dead.ts, `jobs dlq` in oncall-dlq.ts, what they all share in
// oncall-common.ts; poison, stuck, republish and the watch are here.

import { databaseUrlFromEnv } from '../config/env.ts';
import { createPool } from '../db/pool.ts';
import { formatDuration } from '../domain/reading.ts';
import { describeStuck, findStuckJobs } from '../oncall/stuck.ts';
import { watchJob } from '../oncall/watch.ts';
import { JobStore } from '../store/job-store.ts';
import { beyondHorizon } from '../store/outbox.ts';
import { listPoisonMessages, type PoisonReason } from '../store/poison.ts';
import { parseCommand } from './args.ts';
import { blockers, UsageError } from './format.ts';
import { type Env, ids, intFlag, type Out, parseTime, skippedLines, whoAsked, withOps } from './oncall-common.ts';
import { deadCommand } from './oncall-dead.ts';
import { dlqCommand } from './oncall-dlq.ts';

export async function opsCommand(command: string, argv: string[], env: Env, out: Out): Promise<number> {
  switch (command) {
    case 'dead':
      return deadCommand(argv, env, out);
    case 'dlq':
      return dlqCommand(argv, env, out);
    case 'poison':
      return poisonCommand(argv, env, out);
    case 'stuck':
      return stuckCommand(argv, env, out);
    case 'republish':
      return republishCommand(argv, env, out);
    case 'connections':
      return connectionsCommand(argv, env, out);
    default:
      throw new UsageError(`unknown on-call command ${command} (see jobs help)`);
  }
}

/** `jobs show ID --watch`: draws on stdout itself (a terminal redraw needs raw writes). */
export async function watchCommand(id: string, intervalRaw: string | undefined, env: Env): Promise<number> {
  const seconds = intervalRaw === undefined ? 1 : Number(intervalRaw);
  if (!Number.isFinite(seconds) || seconds < 0.1 || seconds > 60)
    throw new UsageError(`--interval must be a number of seconds from 0.1 to 60 (got ${intervalRaw})`);
  const pool = createPool({ url: databaseUrlFromEnv(env), max: 1, applicationName: 'jobs-cli watch' });
  const store = new JobStore(pool);
  const ac = new AbortController();
  const stop = () => ac.abort();
  process.once('SIGINT', stop);
  try {
    return await watchJob({
      pool,
      id,
      write: (s) => process.stdout.write(s),
      tty: Boolean(process.stdout.isTTY),
      intervalMs: seconds * 1000,
      columns: process.stdout.columns ?? 80,
      signal: ac.signal,
      // A blocked job: the key or slots it waits for and who holds them, read as `jobs show` reads them.
      blockers: (job) => blockers(store, job),
    });
  } finally {
    process.off('SIGINT', stop);
    await pool.end();
  }
}

async function poisonCommand(argv: string[], env: Env, out: Out): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub !== 'list') throw new UsageError(`jobs poison: unknown subcommand ${sub ?? '(none)'}; use list (see jobs help)`);
  const { values } = parseCommand('jobs poison list', rest, {
    reason: { type: 'string' },
    since: { type: 'string' },
    resolved: { type: 'boolean' },
    limit: { type: 'string', default: '50' },
    json: { type: 'boolean' },
  });
  if (values.reason && values.reason !== 'unparseable-body' && values.reason !== 'unknown-job') {
    throw new UsageError(`--reason must be unparseable-body or unknown-job (got ${values.reason})`);
  }
  const limit = intFlag('--limit', values.limit, 1, 1000)!;
  const since = parseTime('--since', values.since);
  const r = await withOps(env, (ops) =>
    listPoisonMessages(ops.pool, {
      limit,
      includeResolved: values.resolved ?? false,
      ...(values.reason ? { reason: values.reason as PoisonReason } : {}),
      ...(since ? { since } : {}),
    }),
  );
  if (values.json) {
    out(JSON.stringify(r));
    return 0;
  }
  for (const m of r.messages) {
    out(
      `${m.recordedAt.toISOString()}  ${m.reason.padEnd(16)}  message ${m.sourceMessageId}  worker ${m.workerId ?? '?'}  received ${m.receiveCount ?? '?'}x`,
    );
    out(`    ${m.detail}`);
    out(`    body (${m.body.length} bytes): ${JSON.stringify(m.body.slice(0, 500))}`);
    const attrs = Object.entries(m.attributes);
    if (attrs.length > 0) out(`    attributes: ${attrs.map(([k, v]) => `${k}=${v}`).join(', ')}`);
    if (m.resolvedAt) out(`    resolved by ${m.resolvedBy} at ${m.resolvedAt.toISOString()}: ${m.resolution}`);
  }
  if (r.messages.length === 0) out('(no poison messages)');
  return 0;
}

async function stuckCommand(argv: string[], env: Env, out: Out): Promise<number> {
  const { values } = parseCommand('jobs stuck', argv, {
    'running-seconds': { type: 'string' },
    'pending-seconds': { type: 'string' },
    limit: { type: 'string', default: '100' },
    json: { type: 'boolean' },
  });
  const limit = intFlag('--limit', values.limit, 1, 1000)!;
  const runningSeconds = intFlag('--running-seconds', values['running-seconds'], 1, 7 * 86_400);
  const pendingSeconds = intFlag('--pending-seconds', values['pending-seconds'], 1, 7 * 86_400);
  const { stuck, thresholds } = await withOps(env, async (ops) => {
    const thresholds = {
      runningSeconds: runningSeconds ?? ops.stuck.runningSeconds,
      pendingSeconds: pendingSeconds ?? ops.stuck.pendingSeconds,
    };
    return { stuck: await findStuckJobs(ops.pool, ops.registry, thresholds, limit), thresholds };
  });
  if (values.json) {
    out(JSON.stringify({ thresholds, stuck }));
    return 0;
  }
  out(
    `stuck: running past the type's expected maximum (default ${formatDuration(thresholds.runningSeconds)}), or due but not picked up for ${formatDuration(thresholds.pendingSeconds)}`,
  );
  for (const s of stuck) {
    out(`${s.job.id}  ${s.job.type.padEnd(16)}  ${s.reason.padEnd(16)}  ${describeStuck(s)}`);
    const extra = [
      s.job.leaseOwner ? `lease ${s.job.leaseOwner}` : null,
      s.job.progress
        ? `progress ${Math.round(s.job.progress.fraction * 100)}%${s.job.progress.message ? ` ${s.job.progress.message}` : ''}`
        : null,
    ].filter(Boolean);
    if (extra.length > 0) out(`    ${extra.join(' · ')}`);
  }
  if (stuck.length === 0) out('(no stuck jobs)');
  return 0;
}

/**
 * `jobs connections`: who holds the database's connections (the *database connections* alarm), by
 * application name and user. The services' own role sees every session's application name and
 * user (PostgreSQL hides other roles' states and queries, not these), so on-call runs it from an
 * operator task like any other command: no master user needed.
 */
async function connectionsCommand(argv: string[], env: Env, out: Out): Promise<number> {
  const { values } = parseCommand('jobs connections', argv, { json: { type: 'boolean' } });
  const pool = createPool({ url: databaseUrlFromEnv(env), max: 1, applicationName: 'jobs-cli connections' });
  try {
    const [{ rows }, max] = await Promise.all([
      pool.query<{ application: string; user: string; connections: number }>(
        `SELECT coalesce(nullif(application_name, ''), '(none)') AS application, usename AS "user", count(*)::int AS connections
           FROM pg_stat_activity
          WHERE usename IS NOT NULL
          GROUP BY 1, 2
          ORDER BY 3 DESC, 1, 2`,
      ),
      pool.query<{ max_connections: string }>('SHOW max_connections'),
    ]);
    const total = rows.reduce((n, r) => n + r.connections, 0);
    const maxConnections = Number(max.rows[0]!.max_connections);
    if (values.json) {
      out(JSON.stringify({ total, maxConnections, byApplication: rows }));
      return 0;
    }
    out(
      `connections: ${total} of max_connections ${maxConnections} (this command's own included; the budget: docs/deploy.md#connection-budget)`,
    );
    out(`${'count'.padStart(5)}  ${'user'.padEnd(20)}  application`);
    for (const r of rows) out(`${String(r.connections).padStart(5)}  ${r.user.padEnd(20)}  ${r.application}`);
    return 0;
  } finally {
    await pool.end();
  }
}

/** An age such as 90s, 30m, 6h, 2d, in seconds. */
function ageSeconds(flag: string, raw: string): number {
  const m = /^(\d+)(s|m|h|d)$/.exec(raw.trim());
  if (!m) throw new UsageError(`${flag} must be an age such as 90s, 30m, 6h, 2d (got ${raw})`);
  return Number(m[1]) * { s: 1, m: 60, h: 3600, d: 86_400 }[m[2] as 's' | 'm' | 'h' | 'd'];
}

/** `jobs republish (ID… | --type T | --state pending --older-than D)`: fresh messages for pending jobs. */
async function republishCommand(argv: string[], env: Env, out: Out): Promise<number> {
  const { values, positionals } = parseCommand(
    'jobs republish',
    argv,
    {
      type: { type: 'string' },
      state: { type: 'string' },
      'older-than': { type: 'string' },
      by: { type: 'string' },
      reason: { type: 'string' },
      limit: { type: 'string' },
      json: { type: 'boolean' },
    },
    { max: Number.POSITIVE_INFINITY, what: 'ID…' },
  );
  if (values.state !== undefined && values.state !== 'pending') {
    throw new UsageError(
      `--state must be pending (got ${values.state}): a running job's owner holds its message and the rescuer re-publishes it if the owner dies; a finished job needs none`,
    );
  }
  const idList = positionals.length > 0 ? ids(positionals, 'jobs republish') : undefined;
  const olderThan = values['older-than'] !== undefined ? ageSeconds('--older-than', values['older-than']) : undefined;
  if (!idList && !values.type && olderThan === undefined) {
    throw new UsageError('jobs republish: name the pending jobs: job ids, --type T, or --state pending --older-than D (e.g. 10m)');
  }
  const limit = intFlag('--limit', values.limit, 1, 100_000);
  const r = await withOps(env, (ops) =>
    ops.republish.republish({
      ...(idList ? { ids: idList } : {}),
      ...(values.type ? { type: values.type } : {}),
      ...(olderThan !== undefined ? { dueBefore: new Date(Date.now() - olderThan * 1000) } : {}),
      ...(limit !== undefined ? { limit } : {}),
      by: whoAsked(values.by),
      reason: values.reason ?? null,
    }),
  );
  if (values.json) {
    out(JSON.stringify({ republished: r.jobs.length, ...r }));
  } else {
    out(
      `re-published ${r.jobs.length} pending job(s) through the outbox (recorded as job-republish by ${whoAsked(values.by)}); a job that still had its message gets a harmless duplicate`,
    );
    // A job due beyond 15 minutes gets its message only then, like every such job (no message now).
    const later = (j: { runAfter: string }) =>
      beyondHorizon(new Date(j.runAfter)) ? '  (its message is sent 15 min before it is due)' : '';
    for (const j of r.jobs.slice(0, 50)) out(`  ${j.id}  ${j.type.padEnd(16)}  due ${j.runAfter}${later(j)}`);
    if (r.jobs.length > 50) out(`  … and ${r.jobs.length - 50} more`);
    for (const line of skippedLines(r.skipped)) out(line);
  }
  return r.skipped.length > 0 ? 1 : 0;
}
