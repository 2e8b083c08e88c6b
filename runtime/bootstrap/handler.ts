// The deploy-time schema bootstrap: the onEvent handler of a CloudFormation custom resource
// (CDK Provider framework, lib/schema-bootstrap.ts). It runs inside the VPC, reads the RDS
// secret, and calls the runtime's own migrate() — the function `jobs migrate`, the local stack
// and the tests call — so a deployment gets exactly the schema the runtime was tested against,
// applied under the same advisory lock. A thrown error fails the custom resource, and with it
// the deployment, before either service starts (both depend on this resource).
//
// After the migrations it creates or updates the services' own role (runtime/db/app-role.ts) from
// the app secret, so the services never connect as the master user.
//
// The secret comes from the AWS Parameters and Secrets Lambda extension over localhost, so the
// bundle carries no AWS SDK. Bundled by NodejsFunction (esbuild, ESM) with runtime/db/migrations
// copied beside index.mjs, where defaultMigrationsDir() finds it, and the ERP's own migrations
// (migrations/app) as app-migrations/, where defaultAppMigrationsDir() does: migrate() applies
// them after the platform's, and the services' role then gets row access to their tables.

import { databaseUrlFromEnv, ENV } from '../config/env.ts';
import { APP_SCHEMAS, ensureAppRole, type AppRole } from '../db/app-role.ts';
import { migrate, type MigrateResult } from '../db/migrate.ts';
import { createPool } from '../db/pool.ts';
import { isAuthenticationFailure, isDatabaseUnavailable } from '../db/unavailable.ts';

/** The custom resource's properties (lib/schema-bootstrap.ts sets them). */
export interface BootstrapProperties {
  /** ARN of the RDS-generated secret ({host, port, username, password, dbname}): the master user, who migrates. */
  DatabaseSecretArn: string;
  /** ARN of the services' secret (same shape): the role the bootstrap creates for them. Absent: no app role (older stacks). */
  AppSecretArn?: string;
  /** Hash of runtime/db/migrations and migrations/app: a changed folder changes the property, so CloudFormation sends an Update and the migrations run again. */
  MigrationsHash: string;
}

export interface BootstrapEvent {
  RequestType: 'Create' | 'Update' | 'Delete';
  PhysicalResourceId?: string;
  ResourceProperties: BootstrapProperties & { ServiceToken?: string };
}

export interface BootstrapResponse {
  PhysicalResourceId: string;
  Data?: { Applied: string; AppliedCount: number; AlreadyApplied: number; AppRole?: string };
}

/** One physical resource for the life of the stack: an Update never looks like a replacement, so CloudFormation never sends a Delete for the old one. */
export const SCHEMA_PHYSICAL_ID = 'erp-jobs-schema';

export interface BootstrapDeps {
  /** The migrations hash this function was deployed with (ENV.migrationsHash, set by lib/schema-bootstrap.ts); absent in older stacks. */
  bundledMigrationsHash?: string;
  readSecret(arn: string): Promise<string>;
  /** The connection URL from the secret JSON; the services build theirs the same way. */
  databaseUrl(secretJson: string): string;
  /** Migrate as the master user, then create or update the services' role when one is given. */
  runMigrations(url: string, appRole?: AppRole, opts?: { migrate: boolean }): Promise<MigrateResult>;
  log(msg: string): void;
}

export function createBootstrapHandler(deps: BootstrapDeps) {
  return async function onEvent(event: BootstrapEvent): Promise<BootstrapResponse> {
    if (event.RequestType === 'Delete') {
      // Removing the stack or this resource must never drop the jobs schema or its data.
      deps.log('delete: leaving the schema in place');
      return { PhysicalResourceId: event.PhysicalResourceId ?? SCHEMA_PHYSICAL_ID };
    }
    const wanted = event.ResourceProperties?.MigrationsHash;
    // A rollback: CloudFormation asks for the previous release's schema while this function is
    // still the new release's (it rolls back after this resource). Migrations only add, and the
    // previous release runs on the newer schema, so there is nothing to undo; migrating again here
    // failed the rollback the same way the deploy had failed (UPDATE_ROLLBACK_FAILED). The
    // services' role still gets its password from the secret the rollback names.
    const rollback = event.RequestType === 'Update' && !!deps.bundledMigrationsHash && !!wanted && wanted !== deps.bundledMigrationsHash;
    const arn = event.ResourceProperties?.DatabaseSecretArn;
    if (!arn) throw new Error('schema bootstrap: the custom resource has no DatabaseSecretArn property');
    if (rollback)
      deps.log(`update to migrations ${wanted}, not this bundle's ${deps.bundledMigrationsHash}: a rollback; the schema stays as it is`);
    else deps.log(`${event.RequestType.toLowerCase()}: migrations ${event.ResourceProperties.MigrationsHash ?? '(no hash)'}`);
    const url = deps.databaseUrl(await deps.readSecret(arn));
    const appArn = event.ResourceProperties.AppSecretArn;
    const appRole = appArn ? appRoleFromSecret(await deps.readSecret(appArn), appArn) : undefined;
    const result = await deps.runMigrations(url, appRole, { migrate: !rollback });
    deps.log(`applied ${result.applied.length} migration(s) [${result.applied.join(', ')}], ${result.alreadyApplied} already applied`);
    if (appRole) deps.log(`services' role ${appRole.username}: row access to ${APP_SCHEMAS.join(', ')}, password from its secret`);
    return {
      PhysicalResourceId: SCHEMA_PHYSICAL_ID,
      Data: {
        Applied: result.applied.join(','),
        AppliedCount: result.applied.length,
        AlreadyApplied: result.alreadyApplied,
        ...(appRole ? { AppRole: appRole.username } : {}),
      },
    };
  };
}

