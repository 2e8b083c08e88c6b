// The stateful stack: each lane's queues (redrive, retention, TLS, encryption, visibility; the bulk
// lane's logical IDs from before lanes), the database
// (isolated subnets, encryption, generated secret, per-environment protection, who may connect)
// and the stack's termination protection.

import { Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { ENVIRONMENTS } from '../../lib/config.ts';
import { JOB_LANES } from '../../lib/queues.ts';
import { CLOUDFORMATION_EXECUTION_ROLE, ONLY_NAMED_READERS_SID, serviceRoleNames } from '../../lib/secret-readers.ts';
import { idOf, only, resourcesOfType, synthEnv } from './support.ts';

const dev = synthEnv('dev');
const prod = synthEnv('prod');

describe.each([
  ['dev', 'bulk', dev],
  ['dev', 'urgent', dev],
  ['prod', 'bulk', prod],
  ['prod', 'urgent', prod],
] as const)('queues (%s, %s lane)', (name, lane, s) => {
  const c = ENVIRONMENTS[name];
  const queueId = idOf(s.data.queues.lanes[lane].queue.node.defaultChild!);
  const dlqId = idOf(s.data.queues.lanes[lane].deadLetterQueue.node.defaultChild!);
  const queues = resourcesOfType(s.dataTemplate, 'AWS::SQS::Queue');
  const queue = queues[queueId]!.Properties as Record<string, any>;
  const dlq = queues[dlqId]!.Properties as Record<string, any>;

  it("redrives to the DLQ after the config's maxReceiveCount", () => {
    expect(queue.RedrivePolicy).toEqual({
      deadLetterTargetArn: { 'Fn::GetAtt': [dlqId, 'Arn'] },
      maxReceiveCount: c.jobTimings.maxReceiveCount,
    });
    expect(dlq.RedrivePolicy).toBeUndefined();
  });

  it('keeps dead letters longer than jobs', () => {
    expect(queue.MessageRetentionPeriod).toBe(c.queues.retentionDays * 86_400);
    expect(dlq.MessageRetentionPeriod).toBe(c.queues.deadLetterRetentionDays * 86_400);
    expect(dlq.MessageRetentionPeriod).toBeGreaterThan(queue.MessageRetentionPeriod);
  });

  it('takes its visibility timeout from the job timings', () => {
    expect(queue.VisibilityTimeout).toBe(c.jobTimings.visibilityTimeoutSeconds);
  });

  it('encrypts both queues at rest', () => {
    expect(queue.SqsManagedSseEnabled).toBe(true);
    expect(dlq.SqsManagedSseEnabled).toBe(true);
  });

  it.each([
    ['job queue', queueId],
    ['DLQ', dlqId],
  ])('denies every non-TLS request to the %s', (_what, id) => {
    s.dataTemplate.hasResourceProperties('AWS::SQS::QueuePolicy', {
      Queues: [{ Ref: id }],
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Effect: 'Deny',
            Action: 'sqs:*',
            Principal: { AWS: '*' },
            Condition: { Bool: { 'aws:SecureTransport': 'false' } },
            Resource: { 'Fn::GetAtt': [id, 'Arn'] },
          }),
        ]),
      },
    });
  });
});

