// The on-call commands of `jobs` (runtime/cli/main.ts dispatches here): dead jobs, the DLQ,
// poison messages, stuck jobs, and `show --watch`. They talk to PostgreSQL and SQS directly, with
// the operator's own credentials, like the rest of the CLI. Every command prints what it did
// and why for each job or message; --json prints the same as one JSON document.
//
// Exit codes: 0 done; 1 something asked for did not happen (a job skipped, a message not found,
// a move refused, a watched job that did not succeed); 2 bad usage (UsageError).

import { parseArgs } from 'node:util';
import { databaseUrlFromEnv, ENV } from '../config/env.ts';
import { ConfigError } from '../config/rules.ts';
import { sqsFromEnvIfSet } from '../config/sqs.ts';
import { isJobId, parseIsoTime } from '../domain/ids.ts';
import { createPool } from '../db/pool.ts';
import { defaultRegistry } from '../handlers/index.ts';
import { silentLogger } from '../observability/log.ts';
import { SqsQueue } from '../queue/sqs.ts';
import type { JobQueue } from '../queue/types.ts';
import { Publisher } from '../store/outbox.ts';
import { formatJob, UsageError } from './format.ts';
import type { OpsJob } from '../oncall/db.ts';
import { deathSummary, type Skipped } from '../oncall/dead-jobs.ts';
import { MoveCancelError, type DlqPassReport, type ReconciledLetter } from '../oncall/dlq.ts';
import { listPoisonMessages, type PoisonReason } from '../store/poison.ts';
import { createOpsServices, type OpsServices } from '../oncall/services.ts';
import { describeStuck, findStuckJobs, formatDuration, stuckThresholdsFromEnv } from '../oncall/stuck.ts';
import { watchJob } from '../oncall/watch.ts';

type Env = Record<string, string | undefined>;
type Out = (s: string) => void;

/** An ISO 8601 time with an offset, or an age ago (90s, 30m, 6h, 2d). */
export function parseTime(flag: string, raw: string | undefined, now = Date.now()): Date | undefined {
  if (raw === undefined) return undefined;
  const age = /^(\d+)(s|m|h|d)$/.exec(raw.trim());
  if (age) return new Date(now - Number(age[1]) * { s: 1, m: 60, h: 3600, d: 86_400 }[age[2] as 's' | 'm' | 'h' | 'd'] * 1000);
  const d = parseIsoTime(raw.trim());
  if (!d) {
    throw new UsageError(
      `${flag} must be an ISO 8601 time with an offset (2026-10-31T06:00:00Z) or an age such as 30m, 6h, 2d (got ${raw})`,
    );
  }
  return d;
}

function intFlag(flag: string, raw: string | undefined, min: number, max: number): number | undefined {
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new UsageError(`${flag} must be a whole number from ${min} to ${max} (got ${raw})`);
  return n;
}

function ids(positionals: string[], what: string): string[] {
  for (const id of positionals) if (!isJobId(id)) throw new UsageError(`${what}: ${id} is not a job id (a UUID)`);
  return positionals.map((id) => id.toLowerCase());
}

const whoAsked = (by: string | undefined) => `${by ?? process.env.USER ?? 'unknown'} (cli)`;

/** Pool, publisher and queues from the environment, for one command. */
async function withOps<T>(env: Env, fn: (ops: OpsServices) => Promise<T>): Promise<T> {
  const sqs = sqsFromEnvIfSet(env);
  const pool = createPool({ url: databaseUrlFromEnv(env), max: 3, applicationName: 'jobs-cli ops' });
  try {
    const queue: JobQueue = sqs
      ? new SqsQueue(sqs)
      : {
          send: async () => {
            throw new Error(`${ENV.queueUrl} is not set: the outbox relay will publish`);
          },
          receive: async () => [],
          changeVisibility: async () => [],
          delete: async () => [],
        };
    const publisher = new Publisher(pool, queue, silentLogger);
    const ops = createOpsServices({
      pool,
      registry: defaultRegistry(),
      publisher,
      queue,
      log: silentLogger,
      ...(sqs ? { queueUrl: sqs.queueUrl, region: sqs.region } : {}),
      ...(sqs?.dlqUrl ? { dlqUrl: sqs.dlqUrl } : {}),
      ...(sqs?.endpoint ? { endpoint: sqs.endpoint } : {}),
      stuck: stuckThresholdsFromEnv(env),
    });
    const result = await fn(ops);
    await publisher.flush();
    return result;
  } finally {
    await pool.end();
  }
}

