// The job commands of `jobs` (runtime/cli/main.ts dispatches here): list the job types, enqueue
// a job, show, list and cancel jobs. Each opens its own small pool, does its one thing and closes it.

import type pg from 'pg';
import { databaseUrlFromEnv, jobTimingsFromEnv } from '../config/env.ts';
import { keepFinishedDaysFromEnv } from '../config/retention.ts';
import { sqsFromEnvIfSet } from '../config/sqs.ts';
import { createPool } from '../db/pool.ts';
import { ValidationError } from '../domain/errors.ts';
import { isJobId } from '../domain/ids.ts';
import type { Job, JobState } from '../domain/job.ts';
import { JOB_STATES } from '../domain/job.ts';
import { isLane, LANES, type Lane } from '../domain/lanes.ts';
import { defaultRegistry } from '../handlers/index.ts';
import { formatDuration, waitingFor } from '../domain/reading.ts';
import { describeJobType } from '../handlers/types.ts';
import { announceCancel, eventsEnabled } from '../live/events.ts';
import { silentLogger } from '../observability/log.ts';
import { JobClient } from '../store/client.ts';
import type { JobStore } from '../store/job-store.ts';
import { isTypeRegistered } from '../store/job-types.ts';
import { Publisher } from '../store/outbox.ts';
import { parseCommand } from './args.ts';
import { blockers, formatJob, UsageError } from './format.ts';
import { whoAsked } from './oncall-common.ts';
import { cliQueue } from './queue.ts';

export type Env = Record<string, string | undefined>;

export type JobCommand = 'types' | 'enqueue' | 'show' | 'cancel' | 'list';

async function withClient<T>(
  env: Env,
  fn: (c: { store: JobStore; client: JobClient; publisher: Publisher; pool: pg.Pool }) => Promise<T>,
): Promise<T> {
  const sqs = sqsFromEnvIfSet(env);
  const pool = createPool({ url: databaseUrlFromEnv(env), max: 2, applicationName: 'jobs-cli' });
  try {
    const queue = cliQueue(sqs);
    const publisher = new Publisher(pool, queue, silentLogger);
    const timings = jobTimingsFromEnv(env);
    const client = new JobClient({
      pool,
      registry: defaultRegistry(),
      publisher,
      defaultMaxAttempts: timings.maxAttempts,
      defaultKeepFinishedDays: keepFinishedDaysFromEnv(env),
      // `jobs cancel` shows in the live view's feed, with who asked, when the stack's event bus is on.
      ...(eventsEnabled(env) ? { onCancelled: (job: Job) => announceCancel(pool, job, 'cli') } : {}),
    });
    const out = await fn({ store: client.store, client, publisher, pool });
    await publisher.drain();
    return out;
  } finally {
    await pool.end();
  }
}

