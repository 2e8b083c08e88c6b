// The lexer behind ctx.db's refusal of transaction control (DESIGN 13): statements hidden in a
// multi-statement text, behind comments, in any case and spacing are found; the same words in
// quoted text (literals, identifiers, dollar-quoted bodies) are not. Pure, no database.
import { describe, expect, it } from 'vitest';
import { findTransactionControl, statementHeads } from '../../runtime/worker/sql-statements.ts';

describe('findTransactionControl: refused', () => {
  const refused: [string, string][] = [
    ['COMMIT', 'COMMIT'],
    ['commit work', 'COMMIT'],
    ['COMMIT AND CHAIN', 'COMMIT'],
    ['END', 'END'],
    ['end transaction', 'END'],
    ['BEGIN', 'BEGIN'],
    ['begin isolation level serializable', 'BEGIN'],
    ['START TRANSACTION READ ONLY', 'START TRANSACTION'],
    ['ROLLBACK', 'ROLLBACK'],
    ['ABORT', 'ABORT'],
    ['SAVEPOINT s1', 'SAVEPOINT'],
    ['RELEASE s1', 'RELEASE SAVEPOINT'],
    ['RELEASE SAVEPOINT s1', 'RELEASE SAVEPOINT'],
    ['ROLLBACK TO s1', 'ROLLBACK TO SAVEPOINT'],
    ['rollback transaction to savepoint s1', 'ROLLBACK TO SAVEPOINT'],
    ['SET TRANSACTION ISOLATION LEVEL SERIALIZABLE', 'SET TRANSACTION'],
    ['SET LOCAL TRANSACTION READ ONLY', 'SET TRANSACTION'],
    ['SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY', 'SET SESSION CHARACTERISTICS'],
    ['SET transaction_read_only = on', 'SET transaction_read_only'],
    ['set session default_transaction_isolation to serializable', 'SET default_transaction_isolation'],
    ["PREPARE TRANSACTION 'gid-1'", 'PREPARE TRANSACTION'],
    ["COMMIT PREPARED 'gid-1'", 'COMMIT PREPARED'],
    ["ROLLBACK PREPARED 'gid-1'", 'ROLLBACK PREPARED'],
    // Hidden in a multi-statement text (simple query protocol).
    ['INSERT INTO t VALUES (1); COMMIT; INSERT INTO t VALUES (2)', 'COMMIT'],
    ['SELECT 1;COMMIT', 'COMMIT'],
    ["UPDATE t SET a = 'x;y'; ROLLBACK", 'ROLLBACK'],
    // Comments, case, whitespace.
    ['/* x */ COMMIT', 'COMMIT'],
    ['-- x\nCOMMIT', 'COMMIT'],
    ['-- x\r\ncommit', 'COMMIT'],
    ['/* outer /* nested; COMMIT */ still comment */ CoMmIt', 'COMMIT'],
    ['\n\t  cOmMiT  \n', 'COMMIT'],
    ['SELECT 1 /* ; */; /**/BEGIN', 'BEGIN'],
    ['SELECT $1; END', 'END'],
    ["SELECT E'it\\'s'; COMMIT", 'COMMIT'],
    ["SELECT 'it''s'; COMMIT", 'COMMIT'],
    ['SELECT "a""b"; COMMIT', 'COMMIT'],
    ['SELECT $$body$$; COMMIT', 'COMMIT'],
    ['SELECT $fn$ $$ ; COMMIT $$ $fn$; SAVEPOINT a', 'SAVEPOINT'],
    ["SELECT U&'\\0041'; COMMIT", 'COMMIT'],
  ];
  for (const [text, name] of refused) {
    it(`${JSON.stringify(text)} → ${name}`, () => {
      expect(findTransactionControl(text)).toBe(name);
    });
  }
});

describe('findTransactionControl: allowed (look-alikes in quoted text, other statements)', () => {
  const allowed = [
    "SELECT 'COMMIT'",
    "INSERT INTO t (note) VALUES ('done; COMMIT; BEGIN')",
    "SELECT 'a'';COMMIT;'''",
    "SELECT E'\\';COMMIT;'",
    'SELECT 1 AS "commit"',
    'SELECT "x;COMMIT"',
    'SELECT 1 -- ; COMMIT',
    'SELECT 1 /* ; COMMIT */',
    'SELECT $$; COMMIT; $$',
    'SELECT $tag$ $$; COMMIT; $$ $tag$',
    'DO $$ BEGIN INSERT INTO t VALUES (1); COMMIT; END $$',
    'CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $body$ BEGIN COMMIT; END $body$',
    'CREATE OR REPLACE PROCEDURE p() LANGUAGE sql BEGIN ATOMIC INSERT INTO t VALUES (1); INSERT INTO t VALUES (2); END',
    'CREATE FUNCTION g(x int) RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN x > 0 THEN 1 ELSE 0 END; END; SELECT 1',
    'SELECT commit_id FROM t; SELECT begin_at FROM t',
    'SELECT foo$bar$ FROM t; SELECT 1',
    'CALL post_batch(1)',
    'PREPARE q AS SELECT 1; EXECUTE q',
    'SET search_path = app',
    'SET SESSION AUTHORIZATION DEFAULT',
    'SELECT CASE WHEN true THEN 1 END',
    'INSERT INTO t SELECT g FROM generate_series(1, $1::int) AS g',
    '',
    ';;',
  ];
  for (const text of allowed) {
    it(JSON.stringify(text), () => {
      expect(findTransactionControl(text)).toBeNull();
    });
  }

  it('an unterminated quote hides nothing PostgreSQL would run (it refuses the whole text)', () => {
    expect(findTransactionControl("SELECT 'x; COMMIT")).toBeNull();
    expect(findTransactionControl('SELECT /* x; COMMIT')).toBeNull();
  });
});

describe('statementHeads', () => {
  it('splits at top-level semicolons and keeps each statement’s leading words, lower-cased', () => {
    expect(statementHeads("INSERT INTO t VALUES ('a;b'); /* c; */ Commit Work; select 1")).toEqual([
      ['insert', 'into', 't', 'values'],
      ['commit', 'work'],
      ['select'],
    ]);
  });
  it('a quoted token ends the head', () => {
    // "commit" is an identifier (no statement begins with one); after "a", no keyword counts.
    expect(statementHeads('"commit" x; SELECT "a" commit')).toEqual([['select']]);
  });
});