function needDlq(ops: OpsServices) {
  if (!ops.deadLetters) {
    throw new ConfigError('environment', [
      {
        rule: 'dlq-configured',
        message: `${ENV.dlqUrl} and ${ENV.queueUrl} are required for the DLQ commands (the queue URLs are stack outputs; next to \`jobs local\` they come from .jobs-local/env)`,
      },
    ]);
  }
  return ops.deadLetters;
}

// ------------------------------------------------------------------------------ formatting

function deadLine(j: OpsJob): string {
  const d = deathSummary(j);
  const triage = j.dead?.discardedAt ? `  [discarded by ${j.dead.discardedBy}: ${j.dead.discardReason}]` : '';
  return `${j.id}  ${j.type.padEnd(16)}  ${(j.dead?.deadAt ?? j.finishedAt)?.toISOString() ?? '?'}  ${`${d.attemptsUsed}/${j.maxAttempts}`.padStart(5)}  ${(d.lastOwner ?? '?').padEnd(18)}  ${d.error.slice(0, 80)}${triage}`;
}

function skippedLines(skipped: Skipped[]): string[] {
  return skipped.map((s) => `  skipped ${s.id}${s.type ? ` (${s.type})` : ''}: ${s.reason}`);
}

function letterLine(l: ReconciledLetter): string {
  const job = l.jobId ? `job ${l.jobId}${l.jobType ? ` (${l.jobType})` : ''} ${l.jobState ?? 'missing'}` : 'no job';
  const sent = l.sentAt ? l.sentAt.toISOString() : '?';
  const done = l.done ? `${l.done}: ` : `${l.verdict}: `;
  return `${l.messageId}  ${sent}  ${l.reason.padEnd(27)}  ${job}\n    ${done}${l.why}${l.detail ? `\n    detail: ${l.detail.slice(0, 200)}` : ''}${l.kind === 'poison' ? `\n    body (${l.body.length} bytes): ${JSON.stringify(l.body.slice(0, 300))}${l.senderId ? `\n    sender: ${l.senderId}` : ''}` : ''}`;
}

function passSummary(r: DlqPassReport): string {
  const seen = `${r.letters.length} dead letter(s)${r.complete ? '' : ' (stopped at the limit; more remain)'}`;
  return `${seen}: ${r.counts.resend} to resend, ${r.counts.drop} obsolete, ${r.counts.keep} to keep`;
}

// ------------------------------------------------------------------------------ commands

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
    });
  } finally {
    process.off('SIGINT', stop);
    await pool.end();
  }
}