/** One job command; `resolveEnv` is the caller's (the real environment over `jobs local`'s file). */
export async function jobCommand(
  command: JobCommand,
  rest: string[],
  resolveEnv: () => Promise<Env>,
  out: (s: string) => void,
): Promise<number> {
  switch (command) {
    case 'types': {
      const { values } = parseCommand('jobs types', rest, { describe: { type: 'boolean' }, json: { type: 'boolean' } });
      const registry = defaultRegistry();
      // What GET /v1/job-types gives, one shape (handlers/types.ts describeJobType).
      const types = registry.types().map((t) => describeJobType(registry.get(t)!));
      if (values.json) {
        out(JSON.stringify(types, null, 2));
        return 0;
      }
      for (const d of types) {
        out(`${d.type.padEnd(20)} ${d.description}`);
        if (!values.describe) continue;
        const idem = d.idempotency;
        if (idem) out(`  idempotency keys kept ${'keep' in idem ? 'forever' : `${idem.keepDays} days`} after the job ends`);
        out(
          `  lane ${d.lane}${d.maxAttempts !== undefined ? `; at most ${d.maxAttempts} attempts` : ''}${d.expectedMaxSeconds !== undefined ? `; stuck after ${d.expectedMaxSeconds} s running` : ''}`,
        );
        if (d.concurrency) out(`  concurrency key ${d.concurrency.key}: at most ${d.concurrency.limit} at a time per key`);
        if (d.maxRunning !== undefined) out(`  at most ${d.maxRunning} running at once across the fleet`);
        // One line per payload field, from the type's schema: name, type, required or its default, the rule.
        for (const f of d.payload.fields) {
          const need = f.required ? 'required' : f.default !== undefined ? `default ${JSON.stringify(f.default)}` : 'optional';
          out(
            `  ${f.name.padEnd(18)} ${f.type.padEnd(8)} ${need}${f.rule ? `; ${f.rule}` : ''}${f.description ? ` — ${f.description}` : ''}`,
          );
        }
      }
      return 0;
    }

    case 'enqueue': {
      const { values, positionals } = parseCommand(
        'jobs enqueue',
        rest,
        {
          payload: { type: 'string' },
          key: { type: 'string' },
          'max-attempts': { type: 'string' },
          'run-at': { type: 'string' },
          'concurrency-key': { type: 'string' },
          'concurrency-limit': { type: 'string' },
          lane: { type: 'string' },
          json: { type: 'boolean' },
        },
        { max: 1, what: 'TYPE' },
      );
      const type = positionals[0];
      if (!type) throw new UsageError('jobs enqueue TYPE --payload JSON: the job type is missing');
      if (values.payload === undefined)
        throw new UsageError(
          `--payload is required: the ${type} job's payload, a JSON object (--payload '{"batch":"B-1","entries":10}' for ledger.post), @FILE to read it from a file, or - to read it from stdin; \`jobs types --describe\` lists each type's fields`,
        );
      const payload = parsePayload(values.payload, await payloadText(values.payload));
      const env = await resolveEnv();
      const { r, registered } = await withClient(env, async ({ client, pool }) => ({
        r: (
          await client
            .enqueueNow({
              type,
              payload,
              idempotencyKey: values.key ?? null,
              maxAttempts: values['max-attempts'] ? Number(values['max-attempts']) : null,
              runAt: values['run-at'] ?? null,
              concurrencyKey: values['concurrency-key'] ?? null,
              concurrencyLimit: values['concurrency-limit'] ? Number(values['concurrency-limit']) : null,
              // Checked by the enqueue rules (a bad lane is refused naming the allowed ones).
              lane: (values.lane as Lane | undefined) ?? null,
            })
            .catch((err: unknown) => {
              throw asFlagError(err, values);
            })
        )[0],
        registered: await isTypeRegistered(pool, type),
      }));
      if (values.json) out(JSON.stringify({ ...r!.job, duplicate: r!.duplicate, ...(r!.payloadDiffers ? { payloadDiffers: true } : {}) }));
      else out(`${r!.duplicate ? duplicateText(r!.job) : 'enqueued'}\n${formatJob(r!.job)}`);
      // Accepted (the API takes a past runAt as "now"), but a year typed wrong should not pass unseen.
      if (values['run-at'] && !r!.duplicate && r!.job.runAfter < r!.job.createdAt)
        process.stderr.write(`jobs: note: --run-at ${values['run-at']} is in the past: the job is due now\n`);
      if (r!.payloadDiffers)
        process.stderr.write(
          `jobs: note: the job this key names has another payload (${clip(JSON.stringify(r!.job.payload), 200)}): nothing was enqueued for this one; other work needs another key\n`,
        );
      // This command loads the code afresh; the running services know the types they had at start.
      if (!registered)
        process.stderr.write(
          `jobs: note: no API or worker on this database has registered job type ${type} (each registers its types when it starts): the job waits, handed on between workers, until one that has the type runs. Locally: \`npx tsx bin/jobs.ts local restart\` after adding a handler (the stack keeps its database and jobs).\n`,
        );
      return 0;
    }

    case 'show': {
      const { values, positionals } = parseCommand(
        'jobs show',
        rest,
        { json: { type: 'boolean' }, watch: { type: 'boolean' }, interval: { type: 'string' } },
        { max: 1, what: 'ID' },
      );
      const id = positionals[0];
      if (!id || !isJobId(id)) throw new UsageError(`jobs show ID: ID must be a job id (a UUID), got ${id ?? 'nothing'}`);
      const env = await resolveEnv();
      if (values.watch) return (await import('./oncall.ts')).watchCommand(id.toLowerCase(), values.interval, env);
      const [job, around] = await withClient(env, async ({ store }) => {
        const j = await store.get(id);
        if (!j) return [null, {}] as const;
        const [waitingOn, children] = await Promise.all([blockers(store, j), store.children(j.id, 21)]);
        return [
          j,
          {
            ...waitingOn,
            // 20 shown; a 21st says there are more, counted.
            children: { jobs: children.slice(0, 20), total: children.length > 20 ? await store.childCount(j.id) : children.length },
          },
        ] as const;
      });
      if (!job) {
        process.stderr.write(`no job ${id}\n`);
        return 1;
      }
      out(values.json ? JSON.stringify(job) : formatJob(job, around));
      return 0;
    }

    case 'cancel': {
      const { values, positionals } = parseCommand('jobs cancel', rest, { by: { type: 'string' } }, { max: 1, what: 'ID' });
      const id = positionals[0];
      if (!id || !isJobId(id)) throw new UsageError(`jobs cancel ID: ID must be a job id (a UUID), got ${id ?? 'nothing'}`);
      const by = whoAsked(values.by);
      const env = await resolveEnv();
      const r = await withClient(env, ({ client }) => client.cancel(id, by));
      if (!r) {
        process.stderr.write(`no job ${id}\n`);
        return 1;
      }
      // Already cancelled: what was asked holds (exit 0). Ended otherwise: it was not cancelled (exit 1).
      out(
        r.cancelled
          ? `cancelled by ${by}`
          : r.job.state === 'cancelled'
            ? 'already cancelled: nothing to do'
            : `not cancelled: the job had already ended (${r.job.state})`,
      );
      out(formatJob(r.job));
      return r.cancelled || r.job.state === 'cancelled' ? 0 : 1;
    }

    case 'list': {
      const { values } = parseCommand('jobs list', rest, {
        state: { type: 'string' },
        type: { type: 'string' },
        lane: { type: 'string' },
        limit: { type: 'string', default: '20' },
        json: { type: 'boolean' },
      });
      if (values.state && !JOB_STATES.includes(values.state as JobState))
        throw new UsageError(`--state must be one of ${JOB_STATES.join(', ')} (got ${values.state})`);
      if (values.lane && !isLane(values.lane)) throw new UsageError(`--lane must be one of ${LANES.join(', ')} (got ${values.lane})`);
      const limit = Number(values.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
        throw new UsageError(`--limit must be a whole number from 1 to 1000 (got ${values.limit})`);
      const env = await resolveEnv();
      const jobs = await withClient(env, ({ store }) =>
        store.list({
          limit,
          ...(values.state ? { state: values.state as JobState } : {}),
          ...(values.type ? { type: values.type } : {}),
          ...(values.lane ? { lane: values.lane as Lane } : {}),
        }),
      );
      if (values.json) {
        out(JSON.stringify(jobs));
        return 0;
      }
      out(`${'id'.padEnd(36)}  ${'type'.padEnd(16)}  ${'state'.padEnd(9)}  ${'lane'.padEnd(6)}  att  ${'created'.padEnd(24)}  note`);
      for (const j of jobs) {
        // A blocked job says what it waits for; one due later, when (a retry, then its last error); any other, its last error.
        const later = j.state === 'pending' && j.runAfter.getTime() > Date.now();
        const error = j.lastError ? clip(j.lastError.message, 60) : '';
        const note =
          j.blockedSince && j.state === 'pending'
            ? `waiting ${waitingFor(j)}`
            : later
              ? `due in ${formatDuration((j.runAfter.getTime() - Date.now()) / 1000)}${error ? ` · ${error}` : ''}`
              : // A job that succeeded after failing: its error was an earlier attempt's, not its outcome.
                j.state === 'succeeded' && error
                ? `after a failed attempt: ${error}`
                : error;
        out(
          `${j.id}  ${j.type.padEnd(16)}  ${j.state.padEnd(9)}  ${j.lane.padEnd(6)}  ${String(j.attempt).padStart(3)}  ${j.createdAt.toISOString().padEnd(24)}  ${note}`,
        );
      }
      if (jobs.length === 0) out('(no jobs)');
      return 0;
    }
  }
}

/** The flag of `jobs enqueue` that sets each field of the enqueue request. */
const ENQUEUE_FLAGS: Record<string, string> = {
  idempotencyKey: 'key',
  maxAttempts: 'max-attempts',
  runAt: 'run-at',
  concurrencyKey: 'concurrency-key',
  concurrencyLimit: 'concurrency-limit',
  lane: 'lane',
};

/**
 * The enqueue rules name the request's field (`idempotencyKey: must be …`, as the API answers);
 * a person at the CLI typed a flag: name it instead, and for a key, the length given.
 */
function asFlagError(err: unknown, values: Record<string, string | boolean | undefined>): unknown {
  const flag = err instanceof ValidationError ? ENQUEUE_FLAGS[err.field] : undefined;
  if (!flag || !(err instanceof ValidationError)) return err;
  const given = values[flag];
  const length =
    (flag === 'key' || flag === 'concurrency-key') && typeof given === 'string' && err.reason.startsWith('must be a string of')
      ? given.length === 0
        ? ' (got an empty one)'
        : ` (got ${given.length} characters)`
      : '';
  // A number flag's rule shows the number it was read as (NaN): show what was typed.
  const reason =
    (flag === 'max-attempts' || flag === 'concurrency-limit') && typeof given === 'string'
      ? err.reason.replace(/\(got [^)]*\)$/, `(got ${given})`)
      : err.reason;
  return new UsageError(`--${flag} ${reason}${length}`);
}

