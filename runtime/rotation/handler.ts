// Rotates the services' database password: the Lambda function Secrets Manager calls, step by
// step, for the services' secret (lib/password-rotation.ts schedules it). Alternating users: the
// secret names one of two login roles, `erp_jobs_app` and `erp_jobs_app_clone`; a rotation gives
// the other one a new password and the platform's row access (runtime/db/app-role.ts, as the
// master user, the same code the schema bootstrap runs), tests it, and makes it current. The role
// the services use until then is not touched: its password stays valid until the rotation after
// next, so running tasks keep logging in with what they have until they read the secret again
// (runtime/db/credentials.ts: hourly, or when a login is refused). No moment exists when a
// service's credentials are refused, and a rotation that fails half-way leaves the services on a
// role that works. The schema bootstrap sets the password of the secret's current user only,
// which a rotation never changes, so the two cannot undo each other.
//
// The four steps, each safe to run again (Secrets Manager retries a step that failed):
//  - createSecret: the pending version (the other user, a new random password), unless it exists;
//  - setSecret: that role created or updated, as the master user, unless it can already log in;
//  - testSecret: a login as the pending version, reading the job table;
//  - finishSecret: AWSCURRENT moved to the pending version.
// A step that throws fails the rotation: the function's Errors metric pages on-call (the
// "database password rotation failing" alarm) and the secret stays as it was.

import { randomBytes } from 'node:crypto';
import {
  DescribeSecretCommand,
  GetSecretValueCommand,
  PutSecretValueCommand,
  SecretsManagerClient,
  UpdateSecretVersionStageCommand,
} from '@aws-sdk/client-secrets-manager';
import { databaseUrlFromEnv, ENV } from '../config/env.ts';
import { ensureAppRole } from '../db/app-role.ts';
import { type DatabaseSecret, parseDatabaseSecret } from '../db/credentials.ts';
import { createPool } from '../db/pool.ts';

export interface RotationEvent {
  SecretId: string;
  ClientRequestToken: string;
  Step: 'createSecret' | 'setSecret' | 'testSecret' | 'finishSecret';
}

export interface RotationDeps {
  sm: SecretsManagerClient;
  /** The master user's secret: who creates and updates the services' roles. */
  masterSecretArn: string;
  log: (msg: string) => void;
  /** A connection URL for a secret's JSON (default: as the services build it, TLS verified against DATABASE_CA_FILE). */
  urlFor?: (secretJson: string) => string;
}

const SUFFIX = '_clone';

/** The other user of the pair. */
export function alternateUser(user: string): string {
  return user.endsWith(SUFFIX) ? user.slice(0, -SUFFIX.length) : `${user}${SUFFIX}`;
}

/**
 * Run one step. A step that fails logs one line naming the step, the secret, the version and the
 * cause (the function's log is where the runbook sends on-call), and throws with the step's name
 * in front of its message.
 */
export async function rotate(event: RotationEvent, deps: RotationDeps): Promise<void> {
  try {
    await runStep(event, deps);
  } catch (err) {
    const e = err instanceof Error ? err : new Error(String(err));
    const cause = `${e.name && e.name !== 'Error' ? `${e.name}: ` : ''}${e.message}`;
    deps.log(`${event.Step} FAILED for ${event.SecretId} version ${event.ClientRequestToken}: ${cause}`);
    if (!e.message.startsWith(`${event.Step}:`)) e.message = `${event.Step}: ${e.message}`;
    throw e;
  }
}

