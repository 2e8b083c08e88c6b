// The services stack: the schema bootstrap and its ordering, the containers' environment and
// secrets, the worker's stop timeout, scaling and grants, the API's load balancer (HTTP in dev,
// HTTPS with a certificate), access logs and health check.

import { Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { ENV, RDS_CA_BUNDLE_PATH } from '../../runtime/config/env.ts';
import { RELEASE_MARGIN_SECONDS } from '../../runtime/config/rules.ts';
import { STUCK_ENV } from '../../runtime/config/stuck-thresholds.ts';
import { metricNamespace } from '../../runtime/observability/metric-names.ts';
import { ENVIRONMENTS, withOverrides } from '../../lib/config.ts';
import { LAMBDA_AMAZON_CA_BUNDLE, migrationsHash } from '../../lib/schema-bootstrap.ts';
import { API_HEALTH_CHECK_PATH, API_PORT } from '../../lib/services/api.ts';
import { PG_OPTIONS_VARIABLE, pgOptions, SERVICE_USER, TMP_PATH } from '../../lib/services/container-config.ts';
import { WORKER_HEALTH_CHECK_SCRIPT } from '../../lib/services/worker.ts';
import { idOf, only, resourcesOfType, synthConfig, synthEnv, TEST_CERTIFICATE_ARN, withChanges } from './support.ts';

const dev = synthEnv('dev');
const CERT = 'arn:aws:acm:eu-central-1:111122223333:certificate/00000000-0000-0000-0000-000000000000';
const https = synthConfig(withChanges('dev', (c) => (c.api.certificateArn = CERT)));
const t = dev.servicesTemplate;
const c = ENVIRONMENTS.dev;

type Container = {
  Name: string;
  Environment?: { Name: string; Value: unknown }[];
  Secrets?: { Name: string; ValueFrom: unknown }[];
  StopTimeout?: number;
  PortMappings?: unknown[];
  LinuxParameters?: { InitProcessEnabled?: boolean };
};
const containers = Object.values(resourcesOfType(t, 'AWS::ECS::TaskDefinition')).flatMap(
  (r) => (r.Properties as { ContainerDefinitions: Container[] }).ContainerDefinitions,
);
const container = (name: string) => {
  const found = containers.find((x) => x.Name === name);
  if (!found) throw new Error(`no container ${name}`);
  return found;
};
const envOf = (name: string) => Object.fromEntries((container(name).Environment ?? []).map((e) => [e.Name, e.Value]));
const secretsOf = (name: string) => Object.fromEntries((container(name).Secrets ?? []).map((e) => [e.Name, e.ValueFrom]));

type QueueLike = { node: { defaultChild?: unknown } };
/** The export a services-stack statement names a data-stack queue's ARN by. */
const arnExport = (q: QueueLike) => `ExportsOutputFnGetAtt${idOf(q.node.defaultChild as never)}Arn`;
/** The SQS actions statements allow on one queue, whichever statement (CDK merges those sharing actions) grants them. */
const allowedOn = (statements: { Action: string | string[]; Resource: unknown }[], q: QueueLike): string[] => [
  ...new Set(
    statements
      .filter((s) => [s.Resource].flat().some((r) => JSON.stringify(r).includes(arnExport(q))))
      .flatMap((s) => [s.Action].flat())
      .sort(),
  ),
];

describe('password rotation', () => {
  const fnId = idOf(dev.services.passwordRotation.function);

  it("rotates the services' secret every passwordRotationDays with our function, after the schema is current", () => {
    const schedule = only(t, 'AWS::SecretsManager::RotationSchedule');
    expect(JSON.stringify(schedule.props.SecretId)).toMatch(/DatabaseAppSecretAttachment/);
    expect(schedule.props.RotationLambdaARN).toEqual({ 'Fn::GetAtt': [fnId, 'Arn'] });
    expect(schedule.props.RotationRules).toEqual({ ScheduleExpression: `rate(${ENVIRONMENTS.dev.database.passwordRotationDays} days)` });
    expect(JSON.stringify(schedule.dependsOn)).toContain('SchemaBootstrapSchema');
  });

  it('runs in the VPC with the master secret named, and lets Secrets Manager of this account alone invoke it', () => {
    const fn = resourcesOfType(t, 'AWS::Lambda::Function')[fnId]!.Properties as Record<string, any>;
    expect(fn.VpcConfig.SubnetIds).toBeDefined();
    expect(JSON.stringify(fn.Environment.Variables.MASTER_SECRET_ARN)).toContain('DatabaseInstanceSecretAttachment');
    expect(fn.Environment.Variables[ENV.databaseCaFile]).toBe('/var/runtime/ca-cert.pem');
    const permissions = Object.values(resourcesOfType(t, 'AWS::Lambda::Permission'))
      .map((p) => p.Properties as Record<string, unknown>)
      .filter((p) => JSON.stringify(p.FunctionName).includes(fnId));
    expect(permissions).toEqual([
      expect.objectContaining({
        Principal: 'secretsmanager.amazonaws.com',
        Action: 'lambda:InvokeFunction',
        SourceAccount: { Ref: 'AWS::AccountId' },
      }),
    ]);
  });

  it("may write the services' secret and read the master's, nothing else of Secrets Manager but the unused random-password call", () => {
    const roleId = idOf(dev.services.passwordRotation.function.role!);
    const statements = Object.values(resourcesOfType(t, 'AWS::IAM::Policy'))
      .filter((p) => JSON.stringify((p.Properties as { Roles: unknown }).Roles).includes(roleId))
      .flatMap(
        (p) =>
          (p.Properties as { PolicyDocument: { Statement: { Action: string | string[]; Resource: unknown }[] } }).PolicyDocument.Statement,
      )
      .filter((s) => JSON.stringify(s.Action).includes('secretsmanager'));
    const on = (needle: string) =>
      statements
        .filter((s) => JSON.stringify(s.Resource).includes(needle))
        .flatMap((s) => [s.Action].flat())
        .sort();
    expect(on('DatabaseAppSecretAttachment')).toEqual([
      'secretsmanager:DescribeSecret',
      'secretsmanager:GetSecretValue',
      'secretsmanager:PutSecretValue',
      'secretsmanager:UpdateSecretVersionStage',
    ]);
    expect(on('DatabaseInstanceSecretAttachment')).toEqual(['secretsmanager:DescribeSecret', 'secretsmanager:GetSecretValue']);
    expect(statements.filter((s) => s.Resource === '*').flatMap((s) => [s.Action].flat())).toEqual(['secretsmanager:GetRandomPassword']);
  });
});

describe('schema bootstrap', () => {
  const cr = only(t, 'Custom::JobsSchema');

  it("is a custom resource carrying the migrations hash, the master secret and the services' secret", () => {
    expect(cr.props.MigrationsHash).toBe(migrationsHash());
    expect(cr.props.MigrationsHash).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(cr.props.DatabaseSecretArn)).toContain('DatabaseInstanceSecretAttachment');
    // It creates the services' role from this one (runtime/db/app-role.ts).
    expect(JSON.stringify(cr.props.AppSecretArn)).toContain('DatabaseAppSecretAttachment');
    expect(JSON.stringify(cr.props.DatabaseEndpoint)).toContain('EndpointAddress');
  });

  it('changes the hash when a migration changes', async () => {
    const { mkdtemp, cp, appendFile } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { MIGRATIONS_DIR } = await import('../../lib/paths.ts');
    const dir = await mkdtemp(join(tmpdir(), 'mig-hash-'));
    await cp(MIGRATIONS_DIR, dir, { recursive: true });
    expect(migrationsHash(dir)).toBe(migrationsHash());
    await appendFile(join(dir, '9999_new.sql'), 'SELECT 1;\n');
    expect(migrationsHash(dir)).not.toBe(migrationsHash());
  });

  it("changes the hash when the ERP's own migrations (migrations/app) change", async () => {
    const { mkdtemp, writeFile } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { MIGRATIONS_DIR } = await import('../../lib/paths.ts');
    const appDir = await mkdtemp(join(tmpdir(), 'app-mig-hash-'));
    // None yet: the platform folder's hash alone, so adding the folder redeployed nothing.
    expect(migrationsHash(MIGRATIONS_DIR, appDir)).toBe(migrationsHash(MIGRATIONS_DIR, join(appDir, 'missing')));
    await writeFile(join(appDir, '0001_invoices.sql'), 'CREATE TABLE erp.invoices (id bigint PRIMARY KEY);\n');
    const withApp = migrationsHash(MIGRATIONS_DIR, appDir);
    expect(withApp).not.toBe(migrationsHash(MIGRATIONS_DIR, join(appDir, 'missing')));
    await writeFile(join(appDir, '0001_invoices.sql'), 'CREATE TABLE erp.invoices (id bigint PRIMARY KEY, note text);\n');
    expect(migrationsHash(MIGRATIONS_DIR, appDir)).not.toBe(withApp);
  });

  it('runs the bundled handler inside the VPC on Node 22 with time for a long migration', () => {
    const fnId = idOf(dev.services.bootstrap.function);
    const fn = resourcesOfType(t, 'AWS::Lambda::Function')[fnId]!.Properties as Record<string, any>;
    expect(fn.Handler).toBe('index.handler');
    expect(fn.Runtime).toBe('nodejs22.x');
    expect(fn.Timeout).toBe(600);
    // Verified TLS to the database with the runtime's Amazon CA bundle (RDS's CAs among them).
    expect(fn.Environment.Variables[ENV.databaseCaFile]).toBe(LAMBDA_AMAZON_CA_BUNDLE);
    // The hash its bundle carries, the resource's: a rollback's Update names another (handler.ts).
    expect(fn.Environment.Variables[ENV.migrationsHash]).toBe(cr.props.MigrationsHash);
    const appSubnets = dev.data.network.vpc.privateSubnets.map((sn) => idOf(sn.node.findChild('Subnet')));
    const subnetRefs = JSON.stringify(fn.VpcConfig.SubnetIds);
    for (const id of appSubnets) expect(subnetRefs).toContain(id);
    expect(fn.VpcConfig.SecurityGroupIds).toHaveLength(1);
    // The custom resource is served by the Provider framework that invokes this function.
    expect(JSON.stringify(cr.props.ServiceToken)).toContain('SchemaBootstrapProviderframeworkonEvent');
  });

  it("is, with the password rotation, the only one that may read the master secret; the services' execution roles read their own secret only", () => {
    const policies = resourcesOfType(t, 'AWS::IAM::Policy');
    const readers = Object.entries(policies)
      .filter(([, p]) => JSON.stringify(p.Properties).includes('DatabaseInstanceSecretAttachment'))
      .map(([, p]) => JSON.stringify((p.Properties as { Roles: unknown }).Roles));
    expect(readers).toHaveLength(2);
    expect(readers.some((r) => r.includes('SchemaBootstrapRole'))).toBe(true);
    expect(readers.some((r) => r.includes('PasswordRotationRole'))).toBe(true);
    const appReaders = Object.values(policies)
      .filter((p) => JSON.stringify(p.Properties).includes('DatabaseAppSecretAttachment'))
      .map((p) => JSON.stringify((p.Properties as { Roles: unknown }).Roles));
    expect(appReaders.some((r) => r.includes('ApiTaskExecutionRole'))).toBe(true);
    expect(appReaders.some((r) => r.includes('WorkerTaskExecutionRole'))).toBe(true);
  });

  it('starts both services only after the schema is current (DependsOn the custom resource)', () => {
    const services = resourcesOfType(t, 'AWS::ECS::Service');
    expect(Object.keys(services)).toHaveLength(2);
    for (const [id, svc] of Object.entries(services)) {
      expect(svc.DependsOn, id).toEqual(expect.arrayContaining([cr.id]));
    }
  });

  it('waits for its own database ingress rule before running', () => {
    const ingress = Object.entries(resourcesOfType(t, 'AWS::EC2::SecurityGroupIngress')).find(
      ([, r]) => (r.Properties as { Description?: string }).Description === 'PostgreSQL from the schema bootstrap',
    );
    expect(ingress).toBeDefined();
    expect(cr.dependsOn).toContain(ingress![0]);
  });
});

