// The rules of a key, an idempotency key or a concurrency key, for the TypeScript paths (the API,
// JobClient, a handler's children, schedules). jobs.enqueue applies the same in SQL (migration
// 0017), in the same words: a key made from a payload is the same text on both paths.

/** Longest key, in characters (the job table's CHECK says so too). */
export const MAX_KEY_LENGTH = 200;

/** C0 controls, DEL and C1 controls: a key is printed in logs, alarms and on-call terminals. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding them is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/**
 * Why `key` cannot be a key, or undefined: 1 to 200 characters, none of them a control character
 * (an escape sequence or a line break would be written as it is into logs and terminals).
 */
export function keyProblem(key: string): string | undefined {
  const n = characters(key);
  if (n < 1 || n > MAX_KEY_LENGTH) return `must be a string of 1 to ${MAX_KEY_LENGTH} characters`;
  return controlCharacterProblem(key);
}

/** Characters as PostgreSQL counts them (code points: an emoji is one, not JavaScript's two). */
export function characters(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/** The first control character in `text`, said as the rule it breaks (its position in code points); undefined if it has none. */
export function controlCharacterProblem(text: string): string | undefined {
  if (!CONTROL.test(text)) return undefined;
  let at = 0;
  for (const c of text) {
    at++;
    if (CONTROL.test(c))
      return `must not contain control characters (U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')} at character ${at})`;
  }
  return undefined;
}

/**
 * A payload field's value as the text of a key: a string as it is, a boolean as true/false, a
 * number in plain decimal (1e21 is 1000000000000000000000, 1e-7 is 0.0000001), as PostgreSQL's
 * numeric writes the same JSON number with trailing zeros trimmed: the same key whichever path
 * enqueued the job.
 */
export function keyText(value: string | number | boolean): string {
  if (typeof value !== 'number') return String(value);
  const s = String(value);
  const m = /^(-?)(\d+)(?:\.(\d+))?e([+-]\d+)$/.exec(s);
  if (!m) return s;
  const [, sign, int, frac = '', exp] = m;
  const digits = int! + frac;
  const point = int!.length + Number(exp);
  const whole = point <= 0 ? '0' : digits.slice(0, point).padEnd(point, '0');
  const fraction = (point < 0 ? '0'.repeat(-point) + digits : digits.slice(Math.max(point, 0))).replace(/0+$/, '');
  return `${sign}${whole.replace(/^0+(?=\d)/, '')}${fraction ? `.${fraction}` : ''}`;
}
