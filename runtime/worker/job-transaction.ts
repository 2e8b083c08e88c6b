// The handler's fenced transaction (JobContext.db). It opens at the first query, so a handler
// that computes for minutes before writing holds no connection and no snapshot meanwhile, and
// it commits only together with the job's fenced completion (commitWith).
//
// A handler cannot leave the fence (DESIGN 13), in three layers:
//  1. query() refuses transaction control before sending it (sql-statements.ts reads every
//     statement of the text): TransactionControlRefusedError, non-retryable.
//  2. After each query, the protocol's transaction status (in every ReadyForQuery, free) must
//     still say "in a transaction": a text that ended it some way the lexer cannot see stops the
//     handler at once, before autocommitted statements pile up.
//  3. The transaction's identity is taken at BEGIN — its start time, now(), which PostgreSQL
//     fixes per transaction from the arrival of the message that started it, so a transaction
//     begun by any later message differs — and the COMMIT is sent only behind a check that it is
//     still the same. Both ride on messages we send anyway: `BEGIN; SELECT …` and `SELECT check;
//     COMMIT` are one round trip each (an error in a multi-statement simple query skips the rest
//     of it, so a failed check never reaches the COMMIT). The happy path costs no extra round
//     trip, and a job that never touches ctx.db none at all.
// Layers 2 and 3 fail the attempt with JobTransactionEndedError (non-retryable: the effects may
// have landed, and a retry would apply them again).
//
// Chunked work (issue 18): a checkpoint saved while the transaction is open commits the writes
// since the last checkpoint together with it, fenced the same way (commitChunk), and the next
// query opens a fresh transaction. A checkpoint and the rows it stands for therefore land
// together or not at all: an attempt that resumes from a checkpoint finds exactly the rows of
// the chunks before it, and a zombie's chunk is refused with its rows. A handler that never
// checkpoints keeps one transaction, committed with its completion.

import type pg from 'pg';
import { inheritQueryTimeout, releaseClient, timed } from '../db/pool.ts';
import { JobTransactionEndedError, type NonRetryableError, TransactionControlRefusedError } from '../domain/errors.ts';
import { isDatabaseUnavailable } from '../db/unavailable.ts';
import type { JobDb } from '../handlers/types.ts';
import { findTransactionControl } from './sql-statements.ts';

/** In the error PostgreSQL raises when the identity check fails (see commitWith). */
const CHANGED_MARK = 'job transaction changed since BEGIN';

export class JobTransaction implements JobDb {
  private client: pg.PoolClient | null = null;
  private opening: Promise<pg.PoolClient> | null = null;
  private closed = false;
  /** extract(epoch FROM now()) of the transaction opened at BEGIN, as PostgreSQL printed it. */
  private startedAt: string | null = null;
  private leftFence: NonRetryableError | null = null;
  private lostTo: unknown = null;
  private readonly pendingAfterCommit: (() => void)[] = [];

  constructor(private readonly pool: pg.Pool) {
    // `const { query } = ctx.db` works too.
    this.query = this.query.bind(this);
  }

  /** The job must complete through commitWith (a refused statement counts: the attempt then ends dead). */
  get opened(): boolean {
    return this.opening !== null || this.leftFence !== null;
  }

  /** Why this attempt cannot complete, once the handler tried to leave the fence (it may have caught the error). */
  get violation(): NonRetryableError | null {
    return this.leftFence;
  }

  /**
   * The error with which this transaction's own connection failed (a failover, a reset, a server
   * that cannot serve it: db/unavailable.ts), even if the handler caught it; null if none did.
   * Errors of other connections a handler opens itself are not its.
   */
  get connectionLost(): unknown {
    return this.lostTo;
  }

  /**
   * A statement of the attempt's own failed with `err`: the transaction's connection, or the
   * platform's for its checkpoint. Not the pool's own wait for a connection (the worker's pool
   * full: no connection was lost). A ROLLBACK that then succeeds on the same connection clears it:
   * the connection was alive, the error was the statement's (a class 08 error from dblink, a disk
   * full), and the attempt counts as any failure.
   */
  noteConnectionError(err: unknown): void {
    if (this.lostTo !== null || !isDatabaseUnavailable(err)) return;
    if (/timeout exceeded when trying to connect/i.test(String((err as Error)?.message ?? ''))) return;
    this.lostTo = err;
  }

