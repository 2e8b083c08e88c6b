// Connection pools. One place sets what every pool needs: a name PostgreSQL shows in
// pg_stat_activity, a bounded size, and error listeners so a client dropped by the server
// (failover, restart, a reset socket), idle or checked out, is logged and replaced instead of
// crashing the process.
import pg from 'pg';
import type { DatabaseCredentialSource, DatabaseCredentials } from './credentials.ts';
import { isAuthenticationFailure } from './unavailable.ts';

// Keep timestamps and bigints exact: int8 (20) as string is pg's default; numeric (1700) too.
export interface PoolOptions {
  url: string;
  max: number;
  applicationName: string;
  onError?: (err: Error) => void;
  statementTimeoutMs?: number;
  /**
   * How long an idle connection stays open (default 30 s). The services keep theirs for 10
   * minutes (SERVICE_IDLE_TIMEOUT_MS): a connection costs a TCP and TLS handshake and a SCRAM
   * exchange (tens of milliseconds of CPU on both ends), which the first jobs after every quiet
   * half minute would otherwise pay. The connection budget (lib/config.ts) counts every
   * connection a pool may hold, so holding them costs no budget.
   */
  idleTimeoutMs?: number;
  /**
   * Where each new connection takes its user and password (the ones in `url` are not used): the
   * secret as last read (credentials.ts). A login PostgreSQL refuses makes the source read it again.
   */
  credentials?: DatabaseCredentialSource;
  /**
   * How long the platform's own statements on this pool (store/job-store.ts `run`, a transaction
   * of withTransaction, the worker's database probe) wait for an answer before failing as
   * unavailable (node-postgres's query_timeout, per statement): a connection whose server
   * vanished without a reset (a failed-over primary, a dropped NAT mapping) otherwise waits for
   * TCP to give up, about 15 minutes, with the heartbeat behind it. Not a handler's own queries
   * (ctx.db), which may run long by design.
   */
  platformQueryTimeoutMs?: number;
}

/** Each pool's (and each transaction client's) platformQueryTimeoutMs. */
const platformQueryTimeouts = new WeakMap<object, number>();

/** `config` with `db`'s read timeout, if it has one (node-postgres reads query_timeout per query; its types omit it). */
export function timed<V extends unknown[]>(db: object, config: pg.QueryConfig<V>): pg.QueryConfig<V> {
  const query_timeout = platformQueryTimeouts.get(db);
  return query_timeout ? ({ ...config, query_timeout } as pg.QueryConfig<V>) : config;
}

/**
 * Close a pool, waiting at most `timeoutMs`: a connection whose server went silent (no reset)
 * never answers the goodbye, and a shutdown that waited for it would end in SIGKILL.
 */
export async function endPool(pool: pg.Pool, timeoutMs = 5000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    pool.end().catch(() => undefined),
    new Promise<void>((r) => {
      timer = setTimeout(r, timeoutMs);
      timer.unref();
    }),
  ]);
  clearTimeout(timer);
}

/** Give a transaction's client its pool's timeout while it is checked out (withTransaction, a job's transaction). */
export function inheritQueryTimeout(pool: object, client: object): void {
  const ms = platformQueryTimeouts.get(pool);
  if (ms !== undefined) platformQueryTimeouts.set(client, ms);
}

/**
 * A checked-out client back to its pool (dropped if `err`), without the read timeout its
 * transaction gave it: whoever checks it out next decides for themselves.
 */
export function releaseClient(client: pg.PoolClient, err?: Error): void {
  platformQueryTimeouts.delete(client);
  client.release(err);
}

/** node-postgres's error when a statement's answer took longer than its read timeout. */
export function isQueryReadTimeout(err: unknown): boolean {
  return err instanceof Error && err.message === 'Query read timeout';
}

/**
 * How often PostgreSQL checks, while it runs a statement of ours, that our end of the connection
 * is still there (client_connection_check_interval, PostgreSQL 14+). By default it finds out only
 * when it writes the answer: a claim waiting on a row lock whose worker had gone (killed, or it
 * gave up on the statement after its read timeout, or a reset took the socket) would wait on,
 * take the job once the lock went and commit, and the job would sit claimed by nobody until its
 * lease ran out. Checked, the statement is cancelled within this interval and rolls back.
 */
