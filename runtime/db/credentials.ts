// The services' database credentials, read again from Secrets Manager while the process runs, so
// a password rotated in the secret reaches every task without a restart. ECS injects the secret's
// JSON once, at task start (DATABASE_SECRET): that is where a task begins. With the secret's ARN
// (DATABASE_SECRET_ARN, which the stack sets), the services also read it again
//  - when PostgreSQL refuses a new connection's password (28P01) or its user (28000): the password
//    changed and this task has not seen it yet (the pool then tries the login once more with what
//    it read, db/pool.ts); at most once per `minIntervalMs`, so a wrong password does not turn
//    into a stream of Secrets Manager calls;
//  - and every `everyMs` (default an hour), so a task that opens no connection for a long time
//    still follows the secret, including a change of user.
// New connections take the credentials current when they are opened (createPool's `credentials`);
// open ones keep theirs, which PostgreSQL does not revoke when a password changes. A read that
// fails (Secrets Manager throttling or unreachable, the secret malformed) keeps the credentials
// the task has and is logged: it never takes a working connection away.

import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';

export interface DatabaseCredentials {
  user: string;
  password: string;
  /** When the secret's version they came from was made (its last rotation), where known. */
  createdAt?: Date;
}

export interface CredentialsLog {
  info(fields: object, msg: string): void;
  warn(fields: object, msg: string): void;
}

export interface DatabaseCredentialSourceOptions {
  /** The credentials the task started with (from DATABASE_SECRET). */
  initial: DatabaseCredentials;
  /** Reads the secret now. */
  read: () => Promise<DatabaseCredentials>;
  log: CredentialsLog;
  /** Where the credentials come from, for the log lines (the secret's ARN). */
  source: string;
  /** Read again this often even when nothing failed (default 1 hour). */
  everyMs?: number;
  /** A refused login reads the secret again at most this often (default 10 s). */
  minIntervalMs?: number;
  /** Each read that failed (the worker counts DatabaseSecretReadsFailed, which pages when it lasts). */
  onReadFailed?: () => void;
  /** The current version's age (from its createdAt) at each periodic read (the worker publishes DatabaseSecretAgeMs: a rotation that stopped pages). */
  onAge?: (ms: number) => void;
}

export class DatabaseCredentialSource {
  private credentials: DatabaseCredentials;
  private reading: Promise<void> | undefined;
  /** When a refused login last made a read (the periodic reads do not count: one just before a rotation must not delay the read it needs). */
  private lastRefusalReadAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly everyMs: number;
  private readonly minIntervalMs: number;

  constructor(private readonly o: DatabaseCredentialSourceOptions) {
    this.credentials = o.initial;
    this.everyMs = o.everyMs ?? 60 * 60_000;
    this.minIntervalMs = o.minIntervalMs ?? 10_000;
  }

  /** What a connection opened now logs in with. */
  current(): DatabaseCredentials {
    return this.credentials;
  }

  /**
   * A login with `used` was refused: are there other credentials to try? Read the secret again
   * unless a refused login made a read within minIntervalMs (a read under way is waited for, not
   * repeated).
   */
  async renewedSince(used: DatabaseCredentials): Promise<boolean> {
    if (this.credentials !== used) return true;
    if (this.reading) await this.reading;
    else if (Date.now() - this.lastRefusalReadAt >= this.minIntervalMs) {
      this.lastRefusalReadAt = Date.now();
      await this.refresh('PostgreSQL refused the login');
    }
    return this.credentials !== used;
  }

