// What a phase of the benchmark costs PostgreSQL: commits (pg_stat_database.xact_commit of the
// benchmark database) and WAL bytes (pg_current_wal_lsn before and after), read from a
// connection to another database so the meter's own queries are not counted. PostgreSQL 15+
// publishes a session's counters when the session ends (or at most once a second), so a
// window opens and closes only when no session is connected to the benchmark database: each
// phase creates its pools inside the window and ends them before it closes.
import pg from 'pg';

export interface Cost {
  commits: number;
  rollbacks: number;
  walBytes: number;
  /** Per statement (pg_stat_statements), when the extension is loaded: where the WAL goes. */
  statements?: { query: string; calls: number; walBytes: number; walRecords: number; walFpi: number; totalMs: number }[];
}

export class CostMeter {
  private readonly admin: pg.Client;

  constructor(adminUrl: string, private readonly database: string) {
    this.admin = new pg.Client({ connectionString: adminUrl });
  }

  async connect(): Promise<void> {
    await this.admin.connect();
  }

  async close(): Promise<void> {
    await this.admin.end();
  }

  private async quiet(): Promise<void> {
    for (let i = 0; i < 200; i++) {
      const { rows } = await this.admin.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [this.database]);
      if (rows[0].n === 0) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`sessions still connected to ${this.database}; the cost window cannot close`);
  }

  private async read(): Promise<{ commits: number; rollbacks: number; lsn: string }> {
    await this.admin.query('SELECT pg_stat_clear_snapshot()');
    const { rows } = await this.admin.query(
      'SELECT xact_commit::bigint AS c, xact_rollback::bigint AS r, pg_current_wal_lsn()::text AS lsn FROM pg_stat_database WHERE datname = $1',
      [this.database],
    );
    return { commits: Number(rows[0].c), rollbacks: Number(rows[0].r), lsn: rows[0].lsn };
  }

  /** Run `phase` inside a measured window. */
  async measure<T>(phase: () => Promise<T>, opts: { statements?: boolean } = {}): Promise<{ result: T; cost: Cost }> {
    await this.quiet();
    if (opts.statements) await this.resetStatements();
    const before = await this.read();
    const result = await phase();
    await this.quiet();
    const after = await this.read();
    const wal = await this.admin.query('SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint AS b', [after.lsn, before.lsn]);
    const cost: Cost = { commits: after.commits - before.commits, rollbacks: after.rollbacks - before.rollbacks, walBytes: Number(wal.rows[0].b) };
    if (opts.statements) cost.statements = await this.statements();
    return { result, cost };
  }

  private async resetStatements(): Promise<void> {
    await this.admin.query('SELECT pg_stat_statements_reset()').catch(() => undefined);
  }

  private async statements(): Promise<Cost['statements']> {
    try {
      const { rows } = await this.admin.query(
        `SELECT left(regexp_replace(s.query, '\\s+', ' ', 'g'), 90) AS query, s.calls::bigint AS calls, s.wal_bytes::bigint AS wal_bytes,
                s.wal_records::bigint AS wal_records, s.wal_fpi::bigint AS wal_fpi, s.total_exec_time AS ms
           FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
          WHERE d.datname = $1 ORDER BY s.wal_bytes DESC LIMIT 12`,
        [this.database],
      );
      return rows.map((r) => ({ query: r.query, calls: Number(r.calls), walBytes: Number(r.wal_bytes), walRecords: Number(r.wal_records), walFpi: Number(r.wal_fpi), totalMs: Math.round(r.ms) }));
    } catch {
      return undefined;
    }
  }
}