describe('containers', () => {
  it("get the job timings and queue URLs under the runtime's variable names", () => {
    for (const name of ['api', 'worker']) {
      const env = envOf(name);
      expect(env).toMatchObject({
        [ENV.leaseSeconds]: String(c.jobTimings.leaseSeconds),
        [ENV.heartbeatSeconds]: String(c.jobTimings.heartbeatSeconds),
        [ENV.visibilityTimeoutSeconds]: String(c.jobTimings.visibilityTimeoutSeconds),
        [ENV.maxAttempts]: String(c.jobTimings.maxAttempts),
        [ENV.maxReceiveCount]: String(c.jobTimings.maxReceiveCount),
        [ENV.backoffBaseSeconds]: String(c.jobTimings.backoffBaseSeconds),
        [ENV.backoffMaxSeconds]: String(c.jobTimings.backoffMaxSeconds),
        [ENV.concurrency]: String(c.jobTimings.concurrency),
        [ENV.drainSeconds]: String(c.jobTimings.drainSeconds),
        [ENV.metricsNamespace]: metricNamespace('dev'),
        [ENV.region]: { Ref: 'AWS::Region' },
        // Both services judge stuck jobs: the worker's JobsStuck metric, the API's on-call route.
        [STUCK_ENV.runningSeconds]: String(c.alarms.stuckJobs.runningSeconds),
        [STUCK_ENV.pendingSeconds]: String(c.alarms.stuckJobs.pendingSeconds),
        // jobRetention: the API decides a new job's keep, the workers' pruner deletes what is past it.
        JOBS_KEEP_FINISHED_DAYS: String(c.jobRetention.finishedDays),
        JOBS_KEEP_DISCARDED_DEAD_DAYS: String(c.jobRetention.discardedDeadDays),
        JOBS_KEEP_POISON_DAYS: String(c.jobRetention.poisonDays),
        JOBS_KEEP_OPERATOR_ACTIONS_DAYS: String(c.jobRetention.operatorActionDays),
      });
      expect(JSON.stringify(env[ENV.queueUrl])).toContain('QueuesJobQueue');
      expect(JSON.stringify(env[ENV.dlqUrl])).toContain('QueuesDeadLetterQueue');
    }
    expect(envOf('api')).toMatchObject({ [ENV.port]: String(API_PORT), [ENV.apiPoolSize]: String(c.api.poolSize) });
  });

  it("both get both lanes' queue URLs: the bulk lane as JOBS_QUEUE_URL / JOBS_DLQ_URL, the urgent lane beside them (plain environment)", () => {
    const ref = (q: { node: { defaultChild?: unknown } }) => ({
      'Fn::ImportValue': expect.stringContaining(`ExportsOutputRef${idOf(q.node.defaultChild as never)}`),
    });
    const lanes = dev.data.queues.lanes;
    // The names the runtime reads (runtime/config/env.ts).
    expect([ENV.urgentQueueUrl, ENV.urgentDlqUrl]).toEqual(['JOBS_URGENT_QUEUE_URL', 'JOBS_URGENT_DLQ_URL']);
    for (const name of ['api', 'worker']) {
      const env = envOf(name);
      expect(env[ENV.queueUrl], name).toEqual(ref(lanes.bulk.queue));
      expect(env[ENV.dlqUrl], name).toEqual(ref(lanes.bulk.deadLetterQueue));
      expect(env.JOBS_URGENT_QUEUE_URL, name).toEqual(ref(lanes.urgent.queue));
      expect(env.JOBS_URGENT_DLQ_URL, name).toEqual(ref(lanes.urgent.deadLetterQueue));
      expect(Object.keys(secretsOf(name)).filter((k) => k.includes('QUEUE') || k.includes('DLQ'))).toEqual([]);
    }
  });

  it('give the worker JOBS_PREFETCH only when the environment sets worker.prefetch (else the worker uses its concurrency)', () => {
    expect(envOf('worker')).not.toHaveProperty(ENV.prefetch);
    const deep = synthConfig(withChanges('dev', (x) => (x.worker.prefetch = 200)));
    const workerEnv = Object.values(resourcesOfType(deep.servicesTemplate, 'AWS::ECS::TaskDefinition'))
      .flatMap((r) => (r.Properties as { ContainerDefinitions: Container[] }).ContainerDefinitions)
      .find((x) => x.Name === 'worker')!.Environment!;
    expect(workerEnv).toContainEqual({ Name: ENV.prefetch, Value: '200' });
  });

  it("give both JOBS_SQS_HTTP_CLIENT only when the environment sets queues.httpClient (else the platform's own client)", () => {
    for (const name of ['api', 'worker']) expect(envOf(name), name).not.toHaveProperty(ENV.sqsHttpClient);
    const viaNode = synthConfig(withChanges('dev', (x) => (x.queues.httpClient = 'node')));
    const containers = Object.values(resourcesOfType(viaNode.servicesTemplate, 'AWS::ECS::TaskDefinition')).flatMap(
      (r) => (r.Properties as { ContainerDefinitions: Container[] }).ContainerDefinitions,
    );
    for (const name of ['api', 'worker'])
      expect(containers.find((x) => x.Name === name)!.Environment, name).toContainEqual({ Name: ENV.sqsHttpClient, Value: 'node' });
  });

  it('get the database secret, the API token and the operator token as ECS secrets, never as plain environment', () => {
    const forbidden: string[] = [
      ENV.databaseSecret,
      ENV.databaseUrl,
      ENV.apiToken,
      ENV.apiOperatorToken,
      'PGPASSWORD',
      'DATABASE_PASSWORD',
    ];
    for (const name of ['api', 'worker']) {
      const { [ENV.databaseSecretArn]: arn, ...env } = envOf(name);
      for (const k of forbidden) expect(env[k], `${name} ${k}`).toBeUndefined();
      const values = JSON.stringify(Object.values(env));
      expect(values).not.toMatch(/secretsmanager|Secret|resolve:/);
      // The app secret's ARN (a reference, not its value): the task reads the secret again on rotation.
      expect(JSON.stringify(arn), name).toMatch(/^\{"Fn::ImportValue":"[^"]*DatabaseAppSecretAttachment[^"]*"\}$/);
    }
    expect(Object.keys(secretsOf('api')).sort()).toEqual([ENV.apiToken, ENV.apiOperatorToken, ENV.databaseSecret].sort());
    expect(Object.keys(secretsOf('worker'))).toEqual([ENV.databaseSecret]);
    // The services' own role's secret, whole (no JSON key suffix): the runtime reads host, port,
    // user, password, dbname. Never the master user's: that one only migrates.
    for (const name of ['api', 'worker']) {
      const ref = JSON.stringify(secretsOf(name)[ENV.databaseSecret]);
      expect(ref, name).toContain('DatabaseAppSecretAttachment');
      expect(ref, name).not.toContain('DatabaseInstanceSecretAttachment');
      expect(ref, name).not.toMatch(/:password|:SecretString/);
    }
    expect(JSON.stringify(secretsOf('api')[ENV.apiToken])).toContain('ApiTokenSecret');
    // The operator token is its own secret of the data stack (imported), not the API token's.
    expect(JSON.stringify(secretsOf('api')[ENV.apiOperatorToken])).toContain('OperatorTokenSecret');
    expect(JSON.stringify(secretsOf('api')[ENV.apiOperatorToken])).not.toContain('ApiTokenSecret');
    expect(JSON.stringify(secretsOf('api')[ENV.apiOperatorToken])).toContain('Fn::ImportValue');
  });

  it("lets each task role read the services' database secret, and no other secret, to follow a rotation", () => {
    for (const name of ['api', 'worker'] as const) {
      const roleId = idOf(dev.services[name].service.taskDefinition.taskRole);
      const reads = Object.values(resourcesOfType(t, 'AWS::IAM::Policy'))
        .filter((p) => JSON.stringify((p.Properties as { Roles: unknown }).Roles).includes(roleId))
        .flatMap(
          (p) => (p.Properties as { PolicyDocument: { Statement: { Action: string[]; Resource: unknown }[] } }).PolicyDocument.Statement,
        )
        .filter((s) => JSON.stringify(s.Action).includes('secretsmanager'));
      expect(reads, name).toHaveLength(1);
      expect(reads[0]!.Action).toEqual(['secretsmanager:DescribeSecret', 'secretsmanager:GetSecretValue']);
      expect(JSON.stringify(reads[0]!.Resource), name).toMatch(/^\{"Fn::ImportValue":"[^"]*DatabaseAppSecretAttachment[^"]*"\}$/);
    }
  });

  it("lets only the API's execution role read the operator token", () => {
    const apiExec = idOf(dev.services.api.service.taskDefinition.obtainExecutionRole());
    const readers = Object.values(resourcesOfType(t, 'AWS::IAM::Policy'))
      .filter((p) => JSON.stringify((p.Properties as { PolicyDocument: unknown }).PolicyDocument).includes('OperatorTokenSecret'))
      .map((p) => JSON.stringify((p.Properties as { Roles: unknown }).Roles));
    expect(readers).toHaveLength(1);
    expect(readers[0]).toContain(apiExec);
  });

  it('runs both under an init process that forwards SIGTERM', () => {
    expect(container('api').LinuxParameters?.InitProcessEnabled).toBe(true);
    expect(container('worker').LinuxParameters?.InitProcessEnabled).toBe(true);
  });

  it('gives the worker a stop timeout covering the drain and the release', () => {
    expect(container('worker').StopTimeout).toBe(c.jobTimings.drainSeconds + RELEASE_MARGIN_SECONDS);
    const prod = ENVIRONMENTS.prod.jobTimings;
    expect(prod.drainSeconds + RELEASE_MARGIN_SECONDS).toBeLessThanOrEqual(120);
  });

  it('builds two images from two Dockerfiles', async () => {
    const { readFileSync } = await import('node:fs');
    const { join } = await import('node:path');
    const manifest = JSON.parse(readFileSync(join(dev.assembly.directory, `${dev.services.artifactId}.assets.json`), 'utf8')) as {
      dockerImages: Record<string, { source: { directory: string; dockerFile: string; platform?: string } }>;
    };
    const images = Object.values(manifest.dockerImages)
      .map((i) => i.source.dockerFile)
      .sort();
    expect(images).toEqual(['docker/api.Dockerfile', 'docker/worker.Dockerfile']);
    for (const i of Object.values(manifest.dockerImages)) expect(i.source.platform).toBe('linux/amd64');
  });

  it("put the jobs command in the worker image for operators' one-off tasks (docs/deploy.md#operator-access)", async () => {
    const { readFileSync } = await import('node:fs');
    const dockerfile = readFileSync('docker/worker.Dockerfile', 'utf8');
    expect(dockerfile).toMatch(/npx tsx scripts\/bundle\.ts cli/);
    const finalStage = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
    expect(finalStage).toContain('/src/dist/cli/jobs.mjs');
    // No local stack settings file to look for in a task; its settings come from the task definition.
    expect(finalStage).toMatch(/ENV JOBS_LOCAL_ENV=0/);
    // The build context lets the entry in (the rest of bin/ stays out).
    expect(readFileSync('.dockerignore', 'utf8')).toMatch(/^!bin\/jobs\.ts$/m);
  });

  it("bundle the ERP's own migrations (migrations/app) into both images, where jobs migrate and /readyz find them", async () => {
    const { readFileSync } = await import('node:fs');
    for (const name of ['api', 'worker']) {
      const dockerfile = readFileSync(`docker/${name}.Dockerfile`, 'utf8');
      const buildStage = dockerfile.slice(0, dockerfile.lastIndexOf('\nFROM '));
      // Copied before the bundle script runs (it copies them to dist/<name>/app-migrations).
      expect(buildStage.indexOf('COPY migrations ./migrations')).toBeGreaterThan(-1);
      expect(buildStage.indexOf('COPY migrations ./migrations')).toBeLessThan(buildStage.indexOf('scripts/bundle.ts'));
    }
    expect(readFileSync('.dockerignore', 'utf8')).toMatch(/^!migrations$/m);
  });

  it("verify the database's certificate: both images carry the RDS CA bundle where DATABASE_CA_FILE points", async () => {
    const { readFileSync } = await import('node:fs');
    for (const name of ['api', 'worker']) {
      expect(envOf(name)[ENV.databaseCaFile]).toBe(RDS_CA_BUNDLE_PATH);
      const dockerfile = readFileSync(`docker/${name}.Dockerfile`, 'utf8');
      // In the final stage (after the last FROM), readable by the unprivileged user the service runs as.
      const finalStage = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
      expect(finalStage).toContain(
        `ADD --chmod=644 https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem ${RDS_CA_BUNDLE_PATH}`,
      );
    }
  });

  it('runs tasks in the private subnets without public IPs', () => {
    for (const svc of Object.values(resourcesOfType(t, 'AWS::ECS::Service'))) {
      const net = (svc.Properties as { NetworkConfiguration: { AwsvpcConfiguration: { AssignPublicIp: string; Subnets: unknown } } })
        .NetworkConfiguration.AwsvpcConfiguration;
      expect(net.AssignPublicIp).toBe('DISABLED');
      expect(JSON.stringify(net.Subnets)).toMatch(/appSubnet/);
    }
  });
});

