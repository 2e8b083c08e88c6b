// Finds transaction control in SQL text a handler sends through ctx.db (DESIGN 13). Pure: a
// small lexer that splits the text into its top-level statements the way PostgreSQL does — a
// `;` ends a statement only outside '…' (with '' escapes), E'…' (with backslash escapes too),
// "…" identifiers, $tag$…$tag$ bodies, -- line comments and nested /* */ comments — and reads
// the first words of each statement. So `INSERT …; COMMIT` is caught, and a 'COMMIT' literal,
// a "commit" identifier or a COMMIT inside a function body ($$…$$) is not.
//
// It reads text as PostgreSQL does with standard_conforming_strings on (the default since 9.1).
// A session that turns it off reads backslashes in '…' as escapes, and can hide a statement
// from this lexer; the fenced completion still detects a transaction that ended (job-transaction.ts).

/** The transaction-control statement a text contains (the first one), e.g. 'COMMIT', 'ROLLBACK TO SAVEPOINT'; null if none. */
export function findTransactionControl(text: string): string | null {
  for (const words of statementHeads(text)) {
    const kind = classify(words);
    if (kind) return kind;
  }
  return null;
}

/**
 * The leading words of each top-level statement: unquoted keywords and identifiers, lower-cased,
 * up to `max` of them. A quoted token (string, "identifier", $$body$$) ends the words of its
 * statement: no transaction-control keyword follows one.
 */
export function statementHeads(text: string, max = 4): string[][] {
  const out: string[][] = [];
  let words: string[] = [];
  let closed = false; // a non-word token was seen: this statement's head is complete
  // CREATE FUNCTION / PROCEDURE … BEGIN ATOMIC …; …; END: the `;` inside the body do not end
  // the statement (as psql counts them: BEGIN and CASE open, END closes).
  let firstWords: string[] = [];
  let atomicDepth = 0;
  const n = text.length;
  let i = 0;
  const push = (w: string) => {
    const lower = w.toLowerCase();
    if (!closed && words.length < max) words.push(lower);
    if (firstWords.length < 4) firstWords.push(lower);
    if (isRoutineDefinition(firstWords)) {
      if (lower === 'begin' || (lower === 'case' && atomicDepth > 0)) atomicDepth++;
      else if (lower === 'end' && atomicDepth > 0) atomicDepth--;
    }
  };
  const endStatement = () => {
    if (words.length > 0) out.push(words);
    words = [];
    firstWords = [];
    closed = false;
    atomicDepth = 0;
  };
  while (i < n) {
    const ch = text[i]!;
    const next = text[i + 1];
    if (ch === ';') {
      if (atomicDepth > 0) closed = true;
      else endStatement();
      i++;
    } else if (isSpace(ch)) {
      i++;
    } else if (ch === '-' && next === '-') {
      // Line comment: to the end of the line.
      while (i < n && text[i] !== '\n' && text[i] !== '\r') i++;
    } else if (ch === '/' && next === '*') {
      i = skipBlockComment(text, i);
    } else if (ch === "'") {
      i = skipQuoted(text, i + 1, "'", false);
      closed = true;
    } else if (ch === '"') {
      i = skipQuoted(text, i + 1, '"', false);
      closed = true;
    } else if (ch === '$' && next !== undefined && /\d/.test(next)) {
      // A parameter ($1).
      i += 2;
      while (i < n && /\d/.test(text[i]!)) i++;
      closed = true;
    } else if (ch === '$') {
      const tag = dollarTag(text, i);
      if (tag === null) {
        i++; // a stray $ (a syntax error for PostgreSQL)
      } else {
        const end = text.indexOf(tag, i + tag.length);
        i = end < 0 ? n : end + tag.length;
      }
      closed = true;
    } else if (isIdentStart(ch)) {
      // A word, or a prefixed string: E'…' (backslash escapes), U&'…', U&"…", B'…', X'…', N'…'.
      const lower = ch.toLowerCase();
      if (lower === 'e' && next === "'") {
        i = skipQuoted(text, i + 2, "'", true);
        closed = true;
      } else if (lower === 'u' && next === '&' && (text[i + 2] === "'" || text[i + 2] === '"')) {
        i = skipQuoted(text, i + 3, text[i + 2]!, false);
        closed = true;
      } else if ((lower === 'b' || lower === 'x' || lower === 'n') && next === "'") {
        i = skipQuoted(text, i + 2, "'", false);
        closed = true;
      } else {
        const start = i;
        i++;
        while (i < n && isIdentPart(text[i]!)) i++;
        push(text.slice(start, i));
      }
    } else {
      // Numbers, operators, punctuation.
      closed = true;
      i++;
    }
  }
  endStatement();
  return out;
}