  async query<R extends Record<string, unknown> = Record<string, unknown>>(text: string, values?: unknown[]) {
    if (this.leftFence) throw this.leftFence;
    if (this.closed) throw new Error('the job transaction has ended: the job completed, failed or lost its lease');
    if (typeof text !== 'string') throw new TypeError('ctx.db.query takes the SQL text and its values: query(text, values)');
    const statement = findTransactionControl(text);
    if (statement) throw (this.leftFence = new TransactionControlRefusedError(statement));
    const c = await this.open();
    let r: pg.QueryResult;
    try {
      r = await c.query(text, values);
    } catch (err) {
      this.noteConnectionError(err);
      this.checkStillOpen(c, text);
      throw err;
    }
    this.checkStillOpen(c, text);
    return { rows: r.rows as R[], rowCount: r.rowCount };
  }

  /**
   * Run the fenced completion as the transaction's last statement and COMMIT if it matched;
   * ROLLBACK (and return false) if it did not. Opens the transaction if the handler never did.
   * Throws JobTransactionEndedError, and commits nothing, if the handler ended the transaction.
   * Afterwards the transaction is over: ctx.db refuses further queries.
   */
  commitWith(complete: (client: pg.PoolClient) => Promise<boolean>): Promise<boolean> {
    return this.commitFenced(complete, false);
  }

  /**
   * A checkpoint in the middle of the work: like commitWith (the fenced checkpoint is the
   * statement before COMMIT; false and everything rolled back when the lease is lost), but the
   * handler goes on: its next query opens a new transaction, on a connection taken from the pool
   * then (the one used so far goes back to it, so work between chunks holds none).
   */
  commitChunk(checkpoint: (client: pg.PoolClient) => Promise<boolean>): Promise<boolean> {
    return this.commitFenced(checkpoint, true);
  }

  private async commitFenced(complete: (client: pg.PoolClient) => Promise<boolean>, goOn: boolean): Promise<boolean> {
    if (this.leftFence) {
      await this.rollback();
      throw this.leftFence;
    }
    const c = await this.open();
    try {
      // Idle: the completion would run, and commit, on its own.
      this.checkStillOpen(c, null);
      if (!(await complete(c))) {
        await this.rollback();
        return false;
      }
      try {
        await c.query(
          timed(c, {
            text: `SELECT CASE WHEN extract(epoch FROM now()) = ${this.startedAt} THEN 1 ELSE ('${CHANGED_MARK}: now() is ' || now())::int END; COMMIT`,
          }),
        );
      } catch (err) {
        if (err instanceof Error && err.message.includes(CHANGED_MARK)) {
          throw (this.leftFence = new JobTransactionEndedError(
            `the transaction at completion began at ${String(err.message.split('now() is ')[1] ?? '?').replace(/"$/, '')}, not the one opened at BEGIN: it was committed or rolled back and a new one begun`,
          ));
        }
        throw err;
      }
      if (goOn) this.nextChunk();
      else this.finish();
      this.runAfterCommit();
      return true;
    } catch (err) {
      this.noteConnectionError(err);
      await this.rollback();
      throw err;
    }
  }

  /**
   * The platform's own statements in the job's transaction (ctx.enqueue's insert): the open
   * transaction's connection, opened if need be. Not for handlers: it skips the fence's checks,
   * which only a handler's SQL needs.
   */
  async platformClient(): Promise<pg.PoolClient> {
    if (this.leftFence) throw this.leftFence;
    if (this.closed) throw new Error('the job transaction has ended: the job completed, failed or lost its lease');
    return this.open();
  }

  /**
   * Run `fn` once the writes made so far have committed (with a checkpoint's chunk or the
   * completion); dropped if they roll back. ctx.enqueue publishes its children this way.
   */
  afterCommit(fn: () => void): void {
    this.pendingAfterCommit.push(fn);
  }

  private runAfterCommit(): void {
    for (const fn of this.pendingAfterCommit.splice(0)) fn();
  }

