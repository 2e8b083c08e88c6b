// `jobs schedules list|pause|resume|trigger` (runtime/cli/main.ts dispatches here): on-call's view
// of the schedules declared in code and what the database holds about them (oncall/schedules.ts),
// the same as /v1/schedules. Pause, resume and trigger are recorded as operator actions with who
// asked (--by, else the login name).
//
// Exit codes: 0 done; 1 nothing changed (already paused, not paused); 2 bad usage or an unknown
// schedule (the message lists the known ones).

import type { ScheduleView } from '../oncall/schedules.ts';
import { parseCommand } from './args.ts';
import { UsageError } from './format.ts';
import { type Env, intFlag, type Out, whoAsked, withOps } from './oncall-common.ts';

export async function schedulesCommand(argv: string[], env: Env, out: Out): Promise<number> {
  const [sub, ...rest] = argv;
  switch (sub) {
    case 'list':
      return list(rest, env, out);
    case 'pause':
    case 'resume':
    case 'trigger':
      return change(sub, rest, env, out);
    default:
      throw new UsageError(`jobs schedules: unknown subcommand ${sub ?? '(none)'}; use list, pause, resume or trigger (see jobs help)`);
  }
}

async function list(argv: string[], env: Env, out: Out): Promise<number> {
  const { values } = parseCommand('jobs schedules list', argv, {
    next: { type: 'string' },
    last: { type: 'string' },
    json: { type: 'boolean' },
  });
  const next = intFlag('--next', values.next, 0, 50) ?? 3;
  const last = intFlag('--last', values.last, 0, 50) ?? 3;
  const schedules = await withOps(env, (ops) => ops.schedules.list({ next, last }));
  if (values.json) {
    out(JSON.stringify({ schedules }));
    return 0;
  }
  for (const s of schedules) for (const line of describe(s)) out(line);
  if (schedules.length === 0) out('(no schedules declared in this build: runtime/handlers/schedules.ts)');
  return 0;
}

/** A schedule as lines a person reads. */
export function describe(s: ScheduleView): string[] {
  const lines = [
    `${s.name}  ${s.paused ? `PAUSED by ${s.paused.by} at ${s.paused.at}${s.paused.reason ? ` (${s.paused.reason})` : ''}` : 'active'}`,
    `    ${s.cron}  ${s.timeZone}  → ${s.type}  missed: ${s.missed}${s.description ? `  — ${s.description}` : ''}`,
  ];
  if (s.overdue)
    lines.push(
      `    OVERDUE: ${s.overdue.label} not enqueued, ${fmtOverdue(s.overdue.seconds)} past due: the schedulers' passes fail (logs: "schedule ${s.name}: pass failed") or no task runs; runbook "Schedule failing"`,
    );
  if (s.next.length > 0) lines.push(`    next: ${s.next.map((n) => n.label).join(', ')}${s.paused ? ' (not while paused)' : ''}`);
  if (s.last.length === 0) lines.push('    last: (none enqueued yet)');
  for (const l of s.last) {
    if (l.skipped)
      lines.push(
        `    last: ${l.label}  not enqueued: its work ${l.skipped.workKey} was done by job ${l.skipped.jobId ?? '?'} (${l.skipped.state ?? 'gone'})`,
      );
    else lines.push(`    last: ${l.label}  job ${l.jobId ?? '?'}  ${l.state ?? 'gone'}${l.late ? '  (late: caught up)' : ''}`);
  }
  return lines;
}

async function change(action: 'pause' | 'resume' | 'trigger', argv: string[], env: Env, out: Out): Promise<number> {
  const { values, positionals } = parseCommand(
    `jobs schedules ${action}`,
    argv,
    {
      by: { type: 'string' },
      reason: { type: 'string' },
      json: { type: 'boolean' },
      ...(action === 'trigger' ? { again: { type: 'boolean' } } : {}),
    },
    { max: 1, what: 'NAME' },
  );
  const [name] = positionals;
  if (!name) throw new UsageError(`jobs schedules ${action}: name one schedule (jobs schedules list shows them)`);
  const by = whoAsked(values.by);
  const reason = values.reason ?? null;
  return withOps(env, async (ops) => {
    ops.schedules.definition(name);
    if (action === 'trigger') {
      const r = await ops.schedules.trigger(name, by, reason, (values as { again?: boolean }).again ?? false);
      if (r.alreadyDone) {
        const d = r.alreadyDone;
        if (values.json) out(JSON.stringify({ schedule: name, alreadyDone: d, job: r.job }));
        else
          out(
            `not enqueued: the work ${d.workKey} was done already by ${d.jobId ? `job ${d.jobId}` : 'a job'} (schedule ${d.schedule}, ${d.occurrence}${r.job ? `, ${r.job.state}` : ''}); --again runs it anyway; recorded as schedule-trigger by ${by}`,
          );
        return 1;
      }
      if (values.json) out(JSON.stringify({ schedule: name, key: r.key, duplicate: r.duplicate, job: r.job }));
      else
        out(
          `${r.duplicate ? 'already enqueued' : 'enqueued'} job ${r.job.id} (${r.job.type}, key ${r.key}) for schedule ${name}; recorded as schedule-trigger by ${by}`,
        );
      return 0;
    }
    const r = action === 'pause' ? await ops.schedules.pause(name, by, reason) : await ops.schedules.resume(name, by, reason);
    if (values.json) out(JSON.stringify({ changed: r.changed, schedule: r.schedule }));
    else if (r.changed)
      out(
        action === 'pause'
          ? `paused schedule ${name}: no occurrence is enqueued until it is resumed; recorded as schedule-pause by ${by}`
          : `resumed schedule ${name} from its next occurrence (${r.schedule.next[0]?.label ?? 'none'}); those that fell while it was paused are not enqueued (trigger one if needed); recorded as schedule-resume by ${by}`,
      );
    else
      out(
        action === 'pause'
          ? `schedule ${name} was already paused (by ${r.schedule.paused?.by}); nothing changed`
          : `schedule ${name} is not paused; nothing changed`,
      );
    return r.changed ? 0 : 1;
  });
}

function fmtOverdue(seconds: number): string {
  if (seconds < 120) return `${seconds} s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)} min`;
  return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
}
