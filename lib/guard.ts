// AWS Control Tower's proactive controls (CloudFormation Guard rules, bundled with cfn-guard in
// @cdklabs/cdk-validator-cfnguard) over the templates, next to cdk-nag. Every rule a template
// breaks is either fixed or acknowledged HERE, in this one list, on the constructs it concerns and
// with the reason; a new resource that breaks a rule fails (test/cdk/guard.test.ts runs the rules
// on every environment; `cdk synth -c guard=true` runs them too). docs/deploy.md lists the
// acknowledgements.

import { Stack, Validations, type App } from 'aws-cdk-lib';
import { CfnGuardValidator } from '@cdklabs/cdk-validator-cfnguard';
import type { IConstruct } from 'constructs';
import type { JobPlatform } from './app.ts';
import type { EnvironmentConfig } from './config.ts';
import { FRAMEWORK_FUNCTION_IDS } from './nag.ts';

/** How aws-cdk-lib namespaces the plugin's rule ids in acknowledgements and the report. */
export const GUARD_NAMESPACE = 'cdk-validator-cfnguard';

export function addGuardChecks(app: App): void {
  Validations.of(app).addPlugins(new CfnGuardValidator({ controlTowerRulesEnabled: true }));
}

export interface GuardAcknowledgement {
  /** The guard rule's name, as the report prints it after `Acknowledge with 'cdk-validator-cfnguard::…'`. */
  rule: string;
  /** The Control Tower control, for people: CT.<SERVICE>.PR.<n>. */
  control: string;
  reason: string;
  /** The constructs it covers in this environment (and their children); none where the rule holds. */
  where: (p: JobPlatform, c: EnvironmentConfig) => IConstruct[];
}

const child = (scope: IConstruct, ...path: string[]): IConstruct => path.reduce((s, id) => s.node.findChild(id), scope);
const logGroups = (p: JobPlatform) => [
  child(p.data, 'Network', 'FlowLogs'),
  child(p.services, 'SchemaBootstrap', 'Logs'),
  child(p.services, 'SchemaBootstrap', 'ProviderLogs'),
  child(p.services, 'PasswordRotation', 'Logs'),
  child(p.services, 'Api', 'Logs'),
  child(p.services, 'Worker', 'Logs'),
  child(p.data, 'AwsCustomResourceLogs'),
];
const databaseInstance = (p: JobPlatform) => [child(p.data, 'Database', 'Instance')];
const accessLogBucket = (p: JobPlatform) => [child(p.services, 'Api', 'AccessLogs')];
/** aws-cdk-lib's own per-stack functions (custom-resource frameworks). */
const frameworkFunctions = (p: JobPlatform) => [
  // Present with cdk.json's @aws-cdk/aws-ec2:restrictDefaultSecurityGroup (as `cdk synth` runs).
  ...[p.data.node.tryFindChild('Custom::VpcRestrictDefaultSGCustomResourceProvider')].filter((x) => x !== undefined),
  child(p.data, FRAMEWORK_FUNCTION_IDS.awsCustomResource),
  child(p.data, FRAMEWORK_FUNCTION_IDS.logRetention),
  child(p.services, 'SchemaBootstrap', 'Provider'),
];