describe('priority lanes (issue 14)', () => {
  it.each([
    ['dev', dev],
    ['prod', prod],
  ] as const)('%s: two job queues, each redriving to a DLQ of its own, and nothing else', (_name, s) => {
    const queues = resourcesOfType(s.dataTemplate, 'AWS::SQS::Queue');
    const redriving = Object.entries(queues).filter(([, q]) => q.Properties?.RedrivePolicy !== undefined);
    expect(redriving).toHaveLength(2);
    const targets = redriving.map(
      ([, q]) => (q.Properties!.RedrivePolicy as { deadLetterTargetArn: { 'Fn::GetAtt': [string] } }).deadLetterTargetArn['Fn::GetAtt'][0],
    );
    expect(new Set(targets).size).toBe(2);
    // Every other queue is one of those DLQs.
    expect(Object.keys(queues).sort()).toEqual([...redriving.map(([id]) => id), ...targets].sort());
    expect(JOB_LANES).toEqual(['urgent', 'bulk']);
    expect(JSON.stringify(s.data.queues.all().map((l) => l.lane))).toBe('["urgent","bulk"]');
  });

  it('the bulk lane is the queue, DLQ and redrive-allow resource the stack had before lanes (same logical IDs and exports: no replacement)', () => {
    // Pinned from the template before lanes: a changed ID here would replace the deployed queue and lose its messages.
    expect(idOf(dev.data.queues.queue.node.defaultChild!)).toBe('QueuesJobQueue86E32A12');
    expect(idOf(dev.data.queues.deadLetterQueue.node.defaultChild!)).toBe('QueuesDeadLetterQueue82AA3FB7');
    expect(dev.data.queues.lanes.bulk.queue).toBe(dev.data.queues.queue);
    expect(dev.data.queues.lanes.bulk.deadLetterQueue).toBe(dev.data.queues.deadLetterQueue);
    const redriveAllow = Object.entries(resourcesOfType(dev.dataTemplate, 'Custom::AWS')).find(([, r]) =>
      JSON.stringify(r.Properties!.Create).includes('{"Ref":"QueuesDeadLetterQueue82AA3FB7"}'),
    );
    expect(redriveAllow?.[0]).toBe('QueuesDeadLetterQueueRedriveAllowPolicy6AEFFEE3');
    expect(JSON.stringify(redriveAllow![1].Properties!.Create)).toContain('\\"id\\":\\"dead-letter-queue-redrive-allow-policy\\"');
    // The services stack imports these; deleting an export it still imports fails the data stack's deployment.
    const exports = Object.values(dev.dataTemplate.toJSON().Outputs as Record<string, { Export?: { Name: string } }>).map(
      (o) => o.Export?.Name,
    );
    for (const name of [
      'ExportsOutputFnGetAttQueuesDeadLetterQueue82AA3FB7Arn5FCA0D42',
      'ExportsOutputFnGetAttQueuesDeadLetterQueue82AA3FB7QueueNameDA004602',
      'ExportsOutputFnGetAttQueuesJobQueue86E32A12Arn8A0393FD',
      'ExportsOutputFnGetAttQueuesJobQueue86E32A12QueueNameC4B608BD',
      'ExportsOutputRefQueuesDeadLetterQueue82AA3FB7B59449E8',
      'ExportsOutputRefQueuesJobQueue86E32A129DF52369',
    ])
      expect(exports, name).toContain(`ErpJobs-dev-Data:${name}`);
  });

  it('the urgent lane has its own queue, DLQ and outputs; on-call looks the URLs up there', () => {
    const urgent = dev.data.queues.lanes.urgent;
    expect(idOf(urgent.queue.node.defaultChild!)).toMatch(/^QueuesUrgentJobQueue[0-9A-F]{8}$/);
    expect(idOf(urgent.deadLetterQueue.node.defaultChild!)).toMatch(/^QueuesUrgentDeadLetterQueue[0-9A-F]{8}$/);
    const outputs = dev.dataTemplate.toJSON().Outputs as Record<string, { Value: unknown }>;
    expect(outputs.UrgentJobQueueUrl!.Value).toEqual({ Ref: idOf(urgent.queue.node.defaultChild!) });
    expect(outputs.UrgentDeadLetterQueueUrl!.Value).toEqual({ Ref: idOf(urgent.deadLetterQueue.node.defaultChild!) });
    expect(outputs.UrgentDeadLetterQueueArn!.Value).toEqual({ 'Fn::GetAtt': [idOf(urgent.deadLetterQueue.node.defaultChild!), 'Arn'] });
    expect(outputs.JobQueueUrl!.Value).toEqual({ Ref: 'QueuesJobQueue86E32A12' });
  });
});