describe('cluster', () => {
  it('has Container Insights on', () => {
    t.hasResourceProperties('AWS::ECS::Cluster', { ClusterSettings: [{ Name: 'containerInsights', Value: 'enabled' }] });
  });
});

describe('worker', () => {
  const policies = resourcesOfType(t, 'AWS::IAM::Policy');
  const taskRoleId = idOf(dev.services.worker.service.taskDefinition.taskRole);
  const statements = Object.values(policies)
    .filter((p) => JSON.stringify((p.Properties as { Roles: unknown }).Roles).includes(taskRoleId))
    .flatMap(
      (p) =>
        (p.Properties as { PolicyDocument: { Statement: { Action: string | string[]; Resource: unknown; Condition?: unknown }[] } })
          .PolicyDocument.Statement,
    );
  const actions = (s: { Action: string | string[] }) => (Array.isArray(s.Action) ? s.Action : [s.Action]);

  it("may consume and publish job messages and send dead letters, on both lanes' queues, nothing wider on SQS", () => {
    const sqs = statements.filter((s) => actions(s).some((a) => a.startsWith('sqs:')));
    const lanes = dev.data.queues.lanes;
    const four = Object.values(lanes).flatMap((l) => [l.queue, l.deadLetterQueue]);
    // Every SQS statement names only those four queues (CDK merges statements that share actions).
    for (const st of sqs)
      for (const r of [st.Resource].flat())
        expect(
          four.some((q) => JSON.stringify(r).includes(arnExport(q))),
          JSON.stringify(r),
        ).toBe(true);
    const consumeAndPublish = [
      'sqs:ChangeMessageVisibility',
      'sqs:DeleteMessage',
      'sqs:GetQueueAttributes',
      'sqs:GetQueueUrl',
      'sqs:ReceiveMessage',
      'sqs:SendMessage',
    ].sort();
    for (const lane of ['bulk', 'urgent'] as const) {
      expect(allowedOn(sqs, lanes[lane].queue), `${lane} job queue`).toEqual(consumeAndPublish);
      expect(allowedOn(sqs, lanes[lane].deadLetterQueue), `${lane} DLQ`).toEqual([
        'sqs:GetQueueAttributes',
        'sqs:GetQueueUrl',
        'sqs:SendMessage',
      ]);
    }
    expect(sqs.flatMap(actions)).not.toContain('sqs:*');
  });

  it("may put metrics only into its environment's namespace", () => {
    const put = statements.find((s) => actions(s).includes('cloudwatch:PutMetricData'));
    expect(put?.Condition).toEqual({ StringEquals: { 'cloudwatch:namespace': metricNamespace('dev') } });
  });

  it("may set task protection on this cluster's tasks only", () => {
    const prot = statements.find((s) => actions(s).includes('ecs:UpdateTaskProtection'));
    expect(actions(prot!).sort()).toEqual(['ecs:GetTaskProtection', 'ecs:UpdateTaskProtection']);
    const clusterId = idOf(dev.services.worker.service.cluster as never);
    expect(JSON.stringify(prot!.Resource)).toContain(`":task/",{"Ref":"${clusterId}"},"/*"`);
  });

  it("may describe this cluster's tasks and services only, to see a newer deployment of its service (and nothing else of ECS)", () => {
    const own = statements.find((s) => actions(s).includes('ecs:DescribeServices'));
    expect(actions(own!).sort()).toEqual(['ecs:DescribeServices', 'ecs:DescribeTasks']);
    const clusterId = idOf(dev.services.worker.service.cluster as never);
    const resources = [own!.Resource].flat().map((r) => JSON.stringify(r));
    expect(resources).toHaveLength(2);
    expect(resources.find((r) => r.includes('":task/"'))).toContain(`":task/",{"Ref":"${clusterId}"},"/*"`);
    expect(resources.find((r) => r.includes('":service/"'))).toContain(`":service/",{"Ref":"${clusterId}"},"/*"`);
    expect(
      statements
        .flatMap(actions)
        .filter((a) => a.startsWith('ecs:'))
        .sort(),
    ).toEqual(['ecs:DescribeServices', 'ecs:DescribeTasks', 'ecs:GetTaskProtection', 'ecs:UpdateTaskProtection']);
  });

  it("scales on visible messages of both lanes ÷ running tasks between the config's bounds", () => {
    const targetId = Object.entries(resourcesOfType(t, 'AWS::ApplicationAutoScaling::ScalableTarget')).find(([, r]) =>
      JSON.stringify((r.Properties as { ResourceId: unknown }).ResourceId).includes(idOf(dev.services.worker.service)),
    )?.[0];
    expect(targetId).toBeDefined();
    t.hasResourceProperties('AWS::ApplicationAutoScaling::ScalableTarget', {
      MinCapacity: c.worker.minTasks,
      MaxCapacity: c.worker.maxTasks,
      ScalableDimension: 'ecs:service:DesiredCount',
      RoleARN: Match.objectLike({
        'Fn::Join': Match.arrayWith([Match.arrayWith([Match.stringLikeRegexp('AWSServiceRoleForApplicationAutoScaling_ECSService')])]),
      }),
      ResourceId: {
        'Fn::Join': [
          '',
          [
            'service/',
            { Ref: idOf(dev.services.worker.service.cluster as never) },
            '/',
            { 'Fn::GetAtt': [idOf(dev.services.worker.service), 'Name'] },
          ],
        ],
      },
    });
    t.hasResourceProperties('AWS::ApplicationAutoScaling::ScalingPolicy', {
      PolicyType: 'TargetTrackingScaling',
      ScalingTargetId: { Ref: targetId },
      TargetTrackingScalingPolicyConfiguration: {
        TargetValue: c.worker.backlogPerTaskTarget,
        ScaleInCooldown: c.worker.scaleInCooldownSeconds,
        ScaleOutCooldown: c.worker.scaleOutCooldownSeconds,
        CustomizedMetricSpecification: {
          Metrics: [
            ...(['urgent', 'bulk'] as const).map((lane) =>
              Match.objectLike({
                Id: lane === 'urgent' ? 'visibleUrgent' : 'visibleBulk',
                ReturnData: false,
                MetricStat: {
                  Stat: 'Sum',
                  Metric: {
                    Namespace: 'AWS/SQS',
                    MetricName: 'ApproximateNumberOfMessagesVisible',
                    Dimensions: [
                      {
                        Name: 'QueueName',
                        Value: {
                          'Fn::ImportValue': Match.stringLikeRegexp(
                            `ExportsOutputFnGetAtt${idOf(dev.data.queues.lanes[lane].queue.node.defaultChild!)}QueueName`,
                          ),
                        },
                      },
                    ],
                  },
                },
              }),
            ),
            // The backlog counts every lane; a lane without a data point counts as empty.
            Match.objectLike({ Id: 'visible', ReturnData: false, Expression: 'FILL(visibleUrgent, 0) + FILL(visibleBulk, 0)' }),
            Match.objectLike({
              Id: 'running',
              ReturnData: false,
              MetricStat: {
                Stat: 'Average',
                Metric: Match.objectLike({ Namespace: 'ECS/ContainerInsights', MetricName: 'RunningTaskCount' }),
              },
            }),
            Match.objectLike({ Id: 'backlogPerTask', ReturnData: true, Expression: 'visible / IF(running > 0, running, 1)' }),
          ],
        },
      },
    });
  });

  it('rolls back a failed deployment and never drops below its running tasks', () => {
    const svc = resourcesOfType(t, 'AWS::ECS::Service')[idOf(dev.services.worker.service)]!.Properties as Record<string, any>;
    expect(svc.DeploymentConfiguration).toMatchObject({
      MinimumHealthyPercent: 100,
      MaximumPercent: c.worker.deploymentMaxPercent,
      DeploymentCircuitBreaker: { Enable: true, Rollback: true },
    });
    expect(svc.LoadBalancers ?? []).toEqual([]);
  });
});

