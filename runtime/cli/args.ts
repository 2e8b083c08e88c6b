// How every `jobs` command reads its arguments: node:util parseArgs (an unknown option is refused,
// exit 2), and the positional arguments counted against what the command takes. An argument past
// those is refused, named, rather than dropped: `jobs enqueue T extra` or an unquoted
// `--key has space` (whose `space` would otherwise vanish) exits 2, and main.ts's cli() prints
// the command's usage after the message.

import { type ParseArgsConfig, parseArgs } from 'node:util';
import { UsageError } from './format.ts';

/** The positional arguments a command takes: how many at most, and what they are (for the message). */
export interface Positionals {
  /** At most this many (Infinity: any number, e.g. `jobs republish ID…`). */
  max: number;
  /** What they are, as the usage names them: "TYPE", "ID", "NAME". */
  what?: string;
}

const NONE: Positionals = { max: 0 };

/**
 * Parse `args` for `command` (as a person types it: "jobs enqueue", "jobs dead show"): its
 * options, and at most `takes.max` positionals; more are a UsageError naming each extra one.
 */
export function parseCommand<const O extends NonNullable<ParseArgsConfig['options']>>(
  command: string,
  args: string[],
  options: O,
  takes: Positionals = NONE,
) {
  const parsed = parseArgs({ args, options, allowPositionals: true, strict: true, tokens: true });
  if (parsed.positionals.length > takes.max) throw new UsageError(extraMessage(command, parsed.tokens, takes));
  return { values: parsed.values, positionals: parsed.positionals };
}

type Token =
  | { kind: 'option'; index: number; rawName: string; value: string | undefined; inlineValue: boolean | undefined }
  | { kind: 'positional'; index: number; value: string }
  | { kind: 'option-terminator'; index: number };

function extraMessage(command: string, tokens: Token[], takes: Positionals): string {
  const extra = tokens.filter((t) => t.kind === 'positional').slice(takes.max);
  const list = extra.map((t) => JSON.stringify(t.value)).join(', ');
  const allowed =
    takes.max === 0
      ? `${command} takes no arguments besides its options`
      : `${command} takes ${takes.max === 1 ? 'one' : `at most ${takes.max}`}${takes.what ? ` ${takes.what}` : ''}`;
  // An unquoted value with a space splits in two: `--key has space` leaves "space" behind.
  const first = extra[0]!;
  const before = tokens[tokens.indexOf(first) - 1];
  const hint =
    before?.kind === 'option' && before.value !== undefined
      ? `; if it belongs to ${before.rawName}'s value, quote the value: ${before.rawName}${before.inlineValue ? '=' : ' '}'${before.value} ${first.value}'`
      : '';
  return `${command}: unexpected argument${extra.length === 1 ? '' : 's'} ${list} (${allowed}${hint})`;
}