describe('database', () => {
  it('sits in the isolated subnets only', () => {
    const group = only(dev.dataTemplate, 'AWS::RDS::DBSubnetGroup').props;
    const isolated = dev.data.network.vpc.isolatedSubnets.map((sn) => ({ Ref: idOf(sn.node.findChild('Subnet')) }));
    expect(isolated).toHaveLength(2);
    expect(group.SubnetIds).toEqual(isolated);
    const db = only(dev.dataTemplate, 'AWS::RDS::DBInstance').props;
    expect(db.PubliclyAccessible).toBe(false);
    // Isolated subnets have no route to the internet.
    const routes = Object.values(resourcesOfType(dev.dataTemplate, 'AWS::EC2::Route'));
    expect(routes.length).toBeGreaterThan(0);
    for (const r of routes) {
      const table = (r.Properties as { RouteTableId: { Ref: string } }).RouteTableId.Ref;
      expect(dev.data.network.vpc.isolatedSubnets.some((sn) => idOf(sn.node.findChild('RouteTable')) === table)).toBe(false);
    }
  });

  it('is encrypted, requires TLS, and keeps generated credentials in Secrets Manager', () => {
    const db = only(dev.dataTemplate, 'AWS::RDS::DBInstance').props;
    expect(db.StorageEncrypted).toBe(true);
    expect(JSON.stringify(db.MasterUserPassword)).toContain('{{resolve:secretsmanager:');
    dev.dataTemplate.hasResourceProperties('AWS::SecretsManager::Secret', {
      GenerateSecretString: Match.objectLike({ GenerateStringKey: 'password', SecretStringTemplate: '{"username":"erp_jobs_admin"}' }),
    });
    dev.dataTemplate.hasResourceProperties('AWS::SecretsManager::SecretTargetAttachment', { TargetType: 'AWS::RDS::DBInstance' });
    dev.dataTemplate.hasResourceProperties('AWS::RDS::DBParameterGroup', { Parameters: { 'rds.force_ssl': '1' } });
  });

  it.each([
    ['dev', dev],
    ['prod', prod],
  ] as const)('takes Multi-AZ, deletion protection, backups and removal from the %s config', (name, s) => {
    const c = ENVIRONMENTS[name].database;
    const all = resourcesOfType(s.dataTemplate, 'AWS::RDS::DBInstance');
    const [db] = Object.values(all) as unknown as [{ Properties: Record<string, unknown>; DeletionPolicy?: string }];
    expect(db.Properties).toMatchObject({
      MultiAZ: c.multiAz,
      DeletionProtection: c.deletionProtection,
      BackupRetentionPeriod: c.backupRetentionDays,
      DBInstanceClass: `db.${c.instanceClass}`,
    });
    expect(db.DeletionPolicy).toBe(c.removal === 'snapshot' ? 'Snapshot' : 'Delete');
  });

  it('admits PostgreSQL only from the API, the worker, the schema bootstrap and the password rotation', () => {
    const dbSg = only(dev.dataTemplate, 'AWS::RDS::DBInstance').props.VPCSecurityGroups as unknown[];
    expect(dbSg).toHaveLength(1);
    const dbSgId = (dbSg[0] as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
    // No ingress inside the stateful stack at all: no inline rules, no rule resources.
    const sg = resourcesOfType(dev.dataTemplate, 'AWS::EC2::SecurityGroup')[dbSgId]!.Properties as Record<string, unknown>;
    expect(sg.SecurityGroupIngress).toBeUndefined();
    expect(Object.keys(resourcesOfType(dev.dataTemplate, 'AWS::EC2::SecurityGroupIngress'))).toEqual([]);
    // The rules live with their consumers, each naming the consumer's security group as source.
    const rules = Object.values(resourcesOfType(dev.servicesTemplate, 'AWS::EC2::SecurityGroupIngress'))
      .map((r) => r.Properties as Record<string, any>)
      .filter((p) => JSON.stringify(p.GroupId).includes('DatabaseSecurityGroup'));
    const sources = rules.map((p) => p.SourceSecurityGroupId['Fn::GetAtt'][0]).sort();
    const expected = [
      dev.services.api.service.connections.securityGroups[0]!,
      dev.services.worker.service.connections.securityGroups[0]!,
      dev.services.bootstrap.function.connections.securityGroups[0]!,
      dev.services.passwordRotation.function.connections.securityGroups[0]!,
    ]
      .map((g) => idOf(g))
      .sort();
    expect(sources).toEqual(expected);
    for (const p of rules) expect(p.CidrIp).toBeUndefined();
  });
});

describe('stateful stack', () => {
  it.each([
    ['dev', dev],
    ['prod', prod],
  ] as const)('has termination protection as the %s config says', (name, s) => {
    expect(s.data.terminationProtection).toBe(ENVIRONMENTS[name].terminationProtection);
    expect(s.services.terminationProtection).toBe(false);
  });

  it('holds the database and the queues; the services stack holds neither', () => {
    for (const type of ['AWS::RDS::DBInstance', 'AWS::SQS::Queue']) {
      expect(Object.keys(resourcesOfType(dev.dataTemplate, type)).length).toBeGreaterThan(0);
      expect(Object.keys(resourcesOfType(dev.servicesTemplate, type))).toEqual([]);
    }
  });

  it('keeps both bearer tokens (API and on-call operator) as generated secrets, retained with the data where the config snapshots it; the services stack holds none', () => {
    const secrets = resourcesOfType(dev.dataTemplate, 'AWS::SecretsManager::Secret');
    const apiId = idOf(dev.data.apiToken.secret);
    const operatorId = idOf(dev.data.operatorToken.secret);
    expect(apiId).not.toBe(operatorId);
    for (const id of [apiId, operatorId]) {
      expect(secrets[id]!.Properties).toMatchObject({ GenerateSecretString: { PasswordLength: 48, ExcludePunctuation: true } });
    }
    expect(secrets[operatorId]!.Properties!.Description).toMatch(/API_OPERATOR_TOKEN/);
    expect(Object.keys(resourcesOfType(dev.servicesTemplate, 'AWS::SecretsManager::Secret'))).toEqual([]);
    const prodSecrets = resourcesOfType(prod.dataTemplate, 'AWS::SecretsManager::Secret');
    expect(prodSecrets[idOf(prod.data.operatorToken.secret)]).toMatchObject({ DeletionPolicy: 'Retain', UpdateReplacePolicy: 'Retain' });
  });

  it('tells on-call where the operator token lives (an output with the secret ARN and how to read it)', () => {
    const out = dev.dataTemplate.toJSON().Outputs.OperatorTokenSecretArn as { Value: unknown; Description: string };
    expect(out.Value).toEqual({ Ref: idOf(dev.data.operatorToken.secret) });
    expect(out.Description).toMatch(/aws secretsmanager get-secret-value --secret-id/);
  });

  it('logs VPC traffic', () => {
    dev.dataTemplate.hasResourceProperties('AWS::EC2::FlowLog', { TrafficType: 'ALL', LogDestinationType: 'cloud-watch-logs' });
  });
});

describe('network (issue 12)', () => {
  it.each([
    ['dev', dev],
    ['prod', prod],
  ] as const)('%s: public subnets do not hand out public IPs', (_name, s) => {
    const publics = s.data.network.vpc.publicSubnets.map((sn) => idOf(sn.node.findChild('Subnet')));
    expect(publics).toHaveLength(2);
    const subnets = resourcesOfType(s.dataTemplate, 'AWS::EC2::Subnet');
    for (const id of Object.keys(subnets)) expect(subnets[id]!.Properties!.MapPublicIpOnLaunch, id).toBe(false);
  });

  it.each([
    ['dev', dev],
    ['prod', prod],
  ] as const)("%s: has the S3 gateway endpoint on the app subnets' route tables", (_name, s) => {
    const gateways = Object.values(resourcesOfType(s.dataTemplate, 'AWS::EC2::VPCEndpoint')).filter(
      (e) => e.Properties!.VpcEndpointType === 'Gateway',
    );
    expect(gateways).toHaveLength(1);
    expect(JSON.stringify(gateways[0]!.Properties!.ServiceName)).toContain('.s3');
    const appTables = s.data.network.vpc.privateSubnets.map((sn) => ({ Ref: idOf(sn.node.findChild('RouteTable')) }));
    expect(gateways[0]!.Properties!.RouteTableIds).toEqual(appTables);
  });

  it('prod has interface endpoints for SQS, ECR (api, dkr), Secrets Manager, CloudWatch metrics and Logs, ECS; dev none', () => {
    const iface = (s: typeof prod) =>
      Object.values(resourcesOfType(s.dataTemplate, 'AWS::EC2::VPCEndpoint'))
        .filter((e) => e.Properties!.VpcEndpointType === 'Interface')
        .map((e) => /\.amazonaws\.com|\{"Ref":"AWS::Region"\},"\.([a-z.]+)"/.exec(JSON.stringify(e.Properties!.ServiceName))?.[1]);
    expect(iface(prod).sort()).toEqual(['ecr.api', 'ecr.dkr', 'ecs', 'logs', 'monitoring', 'secretsmanager', 'sqs']);
    expect(iface(dev)).toEqual([]);
    for (const e of Object.values(resourcesOfType(prod.dataTemplate, 'AWS::EC2::VPCEndpoint')).filter(
      (x) => x.Properties!.VpcEndpointType === 'Interface',
    )) {
      expect(e.Properties).toMatchObject({
        PrivateDnsEnabled: true,
        SecurityGroupIds: [{ 'Fn::GetAtt': [idOf(prod.data.network.endpointSecurityGroup!), 'GroupId'] }],
      });
    }
  });
});

describe('DLQ redrive-allow policy', () => {
  it.each([
    ['dev', 'bulk', dev],
    ['dev', 'urgent', dev],
    ['prod', 'bulk', prod],
    ['prod', 'urgent', prod],
  ] as const)("%s, %s lane: only the lane's job queue may dead-letter into its DLQ (set after both exist)", (_name, lane, s) => {
    const queueId = idOf(s.data.queues.lanes[lane].queue.node.defaultChild!);
    const dlqId = idOf(s.data.queues.lanes[lane].deadLetterQueue.node.defaultChild!);
    const calls = Object.values(resourcesOfType(s.dataTemplate, 'Custom::AWS')).filter((r) =>
      JSON.stringify(r.Properties).includes('setQueueAttributes'),
    );
    expect(calls).toHaveLength(2);
    const call = calls.find((r) => JSON.stringify(r.Properties!.Create).includes(`"Ref":"${dlqId}"`));
    expect(call).toBeDefined();
    const create = JSON.stringify(call!.Properties!.Create);
    expect(create).toContain('"service\\":\\"SQS\\"');
    expect(create).toContain('RedriveAllowPolicy');
    expect(create).toContain('\\\\\\"redrivePermission\\\\\\":\\\\\\"byQueue\\\\\\"');
    expect(create).toContain(`"Fn::GetAtt":["${queueId}","Arn"]`);
    // No other queue's ARN: not even the other lane's job queue may dead-letter here.
    const otherQueues = s.data.queues
      .all()
      .filter((l) => l.lane !== lane)
      .map((l) => idOf(l.queue.node.defaultChild!));
    for (const other of otherQueues) expect(create).not.toContain(other);
    expect(JSON.stringify(call!.Properties!.Update)).toBe(create);
    // The function may set attributes on this DLQ only, through this call's own policy.
    const policies = Object.values(resourcesOfType(s.dataTemplate, 'AWS::IAM::Policy')).filter((p) =>
      JSON.stringify(p.Properties).includes('sqs:SetQueueAttributes'),
    );
    expect(policies).toHaveLength(2);
    expect(policies.map((p) => (p.Properties as any).PolicyDocument.Statement)).toContainEqual([
      { Action: 'sqs:SetQueueAttributes', Effect: 'Allow', Resource: { 'Fn::GetAtt': [dlqId, 'Arn'] } },
    ]);
  });
});

describe('secrets (issue 12)', () => {
  const secretsOf = (s: typeof prod) => resourcesOfType(s.dataTemplate, 'AWS::SecretsManager::Secret');
  const all = (s: typeof prod) => ({
    master: idOf(s.data.database.instance.node.findChild('Secret')),
    app: idOf(s.data.database.node.findChild('AppSecret')),
    apiToken: idOf(s.data.apiToken.secret),
    operatorToken: idOf(s.data.operatorToken.secret),
  });

  it.each(['staging', 'prod'] as const)('%s retains the database secrets and the tokens on stack deletion; dev deletes them', (name) => {
    const s = synthEnv(name);
    const secrets = secretsOf(s);
    for (const [what, id] of Object.entries(all(s)))
      expect(secrets[id], what).toMatchObject({ DeletionPolicy: 'Retain', UpdateReplacePolicy: 'Retain' });
    for (const [what, id] of Object.entries(all(dev)))
      expect((secretsOf(dev)[id] as { DeletionPolicy?: string }).DeletionPolicy, what).toBe('Delete');
  });

  it("lets only the named roles (and CloudFormation's execution role) read each secret", () => {
    const roles = serviceRoleNames(ENVIRONMENTS.prod.stackPrefix);
    const policies = Object.values(resourcesOfType(prod.dataTemplate, 'AWS::SecretsManager::ResourcePolicy')).map(
      (r) => r.Properties as Record<string, any>,
    );
    const ids = all(prod);
    const readersOf = (id: string): string[] => {
      // One policy per secret: a secret has one resource policy, so a second resource on it (the
      // rotation attachment's, without @aws-cdk/aws-secretsmanager:useAttachedSecretResourcePolicyForSecretTargetAttachments)
      // replaces the first when it is applied, and the named readers' deny is gone.
      // (An attachment's Ref is its secret's ARN.)
      const attachments = Object.entries(resourcesOfType(prod.dataTemplate, 'AWS::SecretsManager::SecretTargetAttachment'))
        .filter(([, a]) => JSON.stringify((a.Properties as Record<string, unknown>).SecretId) === JSON.stringify({ Ref: id }))
        .map(([logicalId]) => logicalId);
      const mine = policies.filter((x) => [id, ...attachments].some((ref) => JSON.stringify(x.SecretId) === JSON.stringify({ Ref: ref })));
      expect(mine, id).toHaveLength(1);
      const p = mine[0];
      const st = (p!.ResourcePolicy.Statement as Record<string, any>[])[0]!;
      expect(st).toMatchObject({
        Sid: ONLY_NAMED_READERS_SID,
        Effect: 'Deny',
        Principal: { AWS: '*' },
        Action: 'secretsmanager:GetSecretValue',
        Resource: '*',
      });
      // Each allowed name appears as role/<name> and role/*/<name> (paths, e.g. SSO roles).
      return (st.Condition.StringNotLike['aws:PrincipalArn'] as unknown[])
        .map((a) =>
          JSON.stringify(a)
            .replace(/^.*:role\/(\*\/)?/, '')
            .replace(/"\]\]\}$/, ''),
        )
        .filter((_, i) => i % 2 === 0);
    };
    expect(readersOf(ids.master)).toEqual([roles.schemaBootstrap, roles.passwordRotation, CLOUDFORMATION_EXECUTION_ROLE]);
    expect(readersOf(ids.app)).toEqual([
      roles.schemaBootstrap,
      roles.apiExecution,
      roles.workerExecution,
      roles.apiTask,
      roles.workerTask,
      roles.passwordRotation,
      CLOUDFORMATION_EXECUTION_ROLE,
    ]);
    expect(readersOf(ids.apiToken)).toEqual([
      roles.apiExecution,
      ...ENVIRONMENTS.prod.secretReaders.apiTokenRoleNames,
      CLOUDFORMATION_EXECUTION_ROLE,
    ]);
    expect(readersOf(ids.operatorToken)).toEqual([
      roles.apiExecution,
      ...ENVIRONMENTS.prod.secretReaders.operatorTokenRoleNames,
      CLOUDFORMATION_EXECUTION_ROLE,
    ]);
    // The names the policies admit are the roles the services stack creates.
    const named = Object.values(resourcesOfType(prod.servicesTemplate, 'AWS::IAM::Role'))
      .map((r) => r.Properties!.RoleName)
      .filter(Boolean);
    expect(named.sort()).toEqual(
      [roles.apiExecution, roles.apiTask, roles.schemaBootstrap, roles.workerExecution, roles.workerTask, roles.passwordRotation].sort(),
    );
  });
});

describe('database diagnostics (issue 12)', () => {
  it.each(['dev', 'staging', 'prod'] as const)(
    '%s: postgresql and upgrade logs exported with retention, enhanced monitoring every 60 s, pinned minor, windows',
    (name) => {
      const s = synthEnv(name);
      const c = ENVIRONMENTS[name];
      const db = only(s.dataTemplate, 'AWS::RDS::DBInstance').props;
      expect(db).toMatchObject({
        EnableCloudwatchLogsExports: ['postgresql', 'upgrade'],
        MonitoringInterval: 60,
        EngineVersion: c.database.engineVersion,
        AutoMinorVersionUpgrade: false,
        PreferredBackupWindow: c.database.backupWindow,
        PreferredMaintenanceWindow: c.database.maintenanceWindow,
      });
      expect(db.MonitoringRoleArn).toBeDefined();
      expect(c.database.engineVersion).toMatch(/^\d+\.\d+$/);
      s.dataTemplate.hasResourceProperties('Custom::LogRetention', {
        LogGroupName: { 'Fn::Join': ['', ['/aws/rds/instance/', { Ref: idOf(s.data.database.instance) }, '/postgresql']] },
        RetentionInDays: c.logRetentionDays,
      });
      s.dataTemplate.hasResourceProperties('AWS::RDS::DBParameterGroup', {
        Parameters: {
          'rds.force_ssl': '1',
          log_min_duration_statement: String(c.database.slowStatementMilliseconds),
          log_parameter_max_length: '0', // no payloads in the postgresql log
          log_lock_waits: '1',
        },
      });
    },
  );

  it.each(['staging', 'prod'] as const)('%s: Performance Insights with the 7-day retention', (name) => {
    const db = only(synthEnv(name).dataTemplate, 'AWS::RDS::DBInstance').props;
    expect(db).toMatchObject({ EnablePerformanceInsights: true, PerformanceInsightsRetentionPeriod: 7 });
  });

  it('staging and prod have different maintenance windows (staging first)', () => {
    expect(ENVIRONMENTS.staging.database.maintenanceWindow).not.toBe(ENVIRONMENTS.prod.database.maintenanceWindow);
  });
});
