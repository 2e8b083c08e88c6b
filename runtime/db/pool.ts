// Connection pools. One place sets what every pool needs: a name PostgreSQL shows in
// pg_stat_activity, a bounded size, and an error listener so an idle client dropped by the
// server (failover, restart) is logged and replaced instead of crashing the process.
import pg from 'pg';

// Keep timestamps and bigints exact: int8 (20) as string is pg's default; numeric (1700) too.
export interface PoolOptions {
  url: string;
  max: number;
  applicationName: string;
  onError?: (err: Error) => void;
  statementTimeoutMs?: number;
}

export function createPool(opts: PoolOptions): pg.Pool {
  const pool = new pg.Pool({
    connectionString: opts.url,
    max: opts.max,
    application_name: opts.applicationName,
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
    ...(opts.statementTimeoutMs ? { statement_timeout: opts.statementTimeoutMs } : {}),
  });
  pool.on('error', (err) => opts.onError?.(err));
  return pool;
}
