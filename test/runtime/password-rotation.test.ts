// The services' database password rotated by the rotation function (runtime/rotation/handler.ts),
// step by step as Secrets Manager calls it, against a real PostgreSQL; Secrets Manager's versions
// and stages played by aws-sdk-client-mock. What holds: the secret alternates between two users;
// the one the services were using keeps working; a worker running jobs through two rotations
// finishes each job once; every step can run again; a rotation that fails leaves the secret and
// the services as they were; the schema bootstrap after a rotation undoes nothing.
import { randomUUID } from 'node:crypto';
import {
  DescribeSecretCommand,
  GetSecretValueCommand,
  PutSecretValueCommand,
  SecretsManagerClient,
  UpdateSecretVersionStageCommand,
} from '@aws-sdk/client-secrets-manager';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureAppRole } from '../../runtime/db/app-role.ts';
import { DatabaseCredentialSource, credentialsFromSecretJson } from '../../runtime/db/credentials.ts';
import { createPool } from '../../runtime/db/pool.ts';
import { alternateUser, type RotationEvent, rotate } from '../../runtime/rotation/handler.ts';
import { createPlatform, type Platform, waitFor } from '../support/platform.ts';

const APP_ARN = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:erp-jobs-app-AbCdEf';
const MASTER_ARN = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:erp-jobs-master-GhIjKl';
const USER = `rot2_app_${Math.random().toString(36).slice(2, 8)}`;

/** Secrets Manager's versions and staging labels, as much as a rotation function sees of them. */
class FakeSecrets {
  readonly versions = new Map<string, Map<string, { value?: string; stages: string[] }>>();

  put(arn: string, value: string, stages = ['AWSCURRENT'], id: string = randomUUID()): string {
    const versions: Map<string, { value?: string; stages: string[] }> = this.versions.get(arn) ?? new Map();
    this.versions.set(arn, versions);
    for (const v of versions.values()) v.stages = v.stages.filter((s) => !stages.includes(s));
    const existing = versions.get(id);
    versions.set(id, { value: value ?? existing?.value, stages: [...new Set([...(existing?.stages ?? []), ...stages])] });
    return id;
  }

  current(arn: string): string {
    return [...this.versions.get(arn)!.values()].find((v) => v.stages.includes('AWSCURRENT'))!.value!;
  }

  rotationEnabled = true;
  /** Secrets whose values GetSecretValue refuses (a resource policy that no longer admits the caller). */
  readonly denied = new Set<string>();

  /**
   * What RotateSecret does before it calls the function: a new version id, labelled AWSPENDING,
   * with no value yet. Refused while another version is pending and not current (a rotation that
   * did not finish), as Secrets Manager refuses it.
   */
  startRotation(arn: string): string {
    const versions = this.versions.get(arn)!;
    if ([...versions.values()].some((v) => v.stages.includes('AWSPENDING') && !v.stages.includes('AWSCURRENT'))) {
      throw Object.assign(new Error('A previous rotation isn’t complete. That rotation will be reattempted.'), {
        name: 'InvalidRequestException',
      });
    }
    const id = randomUUID();
    for (const v of versions.values()) v.stages = v.stages.filter((s) => s !== 'AWSPENDING');
    versions.set(id, { stages: ['AWSPENDING'] });
    return id;
  }

