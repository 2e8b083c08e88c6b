// Connection pools. One place sets what every pool needs: a name PostgreSQL shows in
// pg_stat_activity, a bounded size, and error listeners so a client dropped by the server
// (failover, restart, a reset socket), idle or checked out, is logged and replaced instead of
// crashing the process.
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
  // A checked-out client (a handler's transaction, the relay's, a migration's) has no listener
  // of the pool's: a socket reset during a failover would emit 'error' on it with nobody
  // listening, and Node ends the process. Every client gets one for its whole life; the holder
  // still sees the failure as its query's rejection, and pg-pool discards a client that is no
  // longer queryable when it is released.
  pool.on('connect', (client) => {
    client.on('error', (err) => opts.onError?.(err));
  });
  return pool;
}