describe('API', () => {
  const apiRoleId = idOf(dev.services.api.service.taskDefinition.taskRole);

  // Its SQS statements (the database secret's read is the previous describe's).
  const apiStatements = () =>
    Object.values(resourcesOfType(t, 'AWS::IAM::Policy'))
      .filter((p) => JSON.stringify((p.Properties as { Roles: unknown }).Roles).includes(apiRoleId))
      .flatMap(
        (p) =>
          (
            p.Properties as {
              PolicyDocument: { Statement: { Effect: string; Action: string | string[]; Resource: unknown; Condition?: unknown }[] };
            }
          ).PolicyDocument.Statement,
      )
      .filter((s) => !JSON.stringify(s.Action).includes('secretsmanager:'));
  const actionsOf = (s: { Action: string | string[] }) => (Array.isArray(s.Action) ? s.Action : [s.Action]);
  const isPutMetrics = (s: { Action: string | string[] }) => actionsOf(s).includes('cloudwatch:PutMetricData');

  it("may put metrics (its database-secret reads) only into its environment's namespace, and nothing else of CloudWatch", () => {
    const put = apiStatements().filter((s) => JSON.stringify(s.Action).includes('cloudwatch:'));
    expect(put).toHaveLength(1);
    expect(actionsOf(put[0]!)).toEqual(['cloudwatch:PutMetricData']);
    expect(put[0]!.Condition).toEqual({ StringEquals: { 'cloudwatch:namespace': metricNamespace('dev') } });
  });

  it("may publish job messages to both lanes, and work both lanes' DLQs for the on-call routes (receive, hold, delete, move back), nothing wider", () => {
    const statements = apiStatements().filter((s) => !isPutMetrics(s));
    const lanes = dev.data.queues.lanes;
    const four = Object.values(lanes).flatMap((l) => [l.queue, l.deadLetterQueue]);
    // Every statement: Allow, named SQS actions (no wildcard), no condition, on those four queues' ARNs only.
    for (const s of statements) {
      expect(s.Effect).toBe('Allow');
      expect(s.Condition).toBeUndefined();
      for (const a of actionsOf(s)) expect(a).toMatch(/^sqs:[A-Za-z]+$/);
      for (const r of [s.Resource].flat())
        expect(
          four.some((q) => JSON.stringify(r).includes(arnExport(q))),
          JSON.stringify(r),
        ).toBe(true);
    }
    for (const lane of ['bulk', 'urgent'] as const) {
      // The job queue: publish (resends and the move's destination need SendMessage there), never consume.
      expect(allowedOn(statements, lanes[lane].queue), `${lane} job queue`).toEqual([
        'sqs:GetQueueAttributes',
        'sqs:GetQueueUrl',
        'sqs:SendMessage',
      ]);
      // The DLQ: consume (look, hold, delete), and SQS's message move task from it (which needs
      // ReceiveMessage, DeleteMessage and GetQueueAttributes on its source); never send to it.
      expect(allowedOn(statements, lanes[lane].deadLetterQueue), `${lane} DLQ`).toEqual(
        [
          'sqs:ChangeMessageVisibility',
          'sqs:DeleteMessage',
          'sqs:GetQueueAttributes',
          'sqs:GetQueueUrl',
          'sqs:ReceiveMessage',
          'sqs:StartMessageMoveTask',
          'sqs:ListMessageMoveTasks',
          'sqs:CancelMessageMoveTask',
        ].sort(),
      );
    }
  });

  it('checks GET /healthz on the task port', () => {
    t.hasResourceProperties('AWS::ElasticLoadBalancingV2::TargetGroup', {
      HealthCheckPath: API_HEALTH_CHECK_PATH,
      Port: API_PORT,
      TargetType: 'ip',
      Matcher: { HttpCode: '200' },
    });
  });

  it('writes access logs to an encrypted, TLS-only, private bucket', () => {
    const bucketId = idOf(dev.services.api.node.findChild('AccessLogs'));
    t.hasResourceProperties('AWS::ElasticLoadBalancingV2::LoadBalancer', {
      Scheme: 'internet-facing',
      LoadBalancerAttributes: Match.arrayWith([
        { Key: 'routing.http.drop_invalid_header_fields.enabled', Value: 'true' },
        { Key: 'access_logs.s3.enabled', Value: 'true' },
        { Key: 'access_logs.s3.bucket', Value: { Ref: bucketId } },
      ]),
    });
    t.hasResourceProperties('AWS::S3::Bucket', {
      BucketEncryption: { ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }] },
      PublicAccessBlockConfiguration: {
        BlockPublicAcls: true,
        BlockPublicPolicy: true,
        IgnorePublicAcls: true,
        RestrictPublicBuckets: true,
      },
    });
    t.hasResourceProperties('AWS::S3::BucketPolicy', {
      Bucket: { Ref: bucketId },
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
          Match.objectLike({ Sid: 'ElbAccountWritesAccessLogs', Action: 's3:PutObject', Principal: { AWS: Match.anyValue() } }),
          Match.objectLike({
            Sid: 'ElbLogDeliveryWritesAccessLogs',
            Action: 's3:PutObject',
            Principal: { Service: 'logdelivery.elasticloadbalancing.amazonaws.com' },
          }),
        ]),
      },
    });
  });

  it('listens on plain HTTP only when no certificate is configured', () => {
    const listeners = Object.values(resourcesOfType(t, 'AWS::ElasticLoadBalancingV2::Listener')).map(
      (l) => l.Properties as Record<string, unknown>,
    );
    expect(listeners).toHaveLength(1);
    expect(listeners[0]).toMatchObject({ Port: 80, Protocol: 'HTTP' });
  });

  it('serves HTTPS with a current TLS policy and redirects HTTP when a certificate is configured', () => {
    const ht = https.servicesTemplate;
    ht.hasResourceProperties('AWS::ElasticLoadBalancingV2::Listener', {
      Port: 443,
      Protocol: 'HTTPS',
      SslPolicy: 'ELBSecurityPolicy-TLS13-1-2-2021-06',
      Certificates: [{ CertificateArn: CERT }],
    });
    ht.hasResourceProperties('AWS::ElasticLoadBalancingV2::Listener', {
      Port: 80,
      Protocol: 'HTTP',
      DefaultActions: [{ Type: 'redirect', RedirectConfig: Match.objectLike({ Protocol: 'HTTPS', Port: '443', StatusCode: 'HTTP_301' }) }],
    });
    expect(Object.keys(resourcesOfType(ht, 'AWS::ElasticLoadBalancingV2::Listener'))).toHaveLength(2);
  });

  it('lets the load balancer reach the tasks on their port and nothing else in', () => {
    const svcSg = idOf(dev.services.api.service.connections.securityGroups[0]!);
    const albSg = idOf(dev.services.api.loadBalancer.connections.securityGroups[0]!);
    const ingress = Object.values(resourcesOfType(t, 'AWS::EC2::SecurityGroupIngress'))
      .map((r) => r.Properties as Record<string, any>)
      .filter((p) => JSON.stringify(p.GroupId).includes(svcSg));
    expect(ingress).toEqual([
      expect.objectContaining({ FromPort: API_PORT, ToPort: API_PORT, SourceSecurityGroupId: { 'Fn::GetAtt': [albSg, 'GroupId'] } }),
    ]);
  });
});

