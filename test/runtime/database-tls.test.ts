// Verified TLS to the database (DATABASE_CA_FILE): a URL built from the RDS secret checks the
// server's certificate against the given bundle and its host name, and refuses a server signed by
// another CA or named otherwise. Against a real PostgreSQL with TLS on, certificates made here by
// openssl (a CA, and a server certificate for DNS:localhost).
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { databaseTlsUnverified, databaseUrlFromEnv, ENV } from '../../runtime/config/env.ts';
import { ConfigError } from '../../runtime/config/rules.ts';
import { startEmbeddedPg, type EmbeddedPg } from '../../dev/embedded-pg.ts';
import { makeCertificates } from '../support/certificates.ts';

function secretEnv(host: string, port: number, caFile?: string) {
  return {
    [ENV.databaseSecret]: JSON.stringify({ host, port, username: 'postgres', password: 'local-only', dbname: 'postgres' }),
    ...(caFile ? { [ENV.databaseCaFile]: caFile } : {}),
  };
}

async function connect(url: string): Promise<{ ssl: boolean }> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await c.connect();
  try {
    const { rows } = await c.query('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
    return { ssl: rows[0].ssl as boolean };
  } finally {
    await c.end();
  }
}

describe('database TLS (DATABASE_CA_FILE)', () => {
  let dir: string;
  let db: EmbeddedPg;
  let certs: ReturnType<typeof makeCertificates>;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'jobs-tls-'));
    chmodSync(dir, 0o755);
    certs = makeCertificates(dir);
    // PostgreSQL reads its key only if the server's OS user owns it and nobody else can.
    if (process.getuid?.() === 0) {
      const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
      const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
      for (const f of [certs.certFile, certs.keyFile]) chownSync(f, uid, gid);
    }
    chmodSync(certs.keyFile, 0o600);
    db = await startEmbeddedPg({
      settings: { ssl: 'on', ssl_cert_file: certs.certFile, ssl_key_file: certs.keyFile, listen_addresses: 'localhost' },
    });
  }, 60_000);
  afterAll(async () => {
    await db?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('verifies the certificate and the host name against the bundle, and the connection is encrypted', async () => {
    const url = databaseUrlFromEnv(secretEnv('localhost', db.port, certs.caFile));
    expect(new URL(url).searchParams.get('sslmode')).toBe('verify-full');
    expect(await connect(url)).toEqual({ ssl: true });
    expect(databaseTlsUnverified(secretEnv('localhost', db.port, certs.caFile))).toBeNull();
  });

  it('refuses a server whose certificate another CA signed', async () => {
    await expect(connect(databaseUrlFromEnv(secretEnv('localhost', db.port, certs.otherCaFile)))).rejects.toThrow(
      /self[- ]signed|unable to (verify|get)|certificate/i,
    );
  });

  it('refuses a server whose certificate names another host', async () => {
    // The certificate is for DNS:localhost; 127.0.0.1 is the same server by another name.
    await expect(connect(databaseUrlFromEnv(secretEnv('127.0.0.1', db.port, certs.caFile)))).rejects.toThrow(
      /altnames|does not match|IP: 127\.0\.0\.1/i,
    );
  });

  it('refuses to start with a bundle that is not there, naming the variable and the path', () => {
    const missing = join(dir, 'no-such-bundle.pem');
    expect(() => databaseUrlFromEnv(secretEnv('localhost', db.port, missing))).toThrow(ConfigError);
    expect(() => databaseUrlFromEnv(secretEnv('localhost', db.port, missing))).toThrow(
      new RegExp(`DATABASE_CA_FILE = ${missing.replace(/[.]/g, '\\.')} is not a readable file`),
    );
  });

  it('without a bundle: encrypted but unverified, and says so for the start log', async () => {
    const env = secretEnv('localhost', db.port);
    expect(new URL(databaseUrlFromEnv(env)).searchParams.get('sslmode')).toBe('no-verify');
    expect(await connect(databaseUrlFromEnv(env))).toEqual({ ssl: true });
    expect(databaseTlsUnverified(env)).toMatch(
      /DATABASE_CA_FILE is not set: the database connection is encrypted but its certificate is not verified/,
    );
    // A DATABASE_URL is taken as given (local stack, tests): no warning.
    expect(databaseTlsUnverified({ [ENV.databaseUrl]: db.url })).toBeNull();
  });
});