async function deadCommand(argv: string[], env: Env, out: Out): Promise<number> {
  const [sub, ...rest] = argv;
  const filterOptions = {
    type: { type: 'string' },
    since: { type: 'string' },
    until: { type: 'string' },
    all: { type: 'boolean' },
    by: { type: 'string' },
    json: { type: 'boolean' },
  } as const;
  switch (sub) {
    case 'list': {
      const { values } = parseArgs({
        args: rest,
        options: {
          type: { type: 'string' },
          since: { type: 'string' },
          until: { type: 'string' },
          discarded: { type: 'boolean' },
          limit: { type: 'string', default: '50' },
          json: { type: 'boolean' },
        },
      });
      const limit = intFlag('--limit', values.limit, 1, 1000)!;
      const since = parseTime('--since', values.since);
      const until = parseTime('--until', values.until);
      const page = await withOps(env, (ops) =>
        ops.deadJobs.list({
          limit,
          includeDiscarded: values.discarded ?? false,
          ...(values.type ? { type: values.type } : {}),
          ...(since ? { since } : {}),
          ...(until ? { until } : {}),
        }),
      );
      if (values.json) {
        out(JSON.stringify(page));
        return 0;
      }
      out(`${'id'.padEnd(36)}  ${'type'.padEnd(16)}  ${'died'.padEnd(24)}  ${'att'.padStart(5)}  ${'last owner'.padEnd(18)}  error`);
      for (const j of page.jobs) out(deadLine(j));
      if (page.jobs.length === 0) out('(no dead jobs)');
      else if (page.nextCursor) out(`… more: narrow with --type, --since, --until or raise --limit`);
      return 0;
    }

    case 'show': {
      const { values, positionals } = parseArgs({ args: rest, allowPositionals: true, options: { json: { type: 'boolean' } } });
      const [id] = ids(positionals.slice(0, 1), 'jobs dead show ID');
      if (!id) throw new UsageError('jobs dead show ID: the job id is missing');
      const shown = await withOps(env, (ops) => ops.deadJobs.get(id));
      if (!shown) {
        process.stderr.write(`no job ${id}\n`);
        return 1;
      }
      if (values.json) {
        out(JSON.stringify(shown));
        return 0;
      }
      const j = shown.job;
      const d = deathSummary(j);
      out(formatJob(j));
      if (j.state === 'dead') {
        out(`dead since ${j.dead?.deadAt.toISOString() ?? j.finishedAt?.toISOString()}: ${d.error}`);
        out(`  ${d.attemptsUsed} of ${j.maxAttempts} attempts used; last owner ${d.lastOwner ?? 'unknown'}`);
        if (j.dead?.discardedAt)
          out(`  discarded by ${j.dead.discardedBy} at ${j.dead.discardedAt.toISOString()}: ${j.dead.discardReason}`);
        else out(`  to run it again: npx tsx bin/jobs.ts dead redrive ${j.id} --reason "<what was fixed>"`);
      } else {
        out(`not dead: the job is ${j.state}`);
      }
      for (const a of shown.actions) out(`  ${a.at.toISOString()}  ${a.action} by ${a.by}${a.reason ? `: ${a.reason}` : ''}`);
      return 0;
    }

    case 'redrive': {
      const { values, positionals } = parseArgs({
        args: rest,
        allowPositionals: true,
        options: {
          ...filterOptions,
          reason: { type: 'string' },
          'max-attempts': { type: 'string' },
          'from-scratch': { type: 'boolean' },
          'dry-run': { type: 'boolean' },
        },
      });
      const idList = positionals.length > 0 ? ids(positionals, 'jobs dead redrive') : undefined;
      const since = parseTime('--since', values.since);
      const until = parseTime('--until', values.until);
      const maxAttempts = intFlag('--max-attempts', values['max-attempts'], 1, 100);
      const by = whoAsked(values.by);
      const r = await withOps(env, (ops) =>
        ops.deadJobs.redrive({
          by,
          ...(idList ? { ids: idList } : {}),
          ...(values.type ? { type: values.type } : {}),
          ...(since ? { since } : {}),
          ...(until ? { until } : {}),
          all: values.all ?? false,
          reason: values.reason ?? null,
          maxAttempts: maxAttempts ?? null,
          fromScratch: values['from-scratch'] ?? false,
          dryRun: values['dry-run'] ?? false,
        }),
      );
      if (values.json) {
        out(JSON.stringify(r));
        return r.skipped.length > 0 ? 1 : 0;
      }
      if (r.dryRun) {
        out(`dry run: would redrive ${r.wouldRedrive.length} dead job(s)`);
        for (const id of r.wouldRedrive) out(`  ${id}`);
      } else {
        out(`redriven by ${by}: ${r.jobs.length} job(s) back to pending with a fresh attempt budget, re-published`);
        for (const j of r.jobs)
          out(`  ${j.id}  ${j.type}  attempt budget ${j.maxAttempts}${j.checkpoint ? ' (resumes from its checkpoint)' : ''}`);
      }
      for (const l of skippedLines(r.skipped)) out(l);
      return r.skipped.length > 0 ? 1 : 0;
    }

    case 'discard': {
      const { values, positionals } = parseArgs({
        args: rest,
        allowPositionals: true,
        options: { ...filterOptions, reason: { type: 'string' } },
      });
      const idList = positionals.length > 0 ? ids(positionals, 'jobs dead discard') : undefined;
      if (!values.reason?.trim()) throw new UsageError('jobs dead discard: --reason is required (why will these dead jobs not be re-run?)');
      const since = parseTime('--since', values.since);
      const until = parseTime('--until', values.until);
      const by = whoAsked(values.by);
      const r = await withOps(env, (ops) =>
        ops.deadJobs.discard({
          by,
          reason: values.reason!,
          ...(idList ? { ids: idList } : {}),
          ...(values.type ? { type: values.type } : {}),
          ...(since ? { since } : {}),
          ...(until ? { until } : {}),
          all: values.all ?? false,
        }),
      );
      if (values.json) {
        out(JSON.stringify(r));
        return r.skipped.length > 0 ? 1 : 0;
      }
      out(`discarded by ${by}: ${r.jobs.length} dead job(s) (${values.reason!.trim()})`);
      for (const j of r.jobs) out(`  ${j.id}  ${j.type}`);
      for (const l of skippedLines(r.skipped)) out(l);
      return r.skipped.length > 0 ? 1 : 0;
    }

    default:
      throw new UsageError(`jobs dead: unknown subcommand ${sub ?? '(none)'}; use list, show, redrive or discard (see jobs help)`);
  }
}