export const GUARD_ACKNOWLEDGEMENTS: readonly GuardAcknowledgement[] = [
  {
    rule: 'cloudwatch_log_group_retention_period_check',
    control: 'CT.CLOUDWATCH.PR.2',
    reason:
      'Log retention is a per-environment decision (lib/config.ts logRetentionDays: 14/30/90 days): the job rows and the ALB access logs (365 days in prod) are the durable record; prod keeps its log groups when a stack is deleted.',
    where: logGroups,
  },
  {
    rule: 'cloudwatch_log_group_encrypted_check',
    control: 'CT.CLOUDWATCH.PR.3',
    reason:
      'CloudWatch Logs encrypts every log group at rest with service-managed keys; the services log no secrets (they arrive as ECS secrets), so a customer-managed key would add a key policy to maintain and no protection.',
    where: logGroups,
  },
  {
    rule: 'lambda_inside_vpc_check',
    control: 'CT.LAMBDA.PR.3',
    reason:
      "The schema bootstrap and the password rotation run in the VPC's private subnets, which come from the data stack (Fn::ImportValue) and the rule only accepts literals or local references; the other functions are aws-cdk-lib's custom-resource frameworks, which call AWS APIs only and reach nothing in the VPC.",
    where: (p) => [
      child(p.services, 'SchemaBootstrap', 'Function'),
      child(p.services, 'PasswordRotation', 'Function'),
      ...frameworkFunctions(p),
    ],
  },
  {
    rule: 'lambda_function_public_access_prohibited_check',
    control: 'CT.LAMBDA.PR.2',
    reason:
      "Secrets Manager's permission to invoke the password rotation names the account (SourceAccount), as the rule asks, but as the stack's AWS::AccountId reference (the stacks are environment-agnostic), which the rule accepts only as a literal string.",
    where: (p) => [child(p.services, 'PasswordRotation', 'Function')],
  },
  {
    rule: 'rds_instance_no_default_ports_check',
    control: 'CT.RDS.PR.20',
    reason:
      'The default port is kept on purpose: the instance is in isolated subnets and its security group admits only the API, worker and bootstrap security groups; a non-default port adds no protection.',
    where: databaseInstance,
  },
  {
    rule: 'rds_storage_encrypted_kms_key_check',
    control: 'CT.RDS.PR.30',
    reason:
      'Storage is encrypted with the AWS-managed aws/rds key; moving to a customer-managed key replaces the instance (snapshot, copy with the new key, restore) and is planned as its own migration, not a template change.',
    where: databaseInstance,
  },
  {
    rule: 'rds_instance_automatic_minor_version_upgrade_enabled_check',
    control: 'CT.RDS.PR.5',
    reason:
      'The minor version is pinned (database.engineVersion) so the template says what runs; an automatic upgrade would leave the template behind and the next deployment would try to downgrade. Minor upgrades are a reviewed config change (docs/deploy.md).',
    where: databaseInstance,
  },
  {
    rule: 'rds_instance_iam_authentication_enabled_check',
    control: 'CT.RDS.PR.7',
    reason:
      'The services authenticate with Secrets Manager credentials ECS injects; IAM database authentication needs per-connection tokens in the pools and caps new connections per second, which a worker scale-out would hit.',
    where: databaseInstance,
  },
  {
    rule: 'rds_instance_multi_az_support_check',
    control: 'CT.RDS.PR.1',
    reason:
      "Single-AZ by this environment's config (database.multiAz = false): a non-production environment trades failover for cost; prod runs Multi-AZ.",
    where: (p, c) => (c.database.multiAz ? [] : databaseInstance(p)),
  },
  {
    rule: 'rds_instance_deletion_protection_enabled_check',
    control: 'CT.RDS.PR.13',
    reason:
      "Deletion protection off by this environment's config (database.deletionProtection = false): a disposable development database; staging and prod enable it.",
    where: (p, c) => (c.database.deletionProtection ? [] : databaseInstance(p)),
  },
  {
    rule: 'rds_instance_backup_enabled_check',
    control: 'CT.RDS.PR.8',
    reason:
      "Backup retention below a week by this environment's config (database.backupRetentionDays): a disposable development database; staging keeps 7 days, prod 30.",
    where: (p, c) => (c.database.backupRetentionDays >= 7 ? [] : databaseInstance(p)),
  },
  {
    rule: 'sqs_dlq_check',
    control: 'CT.SQS.PR.1',
    reason:
      "These queues are the lanes' dead-letter queues (one per lane): on-call triages them (alarms on depth and age) and nothing consumes them automatically, so a dead-letter queue of their own would only hide dead letters.",
    where: (p) => p.data.queues.all().map((l) => l.deadLetterQueue),
  },
  {
    rule: 'alb_http_to_https_redirection_check',
    control: 'CT.ELASTICLOADBALANCING.PR.1',
    reason:
      'No certificate in this environment (api.allowPlainHttp, dev only): the API is served over plain HTTP; staging and prod refuse to synthesize without a certificate and redirect port 80 to HTTPS.',
    where: (p, c) => (c.api.certificateArn === undefined ? [child(p.services, 'Api', 'LoadBalancer', 'Http')] : []),
  },
  {
    rule: 'elbv2_deletion_protection_enabled_check',
    control: 'CT.ELASTICLOADBALANCING.PR.5',
    reason:
      "Deletion protection off by this environment's config (api.deletionProtection = false): the services stack of dev and staging is destroyed and redeployed freely; prod protects its load balancer.",
    where: (p, c) => (c.api.deletionProtection ? [] : [p.services.api.loadBalancer]),
  },
  {
    rule: 's3_bucket_default_encryption_kms_check',
    control: 'CT.S3.PR.10',
    reason: 'ALB access logs support SSE-S3 only, not SSE-KMS: the bucket is encrypted with S3-managed keys.',
    where: accessLogBucket,
  },
  {
    rule: 's3_bucket_versioning_enabled_check',
    control: 'CT.S3.PR.11',
    reason:
      'Access logs are written once under unique keys and never overwritten; nobody but the ELB delivery writes (bucket policy), and they expire by lifecycle, which versioning would turn into noncurrent copies kept on.',
    where: accessLogBucket,
  },
  {
    rule: 's3_bucket_logging_enabled_check',
    control: 'CT.S3.PR.2',
    reason:
      'This bucket is itself the access-log destination of the load balancer; logging requests to it would need yet another log bucket and records only the ELB delivery writes.',
    where: accessLogBucket,
  },
  {
    rule: 's3_event_notifications_enabled_check',
    control: 'CT.S3.PR.4',
    reason:
      'Nothing reacts to new access-log objects: they are read during incident review (Athena or download), so there is no consumer to notify.',
    where: accessLogBucket,
  },
  {
    rule: 's3_bucket_object_lock_enabled_check',
    control: 'CT.S3.PR.9',
    reason:
      'Object Lock needs versioning and would keep objects past the lifecycle expiry the environment sets (accessLogRetentionDays); the bucket is retained on stack deletion and only the ELB delivery may write to it.',
    where: accessLogBucket,
  },
];

/** Apply every acknowledgement that concerns this environment. Fails when a named construct no longer exists. */
export function acknowledgeGuardRules(p: JobPlatform, c: EnvironmentConfig): void {
  for (const a of GUARD_ACKNOWLEDGEMENTS) {
    for (const scope of a.where(p, c)) {
      if (Stack.isStack(scope)) throw new Error(`guard acknowledgement ${a.rule} must name constructs, not a whole stack`);
      Validations.of(scope).acknowledge({ id: `${GUARD_NAMESPACE}::${a.rule}`, reason: `${a.control}: ${a.reason}` });
    }
  }
}
