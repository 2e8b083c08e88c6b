// What a phase of the benchmark costs PostgreSQL: commits (pg_stat_database.xact_commit of the
// benchmark database) and WAL bytes (pg_current_wal_lsn before and after), read from a
// connection to another database so the meter's own queries are not counted. PostgreSQL 15+
// publishes a session's counters when the session ends (or at most once a second), so a
// window opens and closes only when no session is connected to the benchmark database: each
// phase creates its pools inside the window and ends them before it closes.
//
// When the server runs on this machine (the embedded one, the peer harness's), the meter also
// reads the CPU time PostgreSQL spent in the window from /proc: the postmaster's own and its
// exited children's (every session of the phase has ended when the window closes) plus its live
// children's (checkpointer, WAL writer, autovacuum). On a remote server it reports none.
import { readdirSync, readFileSync } from 'node:fs';
import pg from 'pg';

export interface Cost {
  commits: number;
  rollbacks: number;
  walBytes: number;
  /** CPU seconds PostgreSQL spent in the window, when the server is local (see above). */
  pgCpuSeconds?: number;
  /** Per statement (pg_stat_statements), when the extension is loaded: where the WAL goes. */
  statements?: { query: string; calls: number; rows: number; walBytes: number; walRecords: number; walFpi: number; totalMs: number }[];
}

export class CostMeter {
  private readonly admin: pg.Client;
  private postmasterPid: number | null = null;

  constructor(
    adminUrl: string,
    private readonly database: string,
  ) {
    this.admin = new pg.Client({ connectionString: adminUrl });
    // A server stopped under it (Ctrl-C stops the embedded one) must not crash the benchmark.
    this.admin.on('error', () => undefined);
  }

  async connect(): Promise<void> {
    await this.admin.connect();
    // The checkpointer's parent is the postmaster; it is ours to read only if it runs here.
    const { rows } = await this.admin.query("SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");
    const ppid = rows[0] ? Number(procStat(rows[0].pid)?.[1]) : NaN;
    if (Number.isInteger(ppid) && readComm(ppid) === 'postgres') this.postmasterPid = ppid;
  }

  /**
   * Clock ticks (1/100 s on Linux) the postmaster and all its children have used, or null.
   * Reading the postmaster and its children is not atomic: a backend reaped in between would be
   * counted twice or not at all. So read twice and accept only a reading during which no child
   * came or went (backends exit within milliseconds of their session's end).
   */
  private async pgTicks(): Promise<number | null> {
    for (let i = 0; i < 50; i++) {
      const a = this.readTicks();
      const b = this.readTicks();
      if (!a || !b) return null;
      if (a.children === b.children && a.reaped === b.reaped) return b.ticks;
      await new Promise((r) => setTimeout(r, 10));
    }
    return null;
  }

  private readTicks(): { ticks: number; children: string; reaped: number } | null {
    const pm = this.postmasterPid;
    if (pm === null) return null;
    const own = procStat(pm);
    if (!own) return null;
    // utime, stime, cutime, cstime are fields 14–17; after the "(comm)" split they start at index 11.
    const reaped = Number(own[13]) + Number(own[14]);
    let ticks = Number(own[11]) + Number(own[12]) + reaped;
    const children: string[] = [];
    for (const d of readdirSync('/proc')) {
      if (!/^\d+$/.test(d)) continue;
      const st = procStat(Number(d));
      if (st && Number(st[1]) === pm) {
        ticks += Number(st[11]) + Number(st[12]);
        children.push(d);
      }
    }
    return { ticks, children: children.join(','), reaped };
  }

  /** CPU seconds the server's processes have used so far (null when the server is not local): take two and subtract. */
  async pgCpuSeconds(): Promise<number | null> {
    const t = await this.pgTicks();
    return t === null ? null : t / 100;
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

  /** Run `phase` inside a measured window; `statements`: its top statements by WAL (true) or by execution time ('time'). */
  async measure<T>(phase: () => Promise<T>, opts: { statements?: boolean | 'time' } = {}): Promise<{ result: T; cost: Cost }> {
    await this.quiet();
    if (opts.statements) await this.resetStatements();
    const before = await this.read();
    const ticks0 = await this.pgTicks();
    const result = await phase();
    await this.quiet();
    const ticks1 = await this.pgTicks();
    const after = await this.read();
    const wal = await this.admin.query('SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint AS b', [after.lsn, before.lsn]);
    const cost: Cost = {
      commits: after.commits - before.commits,
      rollbacks: after.rollbacks - before.rollbacks,
      walBytes: Number(wal.rows[0].b),
    };
    if (ticks0 !== null && ticks1 !== null) cost.pgCpuSeconds = (ticks1 - ticks0) / 100;
    if (opts.statements) cost.statements = await this.statements(opts.statements === 'time' ? 'total_exec_time' : 'wal_bytes');
    return { result, cost };
  }

  private async resetStatements(): Promise<void> {
    await this.admin.query('SELECT pg_stat_statements_reset()').catch(() => undefined);
  }

  private async statements(order: 'wal_bytes' | 'total_exec_time'): Promise<Cost['statements']> {
    try {
      const { rows } = await this.admin.query(
        `SELECT left(regexp_replace(s.query, '\\s+', ' ', 'g'), 160) AS query, s.calls::bigint AS calls, s.rows::bigint AS rows, s.wal_bytes::bigint AS wal_bytes,
                s.wal_records::bigint AS wal_records, s.wal_fpi::bigint AS wal_fpi, s.total_exec_time AS ms
           FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
          WHERE d.datname = $1 ORDER BY s.${order} DESC LIMIT 12`,
        [this.database],
      );
      return rows.map((r) => ({
        query: r.query,
        calls: Number(r.calls),
        rows: Number(r.rows),
        walBytes: Number(r.wal_bytes),
        walRecords: Number(r.wal_records),
        walFpi: Number(r.wal_fpi),
        totalMs: Math.round(r.ms),
      }));
    } catch {
      return undefined;
    }
  }
}

/** /proc/<pid>/stat split after the command name: [state, ppid, …], or null if unreadable. */
export function procStat(pid: number): string[] | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return s.slice(s.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/** CPU seconds a local process has used (utime + stime, clock ticks of 1/100 s), or null if unreadable. */
export function processCpuSeconds(pid: number | undefined): number | null {
  const f = pid === undefined ? null : procStat(pid);
  return f ? (Number(f[11]) + Number(f[12])) / 100 : null;
}

function readComm(pid: number): string | null {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return null;
  }
}