async function dlqCommand(argv: string[], env: Env, out: Out): Promise<number> {
  const [sub, ...rest] = argv;
  switch (sub) {
    case 'list': {
      const { values } = parseArgs({
        args: rest,
        options: { limit: { type: 'string', default: '1000' }, poison: { type: 'boolean' }, json: { type: 'boolean' } },
      });
      const limit = intFlag('--limit', values.limit, 1, 100_000)!;
      const r = await withOps(env, (ops) => needDlq(ops).look(limit));
      const letters = values.poison ? r.letters.filter((l) => l.verdict === 'keep' && l.jobState === null) : r.letters;
      if (values.json) {
        out(JSON.stringify({ ...r, letters }));
        return 0;
      }
      out(passSummary(r));
      for (const l of letters) out(letterLine(l));
      if (letters.length === 0) out(values.poison ? '(no poison messages in the DLQ)' : '(the DLQ is empty)');
      return 0;
    }

    case 'redrive': {
      const { values } = parseArgs({
        args: rest,
        options: {
          'dry-run': { type: 'boolean' },
          move: { type: 'boolean' },
          rate: { type: 'string' },
          limit: { type: 'string', default: '1000' },
          by: { type: 'string' },
          json: { type: 'boolean' },
        },
      });
      const limit = intFlag('--limit', values.limit, 1, 100_000)!;
      const rate = intFlag('--rate', values.rate, 1, 500);
      const by = whoAsked(values.by);
      const r = await withOps(env, (ops) =>
        needDlq(ops).redrive({
          by,
          dryRun: values['dry-run'] ?? false,
          move: values.move ?? false,
          limit,
          ...(rate ? { maxPerSecond: rate } : {}),
        }),
      );
      if (values.json) {
        out(JSON.stringify(r));
        return r.refused ? 1 : 0;
      }
      for (const n of r.notes.filter((x) => /local SQS endpoint/.test(x))) out(`note: ${n}`);
      out(`${r.dryRun ? 'dry run: ' : ''}${passSummary(r)}`);
      for (const l of r.letters) out(letterLine(l));
      for (const n of r.notes.filter((x) => !/local SQS endpoint/.test(x))) out(`note: ${n}`);
      if (r.moveTask) out(`move task ${r.moveTask.taskHandle}: ${r.moveTask.dlqArn} → ${r.moveTask.queueArn}`);
      if (r.refused) {
        process.stderr.write(`refused: ${r.refused}\n`);
        return 1;
      }
      return 0;
    }

    case 'discard': {
      const { values, positionals } = parseArgs({
        args: rest,
        allowPositionals: true,
        options: { reason: { type: 'string' }, by: { type: 'string' }, json: { type: 'boolean' } },
      });
      if (positionals.length === 0) throw new UsageError('jobs dlq discard MESSAGE_ID…: name the message ids (see jobs dlq list)');
      if (!values.reason?.trim()) throw new UsageError('jobs dlq discard: --reason is required (why are these dead letters thrown away?)');
      const by = whoAsked(values.by);
      const r = await withOps(env, (ops) => needDlq(ops).discard({ messageIds: positionals, by, reason: values.reason! }));
      if (values.json) {
        out(JSON.stringify(r));
        return r.notFound.length > 0 ? 1 : 0;
      }
      out(`discarded by ${by}: ${r.letters.length} dead letter(s) (${values.reason!.trim()})`);
      for (const l of r.letters) out(letterLine(l));
      for (const id of r.notFound) out(`  not found in the DLQ: ${id}`);
      return r.notFound.length > 0 ? 1 : 0;
    }

    case 'move-status': {
      const { values } = parseArgs({ args: rest, options: { json: { type: 'boolean' } } });
      const { tasks, local } = await withOps(env, async (ops) => ({ tasks: await needDlq(ops).moveTasks(), local: needDlq(ops).local }));
      if (values.json) {
        out(JSON.stringify(tasks));
        return 0;
      }
      if (local) out('the local SQS endpoint has no message move tasks: `jobs dlq redrive` moves by receive and resend');
      for (const t of tasks) {
        out(
          `${t.taskHandle ?? '?'}  ${t.status}  ${t.moved}${t.toMove !== null ? ` of ${t.toMove}` : ''} moved  started ${t.startedAt?.toISOString() ?? '?'}${t.failureReason ? `  failed: ${t.failureReason}` : ''}`,
        );
      }
      if (!local && tasks.length === 0) out('(no move tasks)');
      return 0;
    }

    case 'move-cancel': {
      const { values, positionals } = parseArgs({
        args: rest,
        allowPositionals: true,
        options: { by: { type: 'string' }, json: { type: 'boolean' } },
      });
      if (positionals.length !== 1 || !positionals[0]!.trim()) {
        throw new UsageError(
          `jobs dlq move-cancel TASK_HANDLE: name one move task handle (see jobs dlq move-status)${positionals.length > 1 ? `, got ${positionals.length} arguments` : ''}`,
        );
      }
      const by = whoAsked(values.by);
      try {
        const r = await withOps(env, (ops) => needDlq(ops).cancelMove({ taskHandle: positionals[0]!, by }));
        if (values.json) out(JSON.stringify({ cancelled: true, ...r }));
        else {
          out(`cancelled by ${by}: move task ${r.taskHandle}${r.moved !== null ? `, after ${r.moved} dead letter(s) had been moved` : ''}`);
          out(
            'note: what it moved stays in the job queue (the worker settles each by its job row); the rest stays in the DLQ. `jobs dlq move-status` shows the task as cancelling, then cancelled',
          );
        }
        return 0;
      } catch (err) {
        if (!(err instanceof MoveCancelError)) throw err;
        if (values.json) out(JSON.stringify({ cancelled: false, taskHandle: err.taskHandle, reason: err.reason, message: err.message }));
        process.stderr.write(`not cancelled: ${err.message}\n`);
        return 1;
      }
    }

    default:
      throw new UsageError(
        `jobs dlq: unknown subcommand ${sub ?? '(none)'}; use list, redrive, discard, move-status or move-cancel (see jobs help)`,
      );
  }
}