export const CLIENT_CHECK_INTERVAL_MS = 1_000;
const CHECK_CONNECTION = `SET client_connection_check_interval = ${CLIENT_CHECK_INTERVAL_MS}`;

/**
 * A pg.Client that, once connected and before anyone uses it, sets CLIENT_CHECK_INTERVAL_MS. A
 * set, not a startup option: a server that cannot check sockets (PostgreSQL on Windows, or 14 on
 * macOS) refuses the setting, which as a startup option would refuse every connection; here the
 * connection goes on without it.
 */
class CheckedClient extends pg.Client {
  // pg's two overloads in one body (pg-pool connects with a callback, others with the promise).
  override connect(callback?: any): any {
    // Until its holder listens (pg-pool attaches its listener in the connect callback): a backend
    // ended right after the login (pg_terminate_backend in a failover, in the same packet as its
    // ReadyForQuery) is reported as an 'error' event while nobody listens, and Node ends the
    // process. Caught here, the connect fails with it instead (seen once in CI under load).
    let early: unknown;
    const onEarly = (err: unknown) => {
      early ??= err;
    };
    this.on('error', onEarly);
    const connected = super
      .connect()
      .then(() => this.query(CHECK_CONNECTION).then(noop, noop))
      .then(() => {
        if (early !== undefined) throw early;
      })
      .finally(() => this.removeListener('error', onEarly));
    if (!callback) return connected;
    connected.then(
      () => callback(),
      (err: unknown) => callback(err),
    );
    return undefined;
  }
}
const noop = () => undefined;

/** Idle timeout of the API's and the workers' pools (see PoolOptions.idleTimeoutMs). */
export const SERVICE_IDLE_TIMEOUT_MS = 10 * 60_000;

/** The credential source of each pool createPool made with one (freshLogin's retry). */
const poolCredentials = new WeakMap<pg.Pool, DatabaseCredentialSource>();