/** What a duplicate enqueue found: an active job, or the ended job a lasting key keeps (defineJob's `idempotency`). */
function duplicateText(job: Job): string {
  return job.finishedAt
    ? `duplicate: the job with this key ended ${job.state}; its type keeps the key, so it is not enqueued again`
    : 'duplicate: an active job with this key exists';
}

/** `s` in at most `max` characters, cut at a word where it can be, with an ellipsis when cut. */
function clip(s: string, max: number): string {
  if (s.length <= max) return s;
  const cut = s.slice(0, max - 1);
  const space = cut.lastIndexOf(' ');
  return `${space > max / 2 ? cut.slice(0, space) : cut}…`;
}

/**
 * The text of `--payload`: inline JSON, `@FILE` (a payload over the shell's 128 KiB argument
 * limit, up to the platform's 256 KiB), or `-` for stdin.
 */
async function payloadText(arg: string): Promise<string> {
  if (arg === '-') {
    if (process.stdin.isTTY) process.stderr.write('jobs: reading the payload from stdin (end it with Ctrl-D)\n');
    const chunks: Buffer[] = [];
    for await (const c of process.stdin) chunks.push(c as Buffer);
    return Buffer.concat(chunks).toString('utf8');
  }
  if (!arg.startsWith('@')) return arg;
  const { readFile } = await import('node:fs/promises');
  try {
    return await readFile(arg.slice(1), 'utf8');
  } catch (err) {
    throw new UsageError(
      `--payload ${arg}: cannot read ${arg.slice(1)} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
    );
  }
}

function parsePayload(arg: string, text: string): unknown {
  try {
    // A file saved by an editor that writes a byte-order mark is still JSON to the person.
    return JSON.parse(text.replace(/^\uFEFF/, ''));
  } catch (err) {
    const from = arg === '-' ? ' (read from stdin)' : arg.startsWith('@') ? ` (read from ${arg.slice(1)})` : '';
    throw new UsageError(`--payload${from} is not valid JSON: ${(err as Error).message}`);
  }
}