  mock() {
    const sm = mockClient(SecretsManagerClient);
    const notFound = (what: string) => Object.assign(new Error(`${what} not found`), { name: 'ResourceNotFoundException' });
    sm.on(DescribeSecretCommand).callsFake(async (i: { SecretId: string }) => ({
      ...(this.rotationEnabled ? { RotationEnabled: true } : {}),
      VersionIdsToStages: Object.fromEntries([...this.versions.get(i.SecretId)!].map(([id, v]) => [id, [...v.stages]])),
    }));
    sm.on(GetSecretValueCommand).callsFake(async (i: { SecretId: string; VersionStage?: string; VersionId?: string }) => {
      if (this.denied.has(i.SecretId)) {
        throw Object.assign(
          new Error(
            `User: arn:aws:sts::123456789012:assumed-role/x is not authorized to perform: secretsmanager:GetSecretValue on resource: ${i.SecretId}`,
          ),
          {
            name: 'AccessDeniedException',
          },
        );
      }
      const versions = this.versions.get(i.SecretId);
      if (!versions) throw notFound(i.SecretId);
      const found = [...versions].find(
        ([id, v]) => (!i.VersionId || id === i.VersionId) && (!i.VersionStage || v.stages.includes(i.VersionStage)),
      );
      if (!found || found[1].value === undefined) throw notFound(`${i.SecretId} ${i.VersionStage ?? ''} ${i.VersionId ?? ''}`);
      return { SecretString: found[1].value, VersionId: found[0] };
    });
    sm.on(PutSecretValueCommand).callsFake(
      async (i: { SecretId: string; ClientRequestToken: string; SecretString: string; VersionStages: string[] }) => {
        this.put(i.SecretId, i.SecretString, i.VersionStages, i.ClientRequestToken);
        return {};
      },
    );
    sm.on(UpdateSecretVersionStageCommand).callsFake(
      async (i: { SecretId: string; VersionStage: string; MoveToVersionId?: string; RemoveFromVersionId?: string }) => {
        const versions = this.versions.get(i.SecretId)!;
        if (i.RemoveFromVersionId) {
          const from = versions.get(i.RemoveFromVersionId)!;
          from.stages = from.stages.filter((s) => s !== i.VersionStage);
        }
        if (i.MoveToVersionId) {
          for (const v of versions.values()) v.stages = v.stages.filter((s) => s !== i.VersionStage);
          versions.get(i.MoveToVersionId)!.stages.push(i.VersionStage);
        }
        return {};
      },
    );
    return sm;
  }
}