describe('scaling owns the task count (issue 12)', () => {
  it.each(['dev', 'staging', 'prod'] as const)('%s: no autoscaled service has a DesiredCount', (name) => {
    const s = synthEnv(name);
    const services = resourcesOfType(s.servicesTemplate, 'AWS::ECS::Service');
    const targets = Object.values(resourcesOfType(s.servicesTemplate, 'AWS::ApplicationAutoScaling::ScalableTarget')).map((r) =>
      JSON.stringify(r.Properties!.ResourceId),
    );
    expect(Object.keys(services)).toHaveLength(2);
    for (const [id, svc] of Object.entries(services)) {
      // Every service is autoscaled…
      expect(
        targets.some((t) => t.includes(`"${id}","Name"`)),
        `${id} has a scalable target`,
      ).toBe(true);
      // …so CloudFormation must not carry a count a deployment would reset it to.
      expect(svc.Properties, id).not.toHaveProperty('DesiredCount');
    }
  });
});

describe('container hardening (issue 12)', () => {
  const taskDefs = Object.values(resourcesOfType(t, 'AWS::ECS::TaskDefinition')).map(
    (r) => r.Properties as { Memory: string; Volumes?: { Name: string }[]; ContainerDefinitions: Record<string, any>[] },
  );

  it.each(['api', 'worker'])(
    "%s: read-only root file system, a writable /tmp volume, the images' non-root user, a hard memory limit",
    (name) => {
      const td = taskDefs.find((x) => x.ContainerDefinitions.some((d) => d.Name === name))!;
      const def = td.ContainerDefinitions.find((d) => d.Name === name)!;
      expect(def.ReadonlyRootFilesystem).toBe(true);
      expect(def.User).toBe(SERVICE_USER);
      expect(def.User).not.toMatch(/^(0|root)(:|$)/);
      expect(def.Memory).toBe(Number(td.Memory));
      expect(def.MountPoints).toEqual([{ ContainerPath: TMP_PATH, ReadOnly: false, SourceVolume: 'tmp' }]);
      expect(td.Volumes).toEqual([{ Name: 'tmp' }]);
      // The user is the images' `node` user (uid 1000 in the official node images).
      return import('node:fs').then(({ readFileSync }) =>
        expect(readFileSync(`docker/${name}.Dockerfile`, 'utf8')).toMatch(/^USER node$/m),
      );
    },
  );

  it('both services end a transaction left idle past the configured timeout (PGOPTIONS), and set no statement_timeout for the worker', () => {
    for (const name of ['api', 'worker']) {
      expect(envOf(name)[PG_OPTIONS_VARIABLE]).toBe(
        `-c idle_in_transaction_session_timeout=${c.database.idleInTransactionTimeoutSeconds}s`,
      );
      expect(String(envOf(name)[PG_OPTIONS_VARIABLE])).not.toContain('statement_timeout=');
    }
  });

  it('node-postgres sends PGOPTIONS with a connection string that has no options (how the services connect)', async () => {
    const { default: ConnectionParameters } = (await import('pg/lib/connection-parameters.js' as string)) as {
      default: new (c: unknown) => { options?: string };
    };
    const before = process.env.PGOPTIONS;
    process.env.PGOPTIONS = pgOptions(3600);
    try {
      expect(new ConnectionParameters({ connectionString: 'postgres://u:p@db.example:5432/erp_jobs?sslmode=verify-full' }).options).toBe(
        '-c idle_in_transaction_session_timeout=3600s',
      );
    } finally {
      if (before === undefined) delete process.env.PGOPTIONS;
      else process.env.PGOPTIONS = before;
    }
  });

  it("the worker container has a health check (node -e, no shell), the API relies on the load balancer's", () => {
    const worker = taskDefs.flatMap((x) => x.ContainerDefinitions).find((d) => d.Name === 'worker')!;
    expect(worker.HealthCheck).toEqual({
      Command: ['CMD', 'node', '-e', WORKER_HEALTH_CHECK_SCRIPT],
      Interval: 30,
      Timeout: 5,
      Retries: 3,
      StartPeriod: 30,
    });
  });
});