/** Name of the transaction-control statement that `words` (a statement's head) begins, or null. */
export function classify(words: string[]): string | null {
  const [w0, w1, w2] = words;
  switch (w0) {
    case 'begin':
      return 'BEGIN';
    case 'start':
      return w1 === 'transaction' ? 'START TRANSACTION' : null;
    case 'commit':
      return w1 === 'prepared' ? 'COMMIT PREPARED' : 'COMMIT';
    case 'end':
      return 'END';
    case 'abort':
      return 'ABORT';
    case 'rollback':
      if (w1 === 'prepared') return 'ROLLBACK PREPARED';
      // ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name
      if (w1 === 'to' || ((w1 === 'work' || w1 === 'transaction') && w2 === 'to')) return 'ROLLBACK TO SAVEPOINT';
      return 'ROLLBACK';
    case 'savepoint':
      return 'SAVEPOINT';
    case 'release':
      return 'RELEASE SAVEPOINT';
    case 'prepare':
      return w1 === 'transaction' ? 'PREPARE TRANSACTION' : null;
    case 'set': {
      // SET [SESSION | LOCAL] TRANSACTION …, SET SESSION CHARACTERISTICS AS TRANSACTION …, and the
      // same through the settings: SET [SESSION | LOCAL] [default_]transaction_isolation / _read_only / _deferrable.
      if (w1 === 'session' && w2 === 'characteristics') return 'SET SESSION CHARACTERISTICS';
      const name = w1 === 'session' || w1 === 'local' ? w2 : w1;
      if (name === 'transaction') return 'SET TRANSACTION';
      if (name && /^(default_)?transaction_(isolation|read_only|deferrable)$/.test(name)) return `SET ${name}`;
      return null;
    }
    default:
      return null;
  }
}

function isRoutineDefinition(w: string[]): boolean {
  if (w[0] !== 'create') return false;
  const kind = w[1] === 'or' && w[2] === 'replace' ? w[3] : w[1];
  return kind === 'function' || kind === 'procedure';
}

function isSpace(ch: string): boolean {
  return ch === ' ' || ch === '\n' || ch === '\t' || ch === '\r' || ch === '\f' || ch === '\v';
}

// Character classes by code (no regular expression per character: texts can be megabytes).
function isIdentStart(ch: string): boolean {
  const c = ch.charCodeAt(0);
  return (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95 || c >= 0x80;
}

function isIdentPart(ch: string): boolean {
  const c = ch.charCodeAt(0);
  return isIdentStart(ch) || (c >= 48 && c <= 57) || c === 36;
}

/** Index just past the quote that closes a quoted token opened before `i` (doubled quotes escape; with `backslash`, \x does too). */
function skipQuoted(text: string, i: number, quote: string, backslash: boolean): number {
  const n = text.length;
  if (!backslash) {
    for (;;) {
      const end = text.indexOf(quote, i);
      if (end < 0) return n;
      if (text[end + 1] !== quote) return end + 1;
      i = end + 2;
    }
  }
  while (i < n) {
    const ch = text[i]!;
    if (ch === '\\') {
      i += 2;
    } else if (ch === quote) {
      if (text[i + 1] === quote) i += 2;
      else return i + 1;
    } else {
      i++;
    }
  }
  return n;
}

/** Index just past a /* comment *\/ starting at `i`; these nest in PostgreSQL. */
function skipBlockComment(text: string, i: number): number {
  const n = text.length;
  let depth = 0;
  while (i < n) {
    if (text[i] === '/' && text[i + 1] === '*') {
      depth++;
      i += 2;
    } else if (text[i] === '*' && text[i + 1] === '/') {
      depth--;
      i += 2;
      if (depth === 0) return i;
    } else {
      i++;
    }
  }
  return n;
}

/** The `$tag$` opening a dollar-quoted string at `i`, or null if `$` does not start one. */
function dollarTag(text: string, i: number): string | null {
  let j = i + 1;
  if (text[j] === '$') return '$$';
  if (j >= text.length || !isIdentStart(text[j]!)) return null;
  while (j < text.length && text[j] !== '$') {
    // Tags are identifier characters without `$`.
    if (!/[A-Za-z0-9_]/.test(text[j]!) && text.charCodeAt(j) < 0x80) return null;
    j++;
  }
  return j < text.length ? text.slice(i, j + 1) : null;
}