/** The role name and password from the app secret's JSON; the error names the secret, never its contents. */
export function appRoleFromSecret(secretJson: string, arn: string): AppRole {
  let s: Record<string, unknown>;
  try {
    s = JSON.parse(secretJson) as Record<string, unknown>;
  } catch {
    throw new Error(`schema bootstrap: the app secret ${arn} is not JSON (expected {username, password, …})`);
  }
  if (typeof s.username !== 'string' || typeof s.password !== 'string' || !s.username || !s.password) {
    throw new Error(`schema bootstrap: the app secret ${arn} lacks a username or password`);
  }
  return { username: s.username, password: s.password };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** GetSecretValue through the Parameters and Secrets extension (it listens once the function's init is done). */
export async function readSecretFromExtension(arn: string, env: Record<string, string | undefined> = process.env): Promise<string> {
  const port = env.PARAMETERS_SECRETS_EXTENSION_HTTP_PORT ?? '2773';
  const url = `http://localhost:${port}/secretsmanager/get?secretId=${encodeURIComponent(arn)}`;
  let lastError: unknown;
  for (let attempt = 1; attempt <= 5; attempt++) {
    try {
      const res = await fetch(url, { headers: { 'X-Aws-Parameters-Secrets-Token': env.AWS_SESSION_TOKEN ?? '' } });
      if (!res.ok) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`);
      const body = (await res.json()) as { SecretString?: string };
      if (!body.SecretString) throw new Error('the secret has no SecretString');
      return body.SecretString;
    } catch (err) {
      lastError = err;
      await sleep(500 * attempt);
    }
  }
  throw new Error(
    `schema bootstrap: reading the database secret ${arn} through the Parameters and Secrets extension failed: ${String((lastError as Error)?.message ?? lastError)}`,
  );
}

/**
 * migrate() on a one-connection pool, retried for a minute while the database is unreachable:
 * a new function ENI or an instance finishing its first start can refuse the first connection,
 * and a Multi-AZ failover can reset it half-way. Each migration runs in its own transaction
 * under the advisory lock, so a retry starts where the cut left off; any other error fails the
 * deploy at once with its message.
 */
export async function migrateAt(
  url: string,
  opts: {
    log?: (msg: string) => void;
    dir?: string;
    appDir?: string;
    connectAttempts?: number;
    retryDelayMs?: number;
    appRole?: AppRole;
    /** false: only the services' role (a rollback's call). */
    migrate?: boolean;
  } = {},
): Promise<MigrateResult> {
  const log = opts.log ?? console.log;
  const attempts = opts.connectAttempts ?? 6;
  for (let attempt = 1; ; attempt++) {
    const pool = createPool({
      url,
      max: 1,
      applicationName: 'erp-jobs-bootstrap',
      onError: (err) => log(`database connection dropped: ${err.message}`),
    });
    try {
      await pool.query('SELECT 1');
      const result =
        opts.migrate === false
          ? { applied: [], alreadyApplied: 0 }
          : await migrate(pool, { log, ...(opts.dir ? { dir: opts.dir } : {}), ...(opts.appDir ? { appDir: opts.appDir } : {}) });
      // After the migrations, so the grants cover every table they created.
      if (opts.appRole) await ensureAppRole(pool, opts.appRole);
      return result;
    } catch (err) {
      if (!isDatabaseUnavailable(err) || isAuthenticationFailure(err)) throw err;
      if (attempt >= attempts)
        throw new Error(`schema bootstrap: the database was unreachable for ${attempt} attempts: ${(err as Error).message}`, {
          cause: err,
        });
      log(`attempt ${attempt}: database unreachable (${(err as Error).message}); retrying`);
      await sleep(opts.retryDelayMs ?? 10_000);
    } finally {
      await pool.end().catch(() => undefined);
    }
  }
}

function bootstrapLog(msg: string): void {
  console.log(`[schema-bootstrap] ${msg}`);
}

/** The Lambda entry point (`index.handler` in the bundle). */
export const handler = createBootstrapHandler({
  ...(process.env[ENV.migrationsHash] ? { bundledMigrationsHash: process.env[ENV.migrationsHash] } : {}),
  readSecret: (arn) => readSecretFromExtension(arn),
  // Verified TLS: the stack points DATABASE_CA_FILE at the Lambda runtime's Amazon CA bundle.
  databaseUrl: (secretJson) =>
    databaseUrlFromEnv({ [ENV.databaseSecret]: secretJson, [ENV.databaseCaFile]: process.env[ENV.databaseCaFile] }),
  runMigrations: (url, appRole, o) => migrateAt(url, { log: bootstrapLog, ...(appRole ? { appRole } : {}), ...o }),
  log: bootstrapLog,
});
