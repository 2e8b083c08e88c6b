// The stateful stack: queues (redrive, retention, TLS, encryption, visibility), the database
// (isolated subnets, encryption, generated secret, per-environment protection, who may connect)
// and the stack's termination protection.

import { Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { ENVIRONMENTS } from '../../lib/config.ts';
import { idOf, only, resourcesOfType, synthEnv } from './support.ts';

const dev = synthEnv('dev');
const prod = synthEnv('prod');

describe.each([
  ['dev', dev],
  ['prod', prod],
] as const)('queues (%s)', (name, s) => {
  const c = ENVIRONMENTS[name];
  const queueId = idOf(s.data.queues.queue.node.defaultChild!);
  const dlqId = idOf(s.data.queues.deadLetterQueue.node.defaultChild!);
  const queues = resourcesOfType(s.dataTemplate, 'AWS::SQS::Queue');
  const queue = queues[queueId]!.Properties as Record<string, any>;
  const dlq = queues[dlqId]!.Properties as Record<string, any>;

  it('redrives to the DLQ after the config\'s maxReceiveCount', () => {
    expect(queue.RedrivePolicy).toEqual({ deadLetterTargetArn: { 'Fn::GetAtt': [dlqId, 'Arn'] }, maxReceiveCount: c.jobTimings.maxReceiveCount });
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

  it('admits PostgreSQL only from the API, the worker and the schema bootstrap', () => {
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
    ].map((g) => idOf(g)).sort();
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
