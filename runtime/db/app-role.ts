// The services' own database role: least privilege instead of the RDS master user. The schema
// bootstrap (runtime/bootstrap/handler.ts) creates or updates it after every migration run, as
// the master user, with the password from its own Secrets Manager secret; the services connect
// with that secret only. The role reads and writes rows — the job tables, the outbox, the ERP
// tables the handlers post to — and can do nothing else: no DDL, no ownership, and not the
// migration bookkeeping.
//
// Utility statements (CREATE/ALTER ROLE, GRANT) take no bind parameters, so the names and the
// password are quoted by the server (format %I / %L), never spliced in by the client. The password
// never travels in the clear: the client sends its SCRAM-SHA-256 verifier (what PostgreSQL would
// store anyway), so a statement the server logs (a slow one, a failed one, with its parameters)
// shows a salted hash, not the password.

import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import type pg from 'pg';
import { APP_SCHEMA } from './migrate.ts';

/**
 * The schemas whose tables the services read and write: the job store, the example handlers'
 * tables (public) and the ERP's own (`erp`, from migrations/app). Every table created in them
 * later, by the same owner role, comes with the same row access (default privileges below).
 */
export const APP_SCHEMAS = ['jobs', 'public', APP_SCHEMA] as const;

export interface AppRole {
  username: string;
  password: string;
}

const ROLE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5802/7677, as its own
 * pg_fe_scram_build_secret makes it: 4096 iterations, a 16-byte salt). ASCII passwords only, which
 * SASLprep leaves as they are; the secrets' generated passwords are ASCII.
 */
export function scramVerifier(password: string, salt: Buffer = randomBytes(16), iterations = 4096): string {
  if (!/^[\x20-\x7e]+$/.test(password))
    throw new Error('the password has characters outside printable ASCII: its SCRAM verifier would need SASLprep');
  const salted = pbkdf2Sync(password, salt, iterations, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  const storedKey = createHash('sha256').update(clientKey).digest();
  const serverKey = createHmac('sha256', salted).update('Server Key').digest();
  return `SCRAM-SHA-256$${iterations}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}

/** Create the role if missing, (re)set its password, and grant it exactly the row access the services need. Idempotent. */
export async function ensureAppRole(pool: pg.Pool, role: AppRole): Promise<{ created: boolean }> {
  if (!ROLE_NAME.test(role.username))
    throw new Error(`app role name "${role.username}" must be a lower-case SQL identifier (letters, digits, _; at most 63)`);
  if (role.password.length < 16) throw new Error(`app role ${role.username}: the password from its secret is shorter than 16 characters`);
  const client = await pool.connect();
  const exec = async (template: string, ...args: string[]) => {
    const params = [template, ...args];
    const { rows } = await client.query<{ sql: string }>(
      `SELECT format(${params.map((_, i) => `$${i + 1}::text`).join(', ')}) AS sql`,
      params,
    );
    await client.query(rows[0]!.sql);
  };
  try {
    await client.query('BEGIN');
    // One bootstrap at a time (two stacks' deployments, a retry): CREATE ROLE is not idempotent.
    await client.query("SELECT pg_advisory_xact_lock(hashtext('erp-jobs app role'))");
    const exists = (await client.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [role.username])).rowCount === 1;
    await exec(
      exists
        ? 'ALTER ROLE %I WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD %L'
        : 'CREATE ROLE %I WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD %L',
      role.username,
      scramVerifier(role.password),
    );
    const db = (await client.query<{ db: string }>('SELECT current_database() AS db')).rows[0]!.db;
    await exec('GRANT CONNECT ON DATABASE %I TO %I', db, role.username);
    for (const schema of APP_SCHEMAS) {
      await exec('GRANT USAGE ON SCHEMA %I TO %I', schema, role.username);
      await exec('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO %I', schema, role.username);
      await exec('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO %I', schema, role.username);
      await exec('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %I TO %I', schema, role.username);
      // Tables later migrations add (run by this same user) come with the same rights.
      await exec('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO %I', schema, role.username);
      await exec('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT USAGE, SELECT ON SEQUENCES TO %I', schema, role.username);
      // No DDL: PostgreSQL 15 no longer lets everyone create in public; say so for older servers too.
      await exec('REVOKE CREATE ON SCHEMA %I FROM %I', schema, role.username);
    }
    // The migration bookkeeping is the bootstrap's alone.
    await exec('REVOKE INSERT, UPDATE, DELETE ON jobs.schema_migrations, jobs.app_schema_migrations FROM %I', role.username);
    await client.query('COMMIT');
    return { created: !exists };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}