async function runStep(event: RotationEvent, deps: RotationDeps): Promise<void> {
  const { SecretId: arn, ClientRequestToken: token, Step: step } = event;
  const { sm, log } = deps;
  const meta = await sm.send(new DescribeSecretCommand({ SecretId: arn }));
  // Absent when rotation was never configured: only a rotation Secrets Manager runs may call the steps.
  if (meta.RotationEnabled !== true) throw new Error(`${arn}: rotation is not enabled on this secret`);
  const stages = meta.VersionIdsToStages ?? {};
  if (!stages[token]) throw new Error(`${arn}: version ${token} is not a version of this secret`);
  if (stages[token].includes('AWSCURRENT')) {
    log(`${step}: version ${token} is already current; nothing to do`);
    return;
  }
  if (!stages[token].includes('AWSPENDING'))
    throw new Error(`${arn}: version ${token} is not pending rotation (stages: ${stages[token].join(', ')})`);

  const read = async (secretId: string, stage: string, versionId?: string): Promise<{ json: string; secret: DatabaseSecret }> => {
    const out = await sm.send(
      new GetSecretValueCommand({ SecretId: secretId, VersionStage: stage, ...(versionId ? { VersionId: versionId } : {}) }),
    );
    const json = out.SecretString ?? '';
    const secret = parseDatabaseSecret(json, `${secretId} (${stage})`);
    return { json, secret };
  };
  const urlFor =
    deps.urlFor ??
    ((json: string) => databaseUrlFromEnv({ [ENV.databaseSecret]: json, [ENV.databaseCaFile]: process.env[ENV.databaseCaFile] }));
  const withPool = async <T>(json: string, what: string, fn: (pool: ReturnType<typeof createPool>) => Promise<T>): Promise<T> => {
    const pool = createPool({ url: urlFor(json), max: 1, applicationName: `jobs password rotation (${what})` });
    try {
      return await fn(pool);
    } finally {
      await pool.end().catch(() => undefined);
    }
  };
  const canLogIn = (json: string) =>
    withPool(json, 'login check', (pool) => pool.query('SELECT 1')).then(
      () => true,
      () => false,
    );

  switch (step) {
    case 'createSecret': {
      const current = await read(arn, 'AWSCURRENT');
      const existing = await read(arn, 'AWSPENDING', token).catch((err: unknown) => {
        if ((err as { name?: string }).name === 'ResourceNotFoundException') return undefined;
        throw err;
      });
      if (existing) {
        log(`createSecret: pending version ${token} exists (user ${existing.secret.username})`);
        return;
      }
      const next: DatabaseSecret = {
        ...current.secret,
        username: alternateUser(current.secret.username),
        password: randomBytes(24).toString('base64url'),
      };
      await sm.send(
        new PutSecretValueCommand({
          SecretId: arn,
          ClientRequestToken: token,
          SecretString: JSON.stringify(next),
          VersionStages: ['AWSPENDING'],
        }),
      );
      log(`createSecret: pending version ${token} for user ${next.username} (current: ${current.secret.username})`);
      return;
    }
    case 'setSecret': {
      const pending = await read(arn, 'AWSPENDING', token);
      if (await canLogIn(pending.json)) {
        log(`setSecret: ${pending.secret.username} already logs in with the pending password`);
        return;
      }
      const master = await read(deps.masterSecretArn, 'AWSCURRENT');
      if (pending.secret.host !== master.secret.host) {
        throw new Error(
          `setSecret: the pending secret's host ${String(pending.secret.host)} is not the master secret's ${String(master.secret.host)}`,
        );
      }
      const { created } = await withPool(master.json, 'master', (pool) =>
        ensureAppRole(pool, { username: pending.secret.username, password: pending.secret.password }),
      );
      log(
        `setSecret: ${created ? 'created' : 'updated'} role ${pending.secret.username} with the pending password and the services' row access`,
      );
      return;
    }
    case 'testSecret': {
      const pending = await read(arn, 'AWSPENDING', token);
      // A login, a read of the job table, and the right to write what the services write.
      const { rows } = await withPool(pending.json, 'test', async (pool) => {
        await pool.query("SELECT 1 FROM jobs.job WHERE id = '00000000-0000-0000-0000-000000000000'");
        return pool.query<{ writes: boolean }>(
          "SELECT has_table_privilege('jobs.job', 'INSERT, UPDATE, DELETE') AND has_table_privilege('jobs.outbox', 'INSERT, DELETE') AS writes",
        );
      });
      if (rows[0]?.writes !== true) throw new Error(`testSecret: ${pending.secret.username} logs in but may not write the job tables`);
      log(`testSecret: ${pending.secret.username} logs in, reads the job table and may write the job tables`);
      return;
    }
    case 'finishSecret': {
      const current = Object.entries(stages).find(([, s]) => s.includes('AWSCURRENT'))?.[0];
      await sm.send(
        new UpdateSecretVersionStageCommand({
          SecretId: arn,
          VersionStage: 'AWSCURRENT',
          MoveToVersionId: token,
          ...(current ? { RemoveFromVersionId: current } : {}),
        }),
      );
      log(`finishSecret: version ${token} is current (was ${current ?? 'none'})`);
      return;
    }
    default:
      throw new Error(`${arn}: unknown rotation step ${String(step)}`);
  }
}

/** The Lambda entry point (lib/password-rotation.ts sets MASTER_SECRET_ARN and DATABASE_CA_FILE). */
export async function handler(event: RotationEvent): Promise<void> {
  const masterSecretArn = process.env.MASTER_SECRET_ARN;
  if (!masterSecretArn) throw new Error('password rotation: MASTER_SECRET_ARN is not set');
  await rotate(event, { sm: new SecretsManagerClient({}), masterSecretArn, log: (m) => console.log(m) });
}