  /**
   * The attempt was given up (its lease lost, the job cancelled or released): its connection is
   * closed at once, so a statement of the handler's still waiting (on a server gone silent, or on
   * a lock) fails now instead of holding the handler, and the worker's stop, until TCP gives up.
   * Nothing of the transaction commits: the server rolls it back with the connection.
   */
  abandon(): void {
    if (this.closed) return;
    this.closed = true;
    this.pendingAfterCommit.length = 0;
    const c = this.client;
    this.client = null;
    if (!c) return;
    (c as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
    releaseClient(c, new Error('job transaction abandoned: the attempt was given up'));
  }

  async rollback(): Promise<void> {
    this.pendingAfterCommit.length = 0;
    if (this.closed) return;
    const c = this.client ?? (this.opening ? await this.opening.catch(() => null) : null);
    if (!c) {
      this.closed = true;
      return;
    }
    try {
      // With the pool's read timeout: on a server gone silent a ROLLBACK would wait for TCP to give
      // up, and the worker's stop with it; timed out, the connection is dropped (below).
      await c.query(timed(c, { text: 'ROLLBACK' }));
      // The connection answered: not lost (noteConnectionError), unless the error was the server's
      // own outage (a read-only standby after a failover, a shutdown under way).
      if (!/^(25006|57P0[123])$/.test(String((this.lostTo as { code?: unknown } | null)?.code ?? ''))) this.lostTo = null;
      // A handler that ended the transaction may have committed session state (SET SESSION …)
      // with it: the connection does not go back to the pool.
      this.finish(this.leftFence instanceof JobTransactionEndedError ? this.leftFence : undefined);
    } catch (err) {
      // A connection that cannot roll back is not returned to the pool.
      this.finish(err as Error);
    }
  }

  /** Layer 2: the connection must still be in a transaction ('T', or 'E' after an error in it). */
  private checkStillOpen(c: pg.PoolClient, text: string | null): void {
    if (this.leftFence || c.getTransactionStatus() !== 'I') return;
    this.leftFence = new JobTransactionEndedError(
      text === null
        ? 'no transaction was open at completion'
        : `no transaction was open after the statement ${JSON.stringify(text.length > 200 ? `${text.slice(0, 200)}…` : text)}`,
    );
    throw this.leftFence;
  }

  private open(): Promise<pg.PoolClient> {
    this.opening ??= (async () => {
      const c = await this.pool.connect().catch((err: unknown) => {
        this.noteConnectionError(err);
        throw err;
      });
      // The platform's statements in it (BEGIN, the fenced completion, COMMIT, ROLLBACK) get the
      // pool's read timeout; the handler's own (ctx.db) do not: they may run long by design.
      inheritQueryTimeout(this.pool, c);
      try {
        const results = (await c.query(
          timed(c, { text: 'BEGIN; SELECT extract(epoch FROM now())::text AS started' }),
        )) as unknown as pg.QueryResult<{
          started: string;
        }>[];
        const started = results[1]?.rows[0]?.started;
        // Interpolated into the check at COMMIT (a parameter would need the extended protocol,
        // which allows no second statement): only a number goes in.
        if (!started || !/^\d+(\.\d+)?(e[+-]?\d+)?$/i.test(started))
          throw new Error(`unexpected transaction start time from PostgreSQL: ${JSON.stringify(started)}`);
        this.startedAt = started;
      } catch (err) {
        this.noteConnectionError(err);
        releaseClient(c, err as Error);
        throw err;
      }
      if (this.closed) {
        // Abandoned while it opened: nothing may run in it.
        releaseClient(c, new Error('job transaction abandoned while it opened'));
        throw new Error('the job transaction has ended: the job completed, failed or lost its lease');
      }
      this.client = c;
      return c;
    })();
    return this.opening;
  }

  /** After a chunk committed: the connection goes back to the pool, the next query begins anew. */
  private nextChunk(): void {
    if (this.client) releaseClient(this.client);
    this.client = null;
    this.opening = null;
    this.startedAt = null;
  }

  private finish(err?: Error): void {
    this.closed = true;
    if (this.client) releaseClient(this.client, err);
    this.client = null;
  }
}