async function poisonCommand(argv: string[], env: Env, out: Out): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub !== 'list') throw new UsageError(`jobs poison: unknown subcommand ${sub ?? '(none)'}; use list (see jobs help)`);
  const { values } = parseArgs({
    args: rest,
    options: {
      reason: { type: 'string' },
      since: { type: 'string' },
      resolved: { type: 'boolean' },
      limit: { type: 'string', default: '50' },
      json: { type: 'boolean' },
    },
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
  const { values } = parseArgs({
    args: argv,
    options: {
      'running-seconds': { type: 'string' },
      'pending-seconds': { type: 'string' },
      limit: { type: 'string', default: '100' },
      json: { type: 'boolean' },
    },
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

/** An age such as 90s, 30m, 6h, 2d, in seconds. */
function ageSeconds(flag: string, raw: string): number {
  const m = /^(\d+)(s|m|h|d)$/.exec(raw.trim());
  if (!m) throw new UsageError(`${flag} must be an age such as 90s, 30m, 6h, 2d (got ${raw})`);
  return Number(m[1]) * { s: 1, m: 60, h: 3600, d: 86_400 }[m[2] as 's' | 'm' | 'h' | 'd'];
}

/** `jobs republish (ID… | --type T | --state pending --older-than D)`: fresh messages for pending jobs. */
async function republishCommand(argv: string[], env: Env, out: Out): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      type: { type: 'string' },
      state: { type: 'string' },
      'older-than': { type: 'string' },
      by: { type: 'string' },
      reason: { type: 'string' },
      limit: { type: 'string' },
      json: { type: 'boolean' },
    },
  });
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
    for (const j of r.jobs.slice(0, 50)) out(`  ${j.id}  ${j.type.padEnd(16)}  due ${j.runAfter}`);
    if (r.jobs.length > 50) out(`  … and ${r.jobs.length - 50} more`);
    for (const line of skippedLines(r.skipped)) out(line);
  }
  return r.skipped.length > 0 ? 1 : 0;
}
