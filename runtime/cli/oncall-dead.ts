// `jobs dead`: list, show, redrive and discard dead jobs (runtime/oncall/dead-jobs.ts), each
// printing what it did and why for every job, or one JSON document with --json. Exit 1 when a
// job asked for was skipped.

import type { Lane } from '../domain/lanes.ts';
import { PAYLOAD_REFUSED_ADVICE, payloadRefused } from '../domain/settlement.ts';
import type { OpsJob } from '../oncall/db.ts';
import { deathSummary, REDRIVE_BATCH } from '../oncall/dead-jobs.ts';
import { parseCommand } from './args.ts';
import { formatJob, UsageError } from './format.ts';
import { type Env, ids, intFlag, laneFlag, type Out, parseTime, skippedLines, whoAsked, withOps } from './oncall-common.ts';

/** --lane as a filter field (the urgent DLQ's alarm: its dead jobs, not the bulk backlog's). */
function lane(v: string | undefined): { lane?: Lane } {
  const l = laneFlag(v, 'every lane');
  return l ? { lane: l } : {};
}

function deadLine(j: OpsJob): string {
  const d = deathSummary(j);
  const triage = j.dead?.discardedAt ? `  [discarded by ${j.dead.discardedBy}: ${j.dead.discardReason}]` : '';
  return `${j.id}  ${j.type.padEnd(16)}  ${j.lane.padEnd(6)}  ${(j.dead?.deadAt ?? j.finishedAt)?.toISOString() ?? '?'}  ${`${d.attemptsUsed}/${j.maxAttempts}`.padStart(5)}  ${(d.lastOwner ?? '?').padEnd(18)}  ${d.error.slice(0, 80)}${triage}`;
}

/** Which dead jobs, in the flags a person types (the service's own refusal names its request fields). */
function needsSelection(
  action: 'redrive' | 'discard',
  idList: string[] | undefined,
  v: { type?: string; lane?: string; since?: string; until?: string; all?: boolean },
): void {
  const filtered = v.type !== undefined || v.lane !== undefined || v.since !== undefined || v.until !== undefined || v.all === true;
  if (!idList && !filtered)
    throw new UsageError(
      `jobs dead ${action} needs job ids, a type, a lane, a time range (--type T, --lane L, --since T, --until T) or --all (every dead job)`,
    );
  if (idList && filtered) throw new UsageError(`jobs dead ${action}: name job ids or --type/--lane/--since/--until/--all, not both`);
}