describe('worker health check script', () => {
  // Run it as ECS does, beside a `node index.mjs` process: healthy while it runs, unhealthy when
  // it is stopped (SIGSTOP) or gone.
  it('is healthy while a node process runs, unhealthy when it is stopped or gone', async () => {
    const { spawn, spawnSync } = await import('node:child_process');
    const { mkdtempSync, writeFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const dir = mkdtempSync(join(tmpdir(), 'worker-health-'));
    writeFileSync(join(dir, 'index.mjs'), 'setInterval(() => {}, 1000);\n');
    // Only this test's process is considered: the check looks at /proc, so give it a private view
    // by matching our child's pid through the same rules (the container has no other node).
    const check = () =>
      spawnSync('node', ['-e', WORKER_HEALTH_CHECK_SCRIPT.replace('Number(p)!==process.pid', `Number(p)===${child.pid}`)], {
        encoding: 'utf8',
      }).status;
    const child = spawn('node', ['index.mjs'], { cwd: dir, stdio: 'ignore' });
    try {
      await new Promise((r) => setTimeout(r, 300));
      expect(check()).toBe(0);
      child.kill('SIGSTOP');
      await new Promise((r) => setTimeout(r, 100));
      expect(check()).toBe(1);
      child.kill('SIGCONT');
      await new Promise((r) => setTimeout(r, 100));
      expect(check()).toBe(0);
    } finally {
      child.kill('SIGKILL');
    }
    await new Promise((r) => child.once('exit', r));
    expect(check()).toBe(1);
    // As written (any node process but the check itself), it finds this test runner's node: it parses and runs.
    expect(spawnSync('node', ['-e', WORKER_HEALTH_CHECK_SCRIPT]).status).not.toBeNull();
  }, 20_000);
});

describe('HTTPS in staging and prod (issue 12)', () => {
  it.each(['staging', 'prod'] as const)(
    '%s: HTTPS on 443 with a TLS 1.2+ policy and the given certificate; port 80 only redirects',
    (name) => {
      const ht = synthEnv(name).servicesTemplate;
      const listeners = Object.values(resourcesOfType(ht, 'AWS::ElasticLoadBalancingV2::Listener')).map(
        (l) => l.Properties as Record<string, any>,
      );
      expect(listeners).toHaveLength(2);
      expect(listeners.find((l) => l.Port === 443)).toMatchObject({
        Protocol: 'HTTPS',
        SslPolicy: 'ELBSecurityPolicy-TLS13-1-2-2021-06',
        Certificates: [{ CertificateArn: TEST_CERTIFICATE_ARN }],
      });
      const http = listeners.find((l) => l.Port === 80)!;
      expect(http.DefaultActions).toEqual([
        { Type: 'redirect', RedirectConfig: expect.objectContaining({ Protocol: 'HTTPS', Port: '443', StatusCode: 'HTTP_301' }) },
      ]);
      const out = ht.toJSON().Outputs.ApiUrl.Value;
      expect(JSON.stringify(out)).toContain('https://');
    },
  );

  it("the command line's certificate wins over lib/config.ts", () => {
    const fromConfig = withChanges('prod', (x) => (x.api.certificateArn = CERT));
    expect(withOverrides(fromConfig, { apiCertificateArn: TEST_CERTIFICATE_ARN }).api.certificateArn).toBe(TEST_CERTIFICATE_ARN);
    expect(withOverrides(fromConfig, {}).api.certificateArn).toBe(CERT);
  });
});

describe('load balancer deletion protection (issue 12)', () => {
  const attr = (name: 'dev' | 'staging' | 'prod') =>
    (
      only(synthEnv(name).servicesTemplate, 'AWS::ElasticLoadBalancingV2::LoadBalancer').props.LoadBalancerAttributes as {
        Key: string;
        Value: string;
      }[]
    ).find((a) => a.Key === 'deletion_protection.enabled')?.Value;
  it('is on in prod, as the config says elsewhere', () => {
    expect(attr('prod')).toBe('true');
    expect(ENVIRONMENTS.prod.api.deletionProtection).toBe(true);
    expect(attr('dev') ?? 'false').toBe('false');
  });
});

describe('egress narrowed to the endpoints in prod (issue 12)', () => {
  const prod = synthEnv('prod');
  const groups = () => ({
    api: prod.services.api.service.connections.securityGroups[0]!,
    worker: prod.services.worker.service.connections.securityGroups[0]!,
    bootstrap: prod.services.bootstrap.function.connections.securityGroups[0]!,
  });

  it.each(['api', 'worker', 'bootstrap'] as const)(
    "%s: HTTPS only to the interface endpoints' security group and the S3 prefix list, nowhere else",
    (who) => {
      const id = idOf(groups()[who]);
      const sg = resourcesOfType(prod.servicesTemplate, 'AWS::EC2::SecurityGroup')[id]!.Properties as Record<string, any>;
      // Inline rules, and the rule resources CDK makes for a peer in another stack.
      const egress = [
        ...((sg.SecurityGroupEgress ?? []) as Record<string, any>[]),
        ...Object.values(resourcesOfType(prod.servicesTemplate, 'AWS::EC2::SecurityGroupEgress'))
          .map((r) => r.Properties as Record<string, any>)
          .filter((p) => JSON.stringify(p.GroupId).includes(id)),
      ];
      expect(egress.filter((e) => e.CidrIp !== undefined)).toEqual([]);
      expect(egress.length).toBeGreaterThan(0);
      const https = egress.filter((e) => e.FromPort === 443);
      expect(https).toHaveLength(2);
      expect(JSON.stringify(https.find((e) => e.DestinationSecurityGroupId))).toContain('NetworkEndpointSecurityGroup');
      expect(JSON.stringify(https.find((e) => e.DestinationPrefixListId))).toContain('NetworkS3PrefixList');
    },
  );

  it('dev keeps HTTPS to anywhere through NAT (no interface endpoints)', () => {
    const sg = resourcesOfType(t, 'AWS::EC2::SecurityGroup')[idOf(dev.services.worker.service.connections.securityGroups[0]!)]!
      .Properties as Record<string, any>;
    expect(sg.SecurityGroupEgress).toContainEqual(expect.objectContaining({ CidrIp: '0.0.0.0/0', FromPort: 443, ToPort: 443 }));
  });
});

describe('tags', () => {
  it('both stacks carry the project and environment as stack tags (explicitStackTags in cdk.json), as every resource does', () => {
    for (const stack of [dev.data, dev.services]) expect(stack.tags.tagValues()).toMatchObject({ project: 'erp-jobs', environment: 'dev' });
    const manifest = dev.assembly.getStackByName(dev.services.stackName).tags;
    expect(manifest).toMatchObject({ project: 'erp-jobs', environment: 'dev' });
  });
});

describe('log groups (issue 12)', () => {
  it.each([
    ['prod', 'Retain'],
    ['dev', 'Delete'],
  ] as const)('%s: every log group is %s on stack deletion', (name, policy) => {
    const s = synthEnv(name);
    const groups = [
      ...Object.values(resourcesOfType(s.servicesTemplate, 'AWS::Logs::LogGroup')),
      ...Object.values(resourcesOfType(s.dataTemplate, 'AWS::Logs::LogGroup')),
    ];
    // The services', the bootstrap's, its provider's, the rotation's, the flow logs and the
    // AwsCustomResource function's (lib/custom-resource-logs.ts).
    expect(groups.length).toBe(7);
    for (const g of groups) expect((g as { DeletionPolicy?: string }).DeletionPolicy).toBe(policy);
  });
});