  /** Read the secret again now (one read at a time: a caller during a read waits for it). Never rejects. */
  refresh(reason: string): Promise<void> {
    this.reading ??= (async () => {
      try {
        const next = await this.o.read();
        const before = this.credentials;
        if (next.user !== before.user || next.password !== before.password) {
          this.credentials = next;
          this.o.log.info(
            {
              reason,
              source: this.o.source,
              user: next.user,
              previousUser: before.user,
              passwordChanged: next.password !== before.password,
            },
            'database credentials renewed from the secret: connections opened from now on use them',
          );
        }
        if (reason === 'periodic' && next.createdAt) this.o.onAge?.(Math.max(0, Date.now() - next.createdAt.getTime()));
      } catch (err) {
        this.o.log.warn({ err, reason, source: this.o.source }, 'could not read the database secret; keeping the current credentials');
        this.o.onReadFailed?.();
      } finally {
        this.reading = undefined;
      }
    })();
    return this.reading;
  }

  /** Read now and then every `everyMs` (the first read gives the secret's age at once). The timer does not keep the process alive. */
  start(): void {
    if (this.timer) return;
    void this.refresh('periodic');
    this.timer = setInterval(() => void this.refresh('periodic'), this.everyMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.reading;
  }
}

/** An RDS secret's JSON, checked for a username and a password. */
export interface DatabaseSecret {
  username: string;
  password: string;
  host?: string;
  [k: string]: unknown;
}

/** Parse an RDS secret's JSON ({host, port, username, password, dbname, …}); `source` names it in the errors. */
export function parseDatabaseSecret(json: string | undefined, source: string): DatabaseSecret {
  let s: Record<string, unknown>;
  try {
    s = JSON.parse(json ?? '') as Record<string, unknown>;
  } catch {
    throw new Error(`${source}: the secret is not JSON (expected the RDS secret: host, port, username, password, dbname)`);
  }
  if (typeof s.username !== 'string' || !s.username || typeof s.password !== 'string' || !s.password) {
    throw new Error(`${source}: the secret lacks a username or a password`);
  }
  return s as DatabaseSecret;
}

/** The username and password of an RDS secret's JSON. */
export function credentialsFromSecretJson(json: string | undefined, source: string): DatabaseCredentials {
  const s = parseDatabaseSecret(json, source);
  return { user: s.username, password: s.password };
}

/**
 * Reads the secret's current version (AWSCURRENT) from Secrets Manager, with the task role's
 * credentials; the version's CreatedDate is when a rotation made it (or the secret, if none has).
 */
export function secretsManagerReader(secretArn: string, client = new SecretsManagerClient({})): () => Promise<DatabaseCredentials> {
  return async () => {
    const out = await client.send(new GetSecretValueCommand({ SecretId: secretArn }));
    return { ...credentialsFromSecretJson(out.SecretString, secretArn), ...(out.CreatedDate ? { createdAt: out.CreatedDate } : {}) };
  };
}

/**
 * The source for a service whose URL was built from DATABASE_SECRET and which was given the
 * secret's ARN (env.ts databaseSecretArnFromEnv): it starts from the URL's user and password and
 * reads the secret in the ARN's region.
 */
export function databaseCredentialSource(o: {
  secretArn: string;
  databaseUrl: string;
  log: CredentialsLog;
  client?: SecretsManagerClient;
  everyMs?: number;
  minIntervalMs?: number;
  onReadFailed?: () => void;
  onAge?: (ms: number) => void;
}): DatabaseCredentialSource {
  const url = new URL(o.databaseUrl);
  const region = o.secretArn.split(':')[3];
  const client = o.client ?? new SecretsManagerClient(region ? { region } : {});
  return new DatabaseCredentialSource({
    initial: { user: decodeURIComponent(url.username), password: decodeURIComponent(url.password) },
    read: secretsManagerReader(o.secretArn, client),
    ...(o.onAge ? { onAge: o.onAge } : {}),
    log: o.log,
    source: o.secretArn,
    ...(o.everyMs !== undefined ? { everyMs: o.everyMs } : {}),
    ...(o.minIntervalMs !== undefined ? { minIntervalMs: o.minIntervalMs } : {}),
    ...(o.onReadFailed ? { onReadFailed: o.onReadFailed } : {}),
  });
}
