// The per-environment config and its checks: every environment resolves, the job timings go
// through the worker's own rules, the connection budget fails synth naming the knob, and an
// unknown or missing environment name lists the valid ones.

import { execFile } from 'node:child_process';
import { readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { App } from 'aws-cdk-lib';
import { describe, expect, it } from 'vitest';
import { ConfigError, RECEIVE_HEADROOM, workerConnections } from '../../runtime/config/rules.ts';
import { buildJobPlatform } from '../../lib/app.ts';
import {
  BOOTSTRAP_CONNECTIONS,
  checkEnvironment,
  connectionBudget,
  ENVIRONMENT_NAMES,
  ENVIRONMENTS,
  estimatedMaxConnections,
  IDLE_IN_TRANSACTION_TIMEOUT_SECONDS,
  queueAgeBelowJobRuns,
  resolveConfig,
  withOverrides,
} from '../../lib/config.ts';
import { REPO_ROOT } from '../../lib/paths.ts';
import { JOB_DEFINITIONS } from '../../runtime/handlers/index.ts';
import { CDK_JSON_CONTEXT, environment, TEST_ALARM_EMAIL, TEST_CERTIFICATE_ARN, testOutdir, withChanges } from './support.ts';

const run = promisify(execFile);

describe('environment config', () => {
  it.each(ENVIRONMENT_NAMES)(
    '%s resolves and passes every rule (with a certificate and an on-call address on the command line where they are required)',
    (name) => {
      const plain = ENVIRONMENTS[name].api.allowPlainHttp;
      const resolved = resolveConfig(name, undefined, {
        apiCertificateArn: plain ? undefined : TEST_CERTIFICATE_ARN,
        alarmEmails: plain ? undefined : TEST_ALARM_EMAIL,
      });
      expect({ ...resolved, api: { ...resolved.api, certificateArn: undefined }, alarms: { ...resolved.alarms, emails: [] } }).toEqual({
        ...ENVIRONMENTS[name],
        api: { ...ENVIRONMENTS[name].api, certificateArn: undefined },
        alarms: { ...ENVIRONMENTS[name].alarms, emails: [] },
      });
    },
  );

  it('lists the valid environments for an unknown name', () => {
    expect(() => resolveConfig('qa')).toThrow('Unknown environment "qa": -c env=<name> must be one of: dev, staging, prod');
    // Prototype keys are not environments.
    expect(() => resolveConfig('toString')).toThrow(/must be one of: dev, staging, prod/);
  });

  it('lists the valid environments when none is given', () => {
    expect(() => resolveConfig(undefined)).toThrow(
      'No environment given: run with -c env=<name>, where <name> is one of: dev, staging, prod',
    );
  });

  it('bin/app.ts exits non-zero with the list for an unknown env', async () => {
    const err = await run('npx', ['tsx', 'bin/app.ts'], {
      cwd: REPO_ROOT,
      env: { ...process.env, CDK_CONTEXT_JSON: JSON.stringify({ env: 'qa' }) },
    }).catch((e: { code: number; stderr: string }) => e);
    expect((err as { code: number }).code).toBe(1);
    expect((err as { stderr: string }).stderr).toContain('Unknown environment "qa": -c env=<name> must be one of: dev, staging, prod');
  });

  it('bin/app.ts synthesizes an environment the way `cdk synth` runs it (no credentials)', async () => {
    const outdir = testOutdir();
    const env: Record<string, string | undefined> = {
      ...process.env,
      // The CLI passes cdk.json's context (the feature flags) with the command line's.
      CDK_CONTEXT_JSON: JSON.stringify({
        ...CDK_JSON_CONTEXT,
        env: 'staging',
        apiCertificateArn: TEST_CERTIFICATE_ARN,
        alarmEmails: TEST_ALARM_EMAIL,
      }),
      CDK_OUTDIR: outdir,
      CDK_VALIDATION: 'false',
    };
    for (const k of Object.keys(env)) if (/^AWS_(ACCESS|SECRET|SESSION|PROFILE)/.test(k)) delete env[k];
    await run('npx', ['tsx', 'bin/app.ts'], { cwd: REPO_ROOT, env });
    const files = await readdir(outdir);
    expect(files).toEqual(
      expect.arrayContaining(['ErpJobs-staging-Data.template.json', 'ErpJobs-staging-Services.template.json', 'manifest.json']),
    );
  }, 60_000);

  it('bin/app.ts refuses prod without a certificate, naming both ways to give one (what `npx cdk synth -c env=prod` prints)', async () => {
    const err = await run('npx', ['tsx', 'bin/app.ts'], {
      cwd: REPO_ROOT,
      env: { ...process.env, CDK_CONTEXT_JSON: JSON.stringify({ env: 'prod' }) },
    }).catch((e: { code: number; stderr: string }) => e);
    expect((err as { code: number }).code).toBe(1);
    const stderr = (err as { stderr: string }).stderr;
    expect(stderr).toContain('[api-certificate] the prod API must serve HTTPS');
    expect(stderr).toContain('set api.certificateArn in lib/config.ts (prod)');
    expect(stderr).toContain('-c apiCertificateArn=arn:aws:acm:<region>:<account>:certificate/<id>');
    // And the on-call address lib/config.ts ships with, which would page nobody.
    expect(stderr).toContain(
      '[alarm-email] alarms.emails has erp-jobs-oncall@example.com, on a domain reserved for examples, where mail is never delivered: every alarm of prod would page nobody; set alarms.emails in lib/config.ts (prod) or pass -c alarmEmails=oncall@your-company.com[,…]',
    );
  });

  it('alarms reach a person: an address that cannot deliver is refused, and staging and prod need one; -c alarmEmails gives them', () => {
    const violations = (emails: string[], env: 'dev' | 'prod' = 'prod') =>
      checkEnvironment({ ...environment(env), alarms: { ...environment(env).alarms, emails } })
        .filter((v) => v.rule === 'alarm-email')
        .map((v) => v.message);
    expect(violations(['oncall@acme-erp.com', 'erp-pager@acme.pagerduty.com'])).toEqual([]);
    for (const reserved of ['a@example.com', 'a@mail.example.org', 'a@corp.example', 'a@x.invalid', 'a@erp.test', 'a@mail.localhost'])
      expect(violations([reserved]), reserved).toEqual([expect.stringContaining('on a domain reserved for examples')]);
    expect(violations(['oncall'])).toEqual([expect.stringContaining('"oncall", which is not an e-mail address')]);
    expect(violations([])).toEqual([
      expect.stringContaining('alarms.emails and alarms.httpsEndpoints are empty: prod keeps its data (terminationProtection)'),
    ]);
    expect(violations([], 'dev')).toEqual([]); // dev's alarms may go nowhere
    const given = withOverrides(ENVIRONMENTS.prod, { alarmEmails: ' oncall@acme-erp.com, finance-ops@acme-erp.com ' });
    expect(given.alarms.emails).toEqual(['oncall@acme-erp.com', 'finance-ops@acme-erp.com']);
    expect(ENVIRONMENTS.prod.alarms.emails).toEqual(['erp-jobs-oncall@example.com']); // unchanged
  });

  it("a pager's HTTPS endpoint counts as a person reached; one that is not https:// or on an example domain is refused; -c alarmEndpoints gives them", () => {
    const violations = (emails: string[], httpsEndpoints: string[]) =>
      checkEnvironment({ ...environment('prod'), alarms: { ...environment('prod').alarms, emails, httpsEndpoints } })
        .filter((v) => v.rule === 'alarm-email' || v.rule === 'alarm-endpoint')
        .map((v) => `[${v.rule}] ${v.message}`);
    expect(violations([], ['https://events.pagerduty.com/integration/abc/enqueue'])).toEqual([]);
    expect(violations(['oncall@acme-erp.com'], ['http://hooks.acme-erp.com/page', 'https://pager.example.com/x', 'not a url'])).toEqual([
      expect.stringContaining('[alarm-endpoint] alarms.httpsEndpoints has "http://hooks.acme-erp.com/page", which is not an https:// URL'),
      expect.stringContaining('[alarm-endpoint] alarms.httpsEndpoints has https://pager.example.com, on a domain reserved for examples'),
      expect.stringContaining('[alarm-endpoint] alarms.httpsEndpoints has "not a url", which is not an https:// URL'),
    ]);
    expect(violations([], [])).toEqual([expect.stringContaining('alarms.emails and alarms.httpsEndpoints are empty')]);
    const given = withOverrides(ENVIRONMENTS.prod, { alarmEndpoints: ' https://events.pagerduty.com/integration/abc/enqueue ,' });
    expect(given.alarms.httpsEndpoints).toEqual(['https://events.pagerduty.com/integration/abc/enqueue']);
  });

  it('a misspelt value or key that tsx runs unchecked is refused, naming the value and the rule (platform engineer trial)', () => {
    // Before, each of these synthesized with exit 0: prod's database and queues with
    // DeletionPolicy Delete, no deletion protection, single-AZ; containers that refused to start.
    const prod = environment('prod');
    const rules = (c: unknown) => checkEnvironment(c as typeof prod).map((v) => `[${v.rule}] ${v.message}`);
    expect(rules({ ...prod, database: { ...prod.database, removal: 'Snapshot' } })).toEqual([
      `[database-removal] database.removal = "Snapshot" must be 'snapshot' (keep a final snapshot) or 'destroy'`,
    ]);
    const { deletionProtection: _d, multiAz: _m, ...misspelt } = prod.database;
    expect(rules({ ...prod, database: { ...misspelt, deletionProtecton: true, multiAZ: true } })).toEqual([
      '[database-flag] database.deletionProtection = undefined must be true or false (a misspelt key leaves it unset, and the database without it)',
      '[database-flag] database.multiAz = undefined must be true or false (a misspelt key leaves it unset, and the database without it)',
    ]);
    expect(rules({ ...prod, queues: { ...prod.queues, httpClient: 'Node' } })).toEqual([
      '[sqs-http-client] queues.httpClient = "Node" must be one of platform, node (JOBS_SQS_HTTP_CLIENT: the containers refuse any other and would not start), or left unset',
    ]);
    expect(rules({ ...prod, alarms: { ...prod.alarms, databaseCpuPercent: 0.8 } })).toEqual([
      '[database-cpu-percent] alarms.databaseCpuPercent = 0.8 must be a percent from 1 to 100 (0.8 reads as a fraction: for 80 %, write 80)',
    ]);
    expect(rules({ ...prod, alarms: { ...prod.alarms, deadLetterOldestMessageAgeSeconds: 20 * 86_400 } })).toEqual([
      expect.stringMatching(
        /^\[dlq-age-alarm\] alarms\.deadLetterOldestMessageAgeSeconds = 1728000 must be at least 60 and below the DLQ's retention/,
      ),
    ]);
    expect(rules({ ...prod, accessLogRetentionDays: 0 })).toEqual([
      expect.stringMatching(/^\[access-log-retention\] accessLogRetentionDays = 0/),
    ]);
    expect(rules({ ...prod, logRetentionDays: 45 })).toEqual([
      '[log-retention] logRetentionDays = 45 must be one of 7, 14, 30, 90, 180, 365',
    ]);
    // Review finding: below 200 % the old tasks, protected, leave the new ones no room; nobody retires.
    expect(rules({ ...prod, worker: { ...prod.worker, deploymentMaxPercent: 150 } })).toEqual([
      expect.stringMatching(/^\[worker-deployment-max-percent\] worker\.deploymentMaxPercent = 150 must be 200/),
    ]);
  });

  it('prod keeps its data: Multi-AZ, deletion protection, backups, termination protection, snapshots', () => {
    const p = ENVIRONMENTS.prod;
    expect(p.database).toMatchObject({ multiAz: true, deletionProtection: true, removal: 'snapshot' });
    expect(p.database.backupRetentionDays).toBeGreaterThanOrEqual(7);
    expect(p.terminationProtection).toBe(true);
  });
});

describe("job timings at synth (the worker's rules)", () => {
  it("fails synth with the rule's message when the heartbeat does not fit the lease", () => {
    const broken = withChanges('dev', (c) => {
      c.jobTimings.heartbeatSeconds = 30; // lease 60: a heartbeat must be ≤ 20
    });
    expect(() => buildJobPlatform(new App({ outdir: testOutdir() }), broken)).toThrow(ConfigError);
    expect(() => buildJobPlatform(new App({ outdir: testOutdir() }), broken)).toThrow(
      /lib\/config\.ts \(dev\): invalid job platform configuration:\n {2}- \[heartbeat-within-lease\] heartbeatSeconds = 30 must be at most 1\/3 of leaseSeconds = 60/,
    );
  });

  it('fails synth when SQS could dead-letter a job the database still retries', () => {
    const broken = withChanges('prod', (c) => {
      c.jobTimings.maxReceiveCount = c.jobTimings.maxAttempts + RECEIVE_HEADROOM - 1;
    });
    expect(() => resolveConfig('prod', { prod: broken })).toThrow(
      /\[receive-count-above-attempts\] maxReceiveCount = 7 must be at least maxAttempts \+ 3 = 8/,
    );
  });

  it('fails synth when the drain leaves no time for the release before ECS kills the task', () => {
    const broken = withChanges('staging', (c) => {
      c.jobTimings.drainSeconds = 115;
    });
    expect(() => resolveConfig('staging', { staging: broken })).toThrow(
      /\[drainSeconds-in-range\] drainSeconds = 115 must be between 0 and 110/,
    );
  });
});

describe('database', () => {
  it('fails synth when the password rotation period is out of range', () => {
    const broken = withChanges('prod', (c) => {
      c.database.passwordRotationDays = 0;
    });
    expect(() => resolveConfig('prod', { prod: broken })).toThrow(
      /\[password-rotation-days\] database\.passwordRotationDays = 0 must be a whole number of days from 1 to 365/,
    );
  });
});

describe('queues', () => {
  it('fails synth when the DLQ keeps messages no longer than the queue', () => {
    const broken = withChanges('dev', (c) => {
      c.queues.deadLetterRetentionDays = c.queues.retentionDays;
    });
    expect(() => resolveConfig('dev', { dev: broken })).toThrow(
      /\[dlq-retention-above-queue\] queues\.deadLetterRetentionDays = 4 must be longer than queues\.retentionDays = 4/,
    );
  });
});

describe('worker', () => {
  it("fails synth for a prefetch that is not a whole number from 0 to the worker's limit", () => {
    for (const bad of [-1, 2.5, 1001]) {
      const broken = withChanges('dev', (c) => (c.worker.prefetch = bad));
      expect(() => resolveConfig('dev', { dev: broken })).toThrow(
        new RegExp(`\\[worker-prefetch\\] worker\\.prefetch = ${bad} must be a whole number from 0 to 1000`),
      );
    }
    expect(() => resolveConfig('dev', { dev: withChanges('dev', (c) => (c.worker.prefetch = 490)) })).not.toThrow();
  });
});

describe('stuck jobs', () => {
  it('fails synth for a stuck threshold that is not a whole number of seconds from 1 to a week', () => {
    for (const [key, bad] of [
      ['runningSeconds', 0],
      ['pendingSeconds', 1.5],
      ['runningSeconds', 8 * 86_400],
    ] as const) {
      const broken = withChanges('dev', (c) => (c.alarms.stuckJobs[key] = bad));
      expect(() => resolveConfig('dev', { dev: broken })).toThrow(
        new RegExp(`\\[stuck-jobs-threshold\\] alarms\\.stuckJobs\\.${key} = ${bad} must be a whole number of seconds from 1 to 604800`),
      );
    }
  });
});

describe('the queue-age alarms and the longest healthy job', () => {
  // A running job keeps its SQS message, so the job queue's oldest-message alarm counts its run
  // and its waits: a type that may run longer than the threshold allows would page on-call at
  // every healthy run.
  it.each(ENVIRONMENT_NAMES)("%s: every registered job type's healthy run fits under alarms.queueOldestMessageAgeSeconds", (name) => {
    expect(queueAgeBelowJobRuns(ENVIRONMENTS[name], JOB_DEFINITIONS).map((v) => v.message)).toEqual([]);
  });

  it('names the type, what its message lives through, the threshold and the fix for a type that would page at every run', () => {
    const fourHourCosting = [{ type: 'inventory.cost-full', expectedMaxSeconds: 4 * 3600 }, { type: 'ledger.post' }];
    expect(queueAgeBelowJobRuns(ENVIRONMENTS.prod, fourHourCosting)).toEqual([
      {
        rule: 'queue-age-alarm-above-longest-job',
        message: expect.stringMatching(
          /^prod: a healthy job of type inventory\.cost-full keeps its SQS message up to 17100 s — its run \(expectedMaxSeconds = 14400\), its wait for a worker \(alarms\.stuckJobs\.pendingSeconds = 900\) and its wait to be due \(at most 1800\) — but alarms\.queueOldestMessageAgeSeconds = 7200, .*raise alarms\.queueOldestMessageAgeSeconds to at least 17100 in lib\/config\.ts/,
        ),
      },
    ]);
  });

  it('fails synth when the stuck threshold (the healthy run of a type without expectedMaxSeconds) and the waits outlast the alarm', () => {
    const broken = withChanges('dev', (c) => (c.alarms.stuckJobs.runningSeconds = c.alarms.queueOldestMessageAgeSeconds));
    expect(() => resolveConfig('dev', { dev: broken })).toThrow(
      /\[queue-age-alarm-above-longest-job\] dev: a healthy job of type \(any without expectedMaxSeconds\) keeps its SQS message up to 9900 s — its run \(alarms\.stuckJobs\.runningSeconds = 7200\).* but alarms\.queueOldestMessageAgeSeconds = 7200/,
    );
  });
});

describe('job retention', () => {
  it('fails synth for a retention the runtime would refuse, naming the knob, the value and the rule', () => {
    for (const [key, bad, rule] of [
      ['finishedDays', 0, /from 1 to 36500 \(a finished job is kept at least a day\)/],
      ['poisonDays', 7, /from 14 to 36500 \(the DLQ may hold a poison message up to 14 days/],
      ['operatorActionDays', 2.5, /from 30 to 36500/],
      ['discardedDeadDays', 40_000, /from 1 to 36500/],
    ] as const) {
      const broken = withChanges('dev', (c) => (c.jobRetention[key] = bad));
      expect(() => resolveConfig('dev', { dev: broken })).toThrow(
        new RegExp(`jobRetention\\.${key} = ${bad} must be a whole number of days`),
      );
      expect(() => resolveConfig('dev', { dev: broken })).toThrow(rule);
    }
    // Years of job history, as an auditor may ask for: allowed.
    expect(() => resolveConfig('dev', { dev: withChanges('dev', (c) => (c.jobRetention.finishedDays = 7 * 365)) })).not.toThrow();
  });
});

describe('connection budget', () => {
  it('counts worker and API tasks at their deployment peak, each pool, and the bootstrap', () => {
    const c = ENVIRONMENTS.prod;
    const b = connectionBudget(c);
    const workerPeak = Math.ceil((c.worker.maxTasks * c.worker.deploymentMaxPercent) / 100);
    const apiPeak = Math.ceil((c.api.maxTasks * c.api.deploymentMaxPercent) / 100);
    expect(b.total).toBe(workerPeak * workerConnections(c.jobTimings.concurrency) + apiPeak * c.api.poolSize + BOOTSTRAP_CONNECTIONS);
    expect(b.total).toBeLessThanOrEqual(b.allowed);
    expect(b.allowed).toBeLessThan(b.maxConnections);
  });

  it.each(ENVIRONMENT_NAMES)('%s stays within 80 %% of max_connections', (name) => {
    const b = connectionBudget(ENVIRONMENTS[name]);
    expect(b.total).toBeLessThanOrEqual(b.allowed);
  });

  it('estimates max_connections from the instance memory (t4g.micro ≈ 100)', () => {
    expect(estimatedMaxConnections({ ...ENVIRONMENTS.dev.database, instanceClass: 't4g.micro' })).toBe(101);
    expect(estimatedMaxConnections({ ...ENVIRONMENTS.dev.database, maxConnections: 500 })).toBe(500);
  });

  it('fails synth naming the knobs when the workers would exhaust the database', () => {
    const broken = withChanges('dev', (c) => {
      c.worker.maxTasks = 10; // 20 tasks at deploy peak × 8 connections = 160 > 80
    });
    let message = '';
    try {
      buildJobPlatform(new App({ outdir: testOutdir() }), broken);
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toContain('[connection-budget] the services may open 181 connections');
    expect(message).toContain('worker.maxTasks = 10');
    expect(message).toContain('t4g.micro allows about 101 (max_connections) of which 80 % = 80 may be planned');
    expect(message).toContain(
      'lower worker.maxTasks, jobTimings.concurrency, api.maxTasks or api.poolSize, or choose a larger database.instanceClass',
    );
  });

  it('fails synth for an instance class whose memory it does not know', () => {
    const broken = withChanges('dev', (c) => {
      c.database.instanceClass = 'x9.huge';
    });
    expect(() => resolveConfig('dev', { dev: broken })).toThrow(
      /\[instance-class-known\] database\.instanceClass = x9\.huge is not in INSTANCE_MEMORY_GIB/,
    );
  });
});

describe('HTTPS (issue 12)', () => {
  it.each(['staging', 'prod'] as const)(
    '%s refuses to synthesize without a certificate, naming lib/config.ts and -c apiCertificateArn',
    (name) => {
      expect(ENVIRONMENTS[name].api.allowPlainHttp).toBe(false);
      expect(() => resolveConfig(name)).toThrow(
        /\[api-certificate\] .*set api\.certificateArn in lib\/config\.ts .* or pass -c apiCertificateArn=arn:aws:acm:/,
      );
      expect(() => buildJobPlatform(new App({ outdir: testOutdir() }), ENVIRONMENTS[name])).toThrow(/\[api-certificate\]/);
    },
  );

  it('dev may stay on plain HTTP', () => {
    expect(ENVIRONMENTS.dev.api).toMatchObject({ allowPlainHttp: true });
    expect(ENVIRONMENTS.dev.api.certificateArn).toBeUndefined();
  });

  it("the command line's certificate wins over the config's, and must be an ACM certificate ARN", () => {
    const inConfig = withChanges('prod', (c) => (c.api.certificateArn = 'arn:aws:acm:eu-west-1:222222222222:certificate/from-config'));
    expect(resolveConfig('prod', { prod: inConfig }).api.certificateArn).toBe('arn:aws:acm:eu-west-1:222222222222:certificate/from-config');
    expect(resolveConfig('prod', { prod: inConfig }, { apiCertificateArn: TEST_CERTIFICATE_ARN }).api.certificateArn).toBe(
      TEST_CERTIFICATE_ARN,
    );
    expect(() => resolveConfig('prod', undefined, { apiCertificateArn: 'not-an-arn' })).toThrow(
      /\[api-certificate-arn\] api\.certificateArn = not-an-arn is not an ACM certificate ARN/,
    );
  });
});

describe('database (issue 12)', () => {
  it('pins a minor version and refuses a major-only one', () => {
    for (const name of ENVIRONMENT_NAMES) expect(ENVIRONMENTS[name].database.engineVersion).toMatch(/^\d+\.\d+$/);
    const broken = withChanges('dev', (c) => (c.database.engineVersion = '17'));
    expect(() => resolveConfig('dev', { dev: broken })).toThrow(
      /\[database-engine-version\] database\.engineVersion = 17 must pin a minor version/,
    );
  });

  it('refuses malformed or overlapping backup and maintenance windows', () => {
    const bad = withChanges('dev', (c) => (c.database.backupWindow = '3am'));
    expect(() => resolveConfig('dev', { dev: bad })).toThrow(/\[database-backup-window\] database\.backupWindow = 3am must be hh:mm-hh:mm/);
    const overlap = withChanges('dev', (c) => {
      c.database.backupWindow = '03:00-03:30';
      c.database.maintenanceWindow = 'sun:03:15-sun:03:45';
    });
    expect(() => resolveConfig('dev', { dev: overlap })).toThrow(/\[database-windows-overlap\]/);
    const acrossMidnight = withChanges('dev', (c) => {
      c.database.backupWindow = '23:45-00:15';
      c.database.maintenanceWindow = 'mon:00:00-mon:00:30';
    });
    expect(() => resolveConfig('dev', { dev: acrossMidnight })).toThrow(/\[database-windows-overlap\]/);
    const short = withChanges('dev', (c) => (c.database.backupWindow = '02:00-02:10'));
    expect(() => resolveConfig('dev', { dev: short })).toThrow(/must last at least 30 minutes/);
  });

  it('refuses an idle-in-transaction timeout that could cut a healthy job (below the stuck-job threshold or ten leases)', () => {
    for (const name of ENVIRONMENT_NAMES)
      expect(ENVIRONMENTS[name].database.idleInTransactionTimeoutSeconds).toBe(IDLE_IN_TRANSACTION_TIMEOUT_SECONDS);
    const broken = withChanges('prod', (c) => (c.database.idleInTransactionTimeoutSeconds = 300));
    expect(() => resolveConfig('prod', { prod: broken })).toThrow(
      /\[database-idle-in-transaction\] database\.idleInTransactionTimeoutSeconds = 300 must be a whole number ≥ 3600/,
    );
  });
});
