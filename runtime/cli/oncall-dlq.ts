// `jobs dlq`: list, redrive (receive-and-resend, or SQS's move with --move), discard, and the
// move tasks' status and cancel, over runtime/oncall/dlq.ts, on every priority lane's DLQ
// (oncall/dlq-lanes.ts; `--lane urgent|bulk` for one). Every dead letter is printed with its lane,
// verdict and why. Exit 1 when a move was refused, a message not found or a cancel refused.

import { ENV } from '../config/env.ts';
import { ConfigError } from '../config/rules.ts';
import { MoveCancelError, type DlqPassReport, type ReconciledLetter } from '../oncall/dlq.ts';
import type { OpsServices } from '../oncall/services.ts';
import { parseCommand } from './args.ts';
import { UsageError } from './format.ts';
import { type Env, intFlag, laneFlag, type Out, whoAsked, withOps } from './oncall-common.ts';

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

/**
 * Who sent the letter: for a copy the worker made (it carries SourceMessageId) that is the worker's
 * role, not the system that sent the original (on-call drill: read as the culprit); the original's
 * attributes are in `jobs poison list`. A message SQS redrove keeps its original sender.
 */
function senderLine(l: ReconciledLetter): string {
  if (!l.senderId) return '';
  return l.attributes.SourceMessageId
    ? `\n    copied to the DLQ by: ${l.senderId} (the worker; the original message ${l.attributes.SourceMessageId} and its attributes: jobs poison list)`
    : `\n    sender: ${l.senderId}`;
}

function letterLine(l: ReconciledLetter): string {
  const job = l.jobId ? `job ${l.jobId}${l.jobType ? ` (${l.jobType})` : ''} ${l.jobState ?? 'missing'}` : 'no job';
  const sent = l.sentAt ? l.sentAt.toISOString() : '?';
  const done = l.done ? `${l.done}: ` : `${l.verdict}: `;
  return `${l.messageId}  ${l.lane.padEnd(6)}  ${sent}  ${l.reason.padEnd(27)}  ${job}\n    ${done}${l.why}${l.detail ? `\n    detail: ${l.detail.slice(0, 200)}` : ''}${l.kind === 'poison' ? `\n    body (${l.body.length} bytes): ${JSON.stringify(l.body.slice(0, 300))}${senderLine(l)}` : ''}`;
}

function passSummary(r: DlqPassReport): string {
  const seen = `${r.letters.length} dead letter(s)${r.complete ? '' : ' (stopped at the limit; more remain)'}`;
  const done = r.letters.filter((l) => l.done);
  if (done.length === 0) return `${seen}: ${r.counts.resend} to resend, ${r.counts.drop} obsolete, ${r.counts.keep} to keep`;
  // A redrive that ran: what it did to each, not what it planned.
  const n = (d: NonNullable<ReconciledLetter['done']>) => done.filter((l) => l.done === d).length;
  const moved = n('moved') > 0 ? `, ${n('moved')} moved` : '';
  return `${seen}: ${n('resent')} resent, ${n('dropped')} deleted as obsolete, ${n('kept')} kept${moved}`;
}

