// The handler's fenced transaction (JobContext.db). It opens at the first query, so a handler
// that computes for minutes before writing holds no connection and no snapshot meanwhile, and
// it commits only together with the job's fenced completion (commitWith).

import type pg from 'pg';
import type { JobDb } from '../handlers/types.ts';

export class JobTransaction implements JobDb {
  private client: pg.PoolClient | null = null;
  private opening: Promise<pg.PoolClient> | null = null;
  private closed = false;

  constructor(private readonly pool: pg.Pool) {}

  get opened(): boolean {
    return this.opening !== null;
  }

  async query<R extends Record<string, unknown> = Record<string, unknown>>(text: string, values?: unknown[]) {
    if (this.closed) throw new Error('the job transaction has ended: the job completed, failed or lost its lease');
    const c = await this.open();
    const r = await c.query(text, values);
    return { rows: r.rows as R[], rowCount: r.rowCount };
  }

  /**
   * Run the fenced completion as the transaction's last statement and COMMIT if it matched;
   * ROLLBACK (and return false) if it did not. Opens the transaction if the handler never did.
   */
  async commitWith(complete: (client: pg.PoolClient) => Promise<boolean>): Promise<boolean> {
    const c = await this.open();
    try {
      if (!(await complete(c))) {
        await this.rollback();
        return false;
      }
      await c.query('COMMIT');
      this.finish();
      return true;
    } catch (err) {
      await this.rollback();
      throw err;
    }
  }

  async rollback(): Promise<void> {
    if (this.closed) return;
    const c = this.client ?? (this.opening ? await this.opening.catch(() => null) : null);
    if (!c) {
      this.closed = true;
      return;
    }
    try {
      await c.query('ROLLBACK');
      this.finish();
    } catch (err) {
      // A connection that cannot roll back is not returned to the pool.
      this.finish(err as Error);
    }
  }

  private open(): Promise<pg.PoolClient> {
    this.opening ??= (async () => {
      const c = await this.pool.connect();
      try {
        await c.query('BEGIN');
      } catch (err) {
        c.release(err as Error);
        throw err;
      }
      this.client = c;
      return c;
    })();
    return this.opening;
  }

  private finish(err?: Error): void {
    this.closed = true;
    this.client?.release(err);
    this.client = null;
  }
}