export async function deadCommand(argv: string[], env: Env, out: Out): Promise<number> {
  const [sub, ...rest] = argv;
  const filterOptions = {
    type: { type: 'string' },
    lane: { type: 'string' },
    since: { type: 'string' },
    until: { type: 'string' },
    all: { type: 'boolean' },
    by: { type: 'string' },
    json: { type: 'boolean' },
  } as const;
  switch (sub) {
    case 'list': {
      const { values } = parseCommand('jobs dead list', rest, {
        type: { type: 'string' },
        lane: { type: 'string' },
        since: { type: 'string' },
        until: { type: 'string' },
        discarded: { type: 'boolean' },
        limit: { type: 'string', default: '50' },
        json: { type: 'boolean' },
      });
      const limit = intFlag('--limit', values.limit, 1, 1000)!;
      const since = parseTime('--since', values.since);
      const until = parseTime('--until', values.until);
      const page = await withOps(env, (ops) =>
        ops.deadJobs.list({
          limit,
          includeDiscarded: values.discarded ?? false,
          ...(values.type ? { type: values.type } : {}),
          ...lane(values.lane),
          ...(since ? { since } : {}),
          ...(until ? { until } : {}),
        }),
      );
      if (values.json) {
        out(JSON.stringify(page));
        return 0;
      }
      out(
        `${'id'.padEnd(36)}  ${'type'.padEnd(16)}  ${'lane'.padEnd(6)}  ${'died'.padEnd(24)}  ${'att'.padStart(5)}  ${'last owner'.padEnd(18)}  error`,
      );
      for (const j of page.jobs) out(deadLine(j));
      if (page.jobs.length === 0) out('(no dead jobs)');
      else if (page.nextCursor) out(`… more: narrow with --type, --lane, --since, --until or raise --limit`);
      return 0;
    }

    case 'show': {
      const { values, positionals } = parseCommand('jobs dead show', rest, { json: { type: 'boolean' } }, { max: 1, what: 'ID' });
      const [id] = ids(positionals, 'jobs dead show ID');
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
        else if (payloadRefused(j)) out(`  ${PAYLOAD_REFUSED_ADVICE} npx tsx bin/jobs.ts dead discard ${j.id} --reason "<why>"`);
        else out(`  to run it again: npx tsx bin/jobs.ts dead redrive ${j.id} --reason "<what was fixed>" --by <you>`);
      } else {
        out(`not dead: the job is ${j.state}`);
      }
      for (const a of shown.actions) out(`  ${a.at.toISOString()}  ${a.action} by ${a.by}${a.reason ? `: ${a.reason}` : ''}`);
      return 0;
    }

    case 'redrive': {
      const { values, positionals } = parseCommand(
        'jobs dead redrive',
        rest,
        {
          ...filterOptions,
          reason: { type: 'string' },
          'max-attempts': { type: 'string' },
          'from-scratch': { type: 'boolean' },
          'dry-run': { type: 'boolean' },
        },
        { max: Number.POSITIVE_INFINITY, what: 'ID…' },
      );
      const idList = positionals.length > 0 ? ids(positionals, 'jobs dead redrive') : undefined;
      needsSelection('redrive', idList, values);
      const since = parseTime('--since', values.since);
      const until = parseTime('--until', values.until);
      const maxAttempts = intFlag('--max-attempts', values['max-attempts'], 1, 100);
      const by = whoAsked(values.by);
      const r = await withOps(env, (ops) =>
        ops.deadJobs.redrive({
          by,
          ...(idList ? { ids: idList } : {}),
          ...(values.type ? { type: values.type } : {}),
          ...lane(values.lane),
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
      for (const d of r.wereDiscarded)
        out(
          `  note: ${d.id} had been discarded by ${d.by} (${d.reason}); ${r.dryRun ? 'a redrive would run' : 'this redrive runs'} it after all`,
        );
      for (const l of skippedLines(r.skipped)) out(l);
      return r.skipped.length > 0 ? 1 : 0;
    }

    case 'discard': {
      const { values, positionals } = parseCommand(
        'jobs dead discard',
        rest,
        { ...filterOptions, reason: { type: 'string' }, 'dry-run': { type: 'boolean' } },
        { max: Number.POSITIVE_INFINITY, what: 'ID…' },
      );
      const idList = positionals.length > 0 ? ids(positionals, 'jobs dead discard') : undefined;
      needsSelection('discard', idList, values);
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
          ...lane(values.lane),
          ...(since ? { since } : {}),
          ...(until ? { until } : {}),
          all: values.all ?? false,
          dryRun: values['dry-run'] ?? false,
        }),
      );
      // A job already discarded is as asked (like `jobs cancel` of a cancelled job): exit 0.
      const failed = r.skipped.some((s) => !s.alreadyDone) ? 1 : 0;
      if (values.json) {
        out(JSON.stringify(r));
        return failed;
      }
      out(
        r.dryRun
          ? `dry run: would discard ${r.jobs.length} dead job(s)${r.jobs.length >= REDRIVE_BATCH ? ' (the first batch; more may match)' : ''}`
          : `discarded by ${by}: ${r.jobs.length} dead job(s) (${values.reason!.trim()})`,
      );
      for (const j of r.jobs) out(`  ${j.id}  ${j.type}`);
      for (const l of skippedLines(r.skipped)) out(l);
      return failed;
    }

    default:
      throw new UsageError(`jobs dead: unknown subcommand ${sub ?? '(none)'}; use list, show, redrive or discard (see jobs help)`);
  }
}