export async function dlqCommand(argv: string[], env: Env, out: Out): Promise<number> {
  const [sub, ...rest] = argv;
  switch (sub) {
    case 'list': {
      const { values } = parseCommand('jobs dlq list', rest, {
        limit: { type: 'string', default: '1000' },
        poison: { type: 'boolean' },
        lane: { type: 'string' },
        json: { type: 'boolean' },
      });
      const limit = intFlag('--limit', values.limit, 1, 100_000)!;
      const lane = laneFlag(values.lane, "every lane's DLQ");
      const r = await withOps(env, (ops) => needDlq(ops).look(limit, lane));
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
      const { values } = parseCommand('jobs dlq redrive', rest, {
        'dry-run': { type: 'boolean' },
        move: { type: 'boolean' },
        rate: { type: 'string' },
        limit: { type: 'string', default: '1000' },
        by: { type: 'string' },
        lane: { type: 'string' },
        json: { type: 'boolean' },
      });
      const limit = intFlag('--limit', values.limit, 1, 100_000)!;
      const rate = intFlag('--rate', values.rate, 1, 500);
      const by = whoAsked(values.by);
      const lane = laneFlag(values.lane, "every lane's DLQ");
      const r = await withOps(env, (ops) =>
        needDlq(ops).redrive({
          ...(lane ? { lane } : {}),
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
      for (const t of r.moveTasks ?? []) out(`move task ${t.taskHandle} (${t.lane}): ${t.dlqArn} → ${t.queueArn}`);
      if (r.refused) {
        process.stderr.write(`refused: ${r.refused}\n`);
        return 1;
      }
      return 0;
    }

    case 'discard': {
      const { values, positionals } = parseCommand(
        'jobs dlq discard',
        rest,
        { reason: { type: 'string' }, by: { type: 'string' }, lane: { type: 'string' }, json: { type: 'boolean' } },
        { max: Number.POSITIVE_INFINITY, what: 'MESSAGE_ID…' },
      );
      if (positionals.length === 0) throw new UsageError('jobs dlq discard MESSAGE_ID…: name the message ids (see jobs dlq list)');
      if (!values.reason?.trim()) throw new UsageError('jobs dlq discard: --reason is required (why are these dead letters thrown away?)');
      const by = whoAsked(values.by);
      const lane = laneFlag(values.lane, "every lane's DLQ");
      const r = await withOps(env, (ops) =>
        needDlq(ops).discard({ messageIds: positionals, by, reason: values.reason!, ...(lane ? { lane } : {}) }),
      );
      if (values.json) {
        out(JSON.stringify(r));
        return r.notFound.length > 0 || r.letters.some((l) => l.done === 'kept') ? 1 : 0;
      }
      const kept = r.letters.filter((l) => l.done === 'kept');
      out(
        `discarded by ${by}: ${r.letters.length - kept.length} dead letter(s) (${values.reason!.trim()})${kept.length > 0 ? `; ${kept.length} kept, their jobs need them` : ''}`,
      );
      for (const l of r.letters) out(letterLine(l));
      for (const id of r.notFound)
        out(`  not found in the DLQ: ${id} (a DLQ message id from jobs dlq list, or the source id jobs poison list shows)`);
      return r.notFound.length > 0 || kept.length > 0 ? 1 : 0;
    }

    case 'move-status': {
      const { values } = parseCommand('jobs dlq move-status', rest, { json: { type: 'boolean' } });
      const { tasks, local } = await withOps(env, async (ops) => ({ tasks: await needDlq(ops).moveTasks(), local: needDlq(ops).local }));
      if (values.json) {
        out(JSON.stringify(tasks));
        return 0;
      }
      if (local) out('the local SQS endpoint has no message move tasks: `jobs dlq redrive` moves by receive and resend');
      for (const t of tasks) {
        out(
          `${t.taskHandle ?? '?'}  ${t.lane}  ${t.status}  ${t.moved}${t.toMove !== null ? ` of ${t.toMove}` : ''} moved  started ${t.startedAt?.toISOString() ?? '?'}${t.failureReason ? `  failed: ${t.failureReason}` : ''}`,
        );
      }
      if (!local && tasks.length === 0) out('(no move tasks)');
      return 0;
    }

    case 'move-cancel': {
      const { values, positionals } = parseCommand(
        'jobs dlq move-cancel',
        rest,
        { by: { type: 'string' }, json: { type: 'boolean' } },
        { max: 1, what: 'TASK_HANDLE' },
      );
      if (positionals.length !== 1 || !positionals[0]!.trim()) {
        throw new UsageError('jobs dlq move-cancel TASK_HANDLE: name one move task handle (see jobs dlq move-status)');
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
