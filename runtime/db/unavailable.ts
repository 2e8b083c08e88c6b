// Which errors mean "the database cannot be used right now" (a failover, a restart, a reset
// socket, a full connection table or disk, a login refused) as opposed to a fault in what we asked of it.
// One rule for every service: the API answers these with 503 and Retry-After, the worker stops
// receiving until the database answers again (so no message spends receives toward the DLQ
// meanwhile). A retry may succeed; nothing about the request was wrong. A refused login counts:
// the password rotated and this task has not followed yet (db/credentials.ts reads the secret
// again), or it cannot read the secret, which pages on its own ("database secret unreadable").
// The schema bootstrap retries the rest, not a refused login: its master password is read afresh
// for each run, so a refusal there is not going to change by waiting.

const CONNECTION_ERRORS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
]);

/** An error's SQLSTATE or socket code, its message and its cause, as far as it has them; null for a non-object. */
function errorParts(err: unknown): { code: string; message: string; cause: unknown } | null {
  const e = err as { code?: unknown; message?: unknown; cause?: unknown } | null;
  if (!e || typeof e !== 'object') return null;
  return { code: typeof e.code === 'string' ? e.code : '', message: typeof e.message === 'string' ? e.message : '', cause: e.cause };
}

export function isDatabaseUnavailable(err: unknown): boolean {
  const e = errorParts(err);
  if (!e) return false;
  const { code, message } = e;
  return (
    CONNECTION_ERRORS.has(code) ||
    // Class 08: connection exception; 57P01-03: the server is shutting down or starting up
    // (pg_terminate_backend, a failover); 53100/53200/53300: its disk full, out of memory, too
    // many connections; 58030: an I/O error; 25006: a read-only server (a connection that reached
    // a standby in a failover). Each passes when the server is fixed or the connection replaced;
    // counted as faults of the work instead, a disk full for 15 minutes sent every waiting
    // message to the DLQ (each receive spent, the claim failing every time).
    code.startsWith('08') ||
    /^57P0[123]$/.test(code) ||
    /^53[123]00$/.test(code) ||
    code === '58030' ||
    code === '25006' ||
    isAuthenticationFailure(err) ||
    // node-postgres's own words: the pool's connect timeout, a socket that ended under a query,
    // and a client used again after its connection failed.
    // And a statement that got no answer within its read timeout (db/pool.ts platformQueryTimeoutMs).
    /timeout exceeded when trying to connect|Connection terminated|not queryable|Connection ended|read ECONNRESET|^Query read timeout$/i.test(
      message,
    ) ||
    (e.cause !== undefined && e.cause !== err && isDatabaseUnavailable(e.cause))
  );
}

/** PostgreSQL's answers to a login whose password (28P01) or user (28000) it refuses. */
export function isAuthenticationFailure(err: unknown): boolean {
  const e = err as { code?: unknown; cause?: unknown } | null;
  if (!e || typeof e !== 'object') return false;
  return e.code === '28P01' || e.code === '28000' || (e.cause !== undefined && e.cause !== err && isAuthenticationFailure(e.cause));
}

/**
 * The statement was sent and its answer lost with the connection (a reset, a close, no answer
 * within the read timeout): it may have run, and committed, or not. Not a statement the server
 * refused (a read-only standby, a full disk, a shutdown: it answered, and nothing was done), nor
 * a connection that never opened.
 */
export function isAnswerLost(err: unknown): boolean {
  const e = errorParts(err);
  if (!e) return false;
  const { code, message } = e;
  return (
    code === 'ECONNRESET' ||
    code === 'EPIPE' ||
    code === 'ETIMEDOUT' ||
    code.startsWith('08') ||
    /Connection terminated|Connection ended|read ECONNRESET|^Query read timeout$/i.test(message) ||
    (e.cause !== undefined && e.cause !== err && isAnswerLost(e.cause))
  );
}