export function createPool(opts: PoolOptions): pg.Pool {
  const Pool = opts.credentials ? poolWith(opts.credentials) : pg.Pool;
  const pool = new Pool({
    Client: CheckedClient,
    connectionString: opts.url,
    max: opts.max,
    application_name: opts.applicationName,
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: opts.idleTimeoutMs ?? 30_000,
    // TCP keepalives: a long-idle connection to a database that failed over is found dead by
    // the kernel, not by the first query that needs it; probes start after 10 s idle (the
    // kernel's default waits two hours).
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
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
  if (opts.credentials) poolCredentials.set(pool, opts.credentials);
  if (opts.platformQueryTimeoutMs) platformQueryTimeouts.set(pool, opts.platformQueryTimeoutMs);
  return pool;
}

/**
 * Log in as a new connection of `pool` would (its settings and current credentials, the secret
 * read again once if the login is refused), then log out: whether the database accepts new
 * connections now. A query through the pool cannot tell: it may run on an idle connection that
 * logged in before a password changed. Rejects with the login's error.
 */
export async function freshLogin(pool: pg.Pool): Promise<void> {
  const { Client, options } = pool as unknown as { Client: new (config: pg.PoolConfig) => pg.Client; options: pg.PoolConfig };
  const once = async () => {
    const c = new Client(options);
    c.on('error', () => undefined);
    try {
      await c.connect();
    } finally {
      await c.end().catch(() => undefined);
    }
  };
  const credentials = poolCredentials.get(pool);
  await (credentials ? renewingOnce(credentials, once) : once());
}

/**
 * `login()`, and once more when PostgreSQL refused it and reading the secret again brought other
 * credentials than the ones it was tried with (a pooled connection's, freshLogin's).
 */
async function renewingOnce<T>(credentials: DatabaseCredentialSource, login: () => Promise<T>): Promise<T> {
  const current = credentials.current();
  try {
    return await login();
  } catch (err) {
    if (!isAuthenticationFailure(err) || !(await credentials.renewedSince(credentialsTried(err) ?? current))) throw err;
    return await login();
  }
}

/** The credentials a refused login was tried with, carried on its error (see clientWith). */
const TRIED = Symbol('credentials tried');

/**
 * The credentials a failed connect of a client from `createClient`/`createPool` was tried with:
 * what `credentials.renewedSince` must be asked about (not what was current when the caller asked
 * for a connection: a pool's caller can wait for a free slot while the secret changes).
 */
export function credentialsTried(err: unknown): DatabaseCredentials | undefined {
  return err && typeof err === 'object' ? (err as { [TRIED]?: DatabaseCredentials })[TRIED] : undefined;
}

/** A pg.Client that logs in as the source's current credentials say (see poolWith). */
function clientWith(credentials: DatabaseCredentialSource): typeof pg.Client {
  return class CredentialClient extends CheckedClient {
    private readonly tried: DatabaseCredentials;

    constructor(config?: string | pg.ClientConfig) {
      super(config);
      this.tried = credentials.current();
      const self = this as unknown as { user: string; password: string; connectionParameters: { user: string; password: string } };
      self.user = self.connectionParameters.user = this.tried.user;
      self.password = self.connectionParameters.password = this.tried.password;
    }

    // pg's two overloads in one body (pg-pool connects with a callback, createClient's holders with the promise).
    override connect(callback?: any): any {
      const tag = (err: unknown) => {
        if (err && typeof err === 'object') (err as { [TRIED]?: DatabaseCredentials })[TRIED] = this.tried;
      };
      if (callback) {
        return super.connect((err: Error) => {
          if (err) tag(err);
          callback(err);
        });
      }
      return super.connect().catch((err: unknown) => {
        tag(err);
        throw err;
      });
    }
  };
}

/**
 * One connection outside a pool (a LISTEN session), logging in as `credentials` say when given.
 * Its holder handles a refused login: `credentials.renewedSince(credentialsTried(err))` before it retries.
 */
export function createClient(config: pg.ClientConfig, credentials?: DatabaseCredentialSource): pg.Client {
  return credentials ? new (clientWith(credentials))(config) : new pg.Client(config);
}

/**
 * A pool whose connections log in with the source's current credentials (pg reads user and
 * password when it connects, from the parameters it parsed at construction, where the URL's win
 * over the config's: so they are set after construction). A login PostgreSQL refuses reads the
 * secret again (at most once per the source's interval) and, when that brings other credentials,
 * is tried once more with them: a password rotated in the secret before the database is not seen
 * by the callers at all.
 */
function poolWith(credentials: DatabaseCredentialSource): typeof pg.Pool {
  const CredentialClient = clientWith(credentials);
  return class extends pg.Pool {
    constructor(config?: pg.PoolConfig) {
      super({ ...config, Client: CredentialClient });
    }

    // pg-pool's own query() connects with a callback; callers use the promise. Both go through here
    // (pg's two overloads in one body).
    override connect(callback?: any): any {
      const connected = renewingOnce(credentials, () => super.connect());
      if (!callback) return connected;
      connected.then(
        (client) => callback(undefined, client, client.release.bind(client)),
        (err: unknown) => callback(err, undefined, () => undefined),
      );
      return undefined;
    }
  };
}

/**
 * Open `n` of the pool's connections now, at once, and touch the job tables on each (the
 * backend loads their catalog entries), so the first jobs after a start do not wait for it:
 * measured, the first ~15 jobs of a fresh process waited 250–500 ms for connections opened on
 * demand (`npm run bench`, enqueue → start, warm-up). Best effort: a database that does not answer
 * within `timeoutMs` leaves the pool to connect on demand, as it would anyway.
 */
export async function warmPool(pool: pg.Pool, n: number, timeoutMs = 5_000): Promise<{ opened: number; ms: number }> {
  const t0 = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'late'>((r) => (timer = setTimeout(() => r('late'), timeoutMs)));
  const opened: pg.PoolClient[] = [];
  const open = Array.from({ length: n }, async () => {
    const c = await pool.connect();
    opened.push(c);
    // Each its own statement: one failing (a table not there yet, before the migrations) does not stop the others.
    await c.query("SELECT 1 FROM jobs.job WHERE id = '00000000-0000-0000-0000-000000000000'").catch(() => undefined);
    await c.query('SELECT 1 FROM jobs.outbox LIMIT 0').catch(() => undefined);
  });
  await Promise.race([Promise.allSettled(open), deadline]);
  clearTimeout(timer);
  // Released when they are done, whether or not the deadline came first.
  void Promise.allSettled(open).then(() => {
    for (const c of opened.splice(0)) c.release();
  });
  return { opened: opened.length, ms: performance.now() - t0 };
}