describe('the rotation function, alternating users', () => {
  let p: Platform;
  const secrets = new FakeSecrets();
  let sm: ReturnType<FakeSecrets['mock']>;
  const logs: string[] = [];
  const sqlUrl = (s: { username: string; password: string; host: string; port: number; dbname: string }) =>
    `postgres://${encodeURIComponent(s.username)}:${encodeURIComponent(s.password)}@${s.host}:${s.port}/${s.dbname}`;
  const deps = () => ({
    sm: new SecretsManagerClient({ region: 'eu-west-1' }),
    masterSecretArn: MASTER_ARN,
    log: (m: string) => logs.push(m),
    urlFor: (json: string) => sqlUrl(JSON.parse(json)),
  });
  const steps: RotationEvent['Step'][] = ['createSecret', 'setSecret', 'testSecret', 'finishSecret'];
  /** Secrets Manager's RotateSecret: each step in order (`twice`: each step called again, as a retry would). */
  const rotateNow = async (o: { twice?: boolean } = {}) => {
    const token = secrets.startRotation(APP_ARN);
    for (const Step of steps) {
      await rotate({ SecretId: APP_ARN, ClientRequestToken: token, Step }, deps());
      if (o.twice) await rotate({ SecretId: APP_ARN, ClientRequestToken: token, Step }, deps());
    }
    return JSON.parse(secrets.current(APP_ARN)) as { username: string; password: string };
  };
  const logsIn = async (username: string, password: string) => {
    const pool = createPool({ url: sqlUrl({ ...base, username, password }), max: 1, applicationName: 'jobs-test login' });
    try {
      return (await pool.query<{ u: string }>('SELECT current_user AS u')).rows[0]!.u === username;
    } catch {
      return false;
    } finally {
      await pool.end();
    }
  };
  let base: { host: string; port: number; dbname: string; engine: string; username: string; password: string };

  beforeAll(async () => {
    p = await createPlatform({ timings: { leaseSeconds: 3, heartbeatSeconds: 0.5, visibilityTimeoutSeconds: 4 } });
    const u = new URL(p.db.url);
    base = {
      engine: 'postgres',
      host: u.hostname,
      port: Number(u.port),
      dbname: u.pathname.slice(1),
      username: USER,
      password: 'initial-password-0123456789',
    };
    secrets.put(
      MASTER_ARN,
      JSON.stringify({ ...base, username: decodeURIComponent(u.username), password: decodeURIComponent(u.password) }),
    );
    secrets.put(APP_ARN, JSON.stringify(base));
    // What the schema bootstrap does at the first deployment.
    await ensureAppRole(p.db.pool, { username: USER, password: base.password });
    sm = secrets.mock();
  });
  afterAll(async () => {
    sm.restore();
    await p.close();
    const c = createPool({ url: p.db.url, max: 1, applicationName: 'jobs-test cleanup' });
    for (const role of [alternateUser(USER), USER]) {
      await c.query(`DROP OWNED BY ${role}`).catch(() => undefined);
      await c.query(`DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
    }
    await c.end();
  });

  it('alternates the user, leaves the one in use working, and keeps a worker finishing every job once through two rotations', async () => {
    const source = new DatabaseCredentialSource({
      initial: { user: USER, password: base.password },
      read: async () => credentialsFromSecretJson(secrets.current(APP_ARN), APP_ARN),
      log: { info: () => undefined, warn: () => undefined },
      source: APP_ARN,
      minIntervalMs: 100,
    });
    const pool = createPool({ url: p.db.url, max: 7, applicationName: 'jobs-test rotated worker', credentials: source });
    const w = p.worker({ pool, workerId: 'rotated' });
    w.start();
    const batch = async (tag: string) => {
      const jobs = await p.client.enqueueNow(
        Array.from({ length: 8 }, (_, i) => ({ type: 'ledger.post', payload: { batch: `${tag}-${i}`, entries: 2 } })),
      );
      await waitFor(
        async () => (await Promise.all(jobs.map((j) => p.store.get(j.job.id)))).every((j) => j?.state === 'succeeded'),
        15_000,
        `${tag} done`,
      );
    };
    const asUser = async () => (await pool.query<{ u: string }>('SELECT current_user AS u')).rows[0]!.u;
    try {
      await batch('RT-0');
      expect(await asUser()).toBe(USER);

      const first = await rotateNow();
      expect(first.username).toBe(alternateUser(USER));
      // The user the tasks hold still logs in: nothing they have was taken away.
      expect(await logsIn(USER, base.password)).toBe(true);
      expect(await logsIn(first.username, first.password)).toBe(true);
      await batch('RT-1');
      // The hourly read: new connections log in as the other user, with the platform's row access.
      await source.refresh('periodic');
      await p.db.pool.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'jobs-test rotated worker' AND datname = current_database()",
      );
      await waitFor(async () => (await asUser().catch(() => '')) === first.username, 5000, 'connections as the other user');
      await batch('RT-2');

      // The second rotation gives the first user a new password; the task (on the other one) never notices.
      const second = await rotateNow({ twice: true });
      expect(second.username).toBe(USER);
      expect(second.password).not.toBe(base.password);
      expect(await logsIn(USER, base.password)).toBe(false);
      expect(await logsIn(first.username, first.password)).toBe(true);
      await batch('RT-3');

      const { rows } = await p.db.pool.query<{ n: number; batches: number }>(
        "SELECT count(*)::int AS n, count(DISTINCT batch)::int AS batches FROM ledger_entries WHERE batch LIKE 'RT-%'",
      );
      expect(rows[0]).toEqual({ n: 64, batches: 32 });
      // A rotation again while a step had already run (the retried steps above) changed nothing twice.
      expect(logs.some((l) => /pending version .* exists/.test(l))).toBe(true);
      expect(logs.some((l) => /already logs in with the pending password/.test(l))).toBe(true);
      expect(logs.some((l) => /is already current; nothing to do/.test(l))).toBe(true);
    } finally {
      await w.stop(1);
      await pool.end();
    }
  }, 60_000);

  it('ensureAppRole with the current version, as the schema bootstrap runs it after a rotation, leaves the other user its password', async () => {
    const current = JSON.parse(secrets.current(APP_ARN)) as { username: string; password: string };
    const other = alternateUser(current.username);
    const previous = [...secrets.versions.get(APP_ARN)!.values()]
      .map((v) => (v.value ? (JSON.parse(v.value) as { username: string; password: string }) : undefined))
      .filter((v) => v?.username === other)
      .at(-1)!;
    expect(await logsIn(other, previous.password)).toBe(true);
    await ensureAppRole(p.db.pool, { username: current.username, password: current.password });
    expect(await logsIn(other, previous.password)).toBe(true);
    expect(await logsIn(current.username, current.password)).toBe(true);
  });

  it('a rotation whose test fails throws and leaves the secret and the user in use as they were; the runbook starts it over', async () => {
    const before = secrets.current(APP_ARN);
    const inUse = JSON.parse(before) as { username: string; password: string };
    const pendingUser = alternateUser(inUse.username);
    const token = secrets.startRotation(APP_ARN);
    // The pending user's logins go nowhere (a route the test cannot take), the master's work: setSecret
    // changes the other user's password, then testSecret fails.
    const broken = {
      ...deps(),
      urlFor: (json: string) => {
        const s = JSON.parse(json);
        return sqlUrl(s.username === pendingUser ? { ...s, port: 1 } : s);
      },
    };
    await rotate({ SecretId: APP_ARN, ClientRequestToken: token, Step: 'createSecret' }, broken);
    await rotate({ SecretId: APP_ARN, ClientRequestToken: token, Step: 'setSecret' }, broken);
    logs.length = 0;
    await expect(rotate({ SecretId: APP_ARN, ClientRequestToken: token, Step: 'testSecret' }, broken)).rejects.toThrow(
      /^testSecret: .*(ECONNREFUSED|connect)/,
    );
    // The function's log names the step that failed, the secret, the version and the cause: where the runbook starts.
    expect(logs).toEqual([
      expect.stringMatching(new RegExp(`^testSecret FAILED for ${APP_ARN} version ${token}: .*(ECONNREFUSED|connect)`)),
    ]);
    // What the services use is as it was: the current version, and its user's login.
    expect(secrets.current(APP_ARN)).toBe(before);
    expect(await logsIn(inUse.username, inUse.password)).toBe(true);
    // Secrets Manager refuses a new rotation while this one is unfinished; the runbook's way out:
    // take AWSPENDING off the failed version, rotate again.
    expect(() => secrets.startRotation(APP_ARN)).toThrow(/previous rotation isn’t complete/);
    await new SecretsManagerClient({ region: 'eu-west-1' }).send(
      new UpdateSecretVersionStageCommand({ SecretId: APP_ARN, VersionStage: 'AWSPENDING', RemoveFromVersionId: token }),
    );
    const after = await rotateNow();
    expect(after.username).toBe(pendingUser);
    expect(await logsIn(after.username, after.password)).toBe(true);
    expect(await logsIn(inUse.username, inUse.password)).toBe(true);
  });

  it('a master secret the function may no longer read fails setSecret, named in the log, and takes nothing from the services', async () => {
    const before = secrets.current(APP_ARN);
    const token = secrets.startRotation(APP_ARN);
    await rotate({ SecretId: APP_ARN, ClientRequestToken: token, Step: 'createSecret' }, deps());
    secrets.denied.add(MASTER_ARN);
    logs.length = 0;
    try {
      await expect(rotate({ SecretId: APP_ARN, ClientRequestToken: token, Step: 'setSecret' }, deps())).rejects.toMatchObject({
        name: 'AccessDeniedException',
        message: expect.stringMatching(/^setSecret: .*secretsmanager:GetSecretValue on resource: .*master/),
      });
      expect(logs).toEqual([expect.stringMatching(/^setSecret FAILED for .* version .*: AccessDeniedException: .*master/)]);
    } finally {
      secrets.denied.delete(MASTER_ARN);
    }
    expect(secrets.current(APP_ARN)).toBe(before);
    // Access restored, Secrets Manager's retry of the step goes through and the rotation finishes.
    for (const Step of ['setSecret', 'testSecret', 'finishSecret'] as const)
      await rotate({ SecretId: APP_ARN, ClientRequestToken: token, Step }, deps());
    const after = JSON.parse(secrets.current(APP_ARN)) as { username: string; password: string };
    expect(await logsIn(after.username, after.password)).toBe(true);
  });

  it('refuses a step for a version that is not pending, or on a secret without rotation, naming it', async () => {
    const stray = randomUUID();
    await expect(rotate({ SecretId: APP_ARN, ClientRequestToken: stray, Step: 'finishSecret' }, deps())).rejects.toThrow(
      new RegExp(`^finishSecret: .*version ${stray} is not a version of this secret`),
    );
    secrets.rotationEnabled = false;
    try {
      await expect(rotate({ SecretId: APP_ARN, ClientRequestToken: stray, Step: 'createSecret' }, deps())).rejects.toThrow(
        /rotation is not enabled on this secret/,
      );
    } finally {
      secrets.rotationEnabled = true;
    }
  });

  it('names the other user of the pair', () => {
    expect(alternateUser('erp_jobs_app')).toBe('erp_jobs_app_clone');
    expect(alternateUser('erp_jobs_app_clone')).toBe('erp_jobs_app');
  });
});
