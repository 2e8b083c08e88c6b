// Rotates the services' database password on a schedule: Secrets Manager calls a function of
// ours (runtime/rotation/handler.ts, alternating users) every `rotationDays`, and once when the
// schedule is created. Ours rather than AWS's serverless-application function: its role carries a
// fixed name, which the secrets' resource policies admit (secret-readers.ts, they deny every
// other reader), it runs in the same subnets and security rules as the schema bootstrap, it grants
// exactly the row access the bootstrap grants (runtime/db/app-role.ts), and the suite runs it
// against a real PostgreSQL. The services follow without a restart (runtime/db/credentials.ts).
// A rotation that fails pages on-call through the function's Errors metric (lib/monitoring/alarms.ts).

import { Duration, FeatureFlags, type RemovalPolicy, Stack } from 'aws-cdk-lib';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as logs from 'aws-cdk-lib/aws-logs';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import type { LogRetentionDays } from './config.ts';
import type { JobDatabase } from './database.ts';
import { databaseFunction, ESM_BUNDLING } from './database-function.ts';
import { acknowledge } from './nag.ts';
import type { Network } from './network.ts';
import { ROTATION_ENTRY } from './paths.ts';

export interface PasswordRotationProps {
  network: Network;
  database: JobDatabase;
  /** The function role's fixed name: both database secrets' resource policies admit it by name (secret-readers.ts). */
  roleName: string;
  /** Days between rotations (database.passwordRotationDays). */
  rotationDays: number;
  logRetentionDays: LogRetentionDays;
  logRemovalPolicy: RemovalPolicy;
}

/**
 * cdk.json turns it on. Without it the schedule's own "deny DeleteSecret" policy is a second
 * AWS::SecretsManager::ResourcePolicy on the services' secret; a secret has one policy, the one
 * applied last wins, and that one (it waits for the database instance) drops the deny for every
 * reader but the named roles (secret-readers.ts).
 */
export const ONE_SECRET_POLICY_FLAG = '@aws-cdk/aws-secretsmanager:useAttachedSecretResourcePolicyForSecretTargetAttachments';

export class PasswordRotation extends Construct {
  readonly function: lambda.IFunction;
  readonly schedule: secretsmanager.RotationSchedule;
  /** Where each rotation step logs a line (the runbook's first step). */
  readonly logGroup: logs.LogGroup;

  constructor(scope: Construct, id: string, props: PasswordRotationProps) {
    super(scope, id);
    if (!FeatureFlags.of(this).isEnabled(ONE_SECRET_POLICY_FLAG)) {
      throw new Error(
        `PasswordRotation needs the feature flag ${ONE_SECRET_POLICY_FLAG} (cdk.json's context): without it the rotation schedule's policy replaces the secret's, and any role with GetSecretValue could read the services' password`,
      );
    }
    const { fn, role, securityGroup, logGroup } = databaseFunction(this, {
      network: props.network,
      database: props.database,
      who: 'the password rotation',
      securityGroupDescription: 'Database password rotation function: PostgreSQL to the job store, HTTPS to Secrets Manager',
      roleName: props.roleName,
      roleDescription:
        "Database password rotation function: logs, VPC network interfaces, read the master secret, rotate the services' secret",
      description: "Rotates the services' database password (alternating users; runtime/rotation/handler.ts)",
      entry: ROTATION_ENTRY,
      memorySize: 256,
      timeout: Duration.minutes(1),
      environment: { MASTER_SECRET_ARN: props.database.secret.secretArn },
      bundling: ESM_BUNDLING,
      runtimeReason:
        'Pinned to Node.js 22, the runtime of the service images (node:22), so the rotation runs the app-role code on the Node version the runtime is tested on; moves with the images.',
      logRetentionDays: props.logRetentionDays,
      logRemovalPolicy: props.logRemovalPolicy,
    });
    // The master user creates and updates the services' two roles; the services' secret itself is granted by the schedule below.
    props.database.secret.grantRead(role);
    this.logGroup = logGroup;
    this.function = fn;

    this.schedule = new secretsmanager.RotationSchedule(this, 'Schedule', {
      secret: props.database.appSecret,
      rotationLambda: fn,
      automaticallyAfter: Duration.days(props.rotationDays),
    });
    // Creating the schedule starts the first rotation: its function's network rules (ingress to
    // the database, egress to it and to Secrets Manager, all under this group) must exist by then.
    this.schedule.node.addDependency(securityGroup);
    // Secrets Manager may invoke the function for this account's secrets only (the schedule's
    // grant names the service alone; Control Tower's CT.LAMBDA.PR.1 asks for the account too).
    for (const c of fn.node.findAll()) {
      if (c instanceof lambda.CfnPermission && c.principal === 'secretsmanager.amazonaws.com') c.sourceAccount = Stack.of(this).account;
    }
    acknowledge(
      role,
      'AwsSolutions-IAM5[Resource::*]',
      'secretsmanager:GetRandomPassword, which aws-cdk-lib grants every rotation function, takes no resource ARN (the function makes its passwords with node:crypto and does not call it).',
    );
  }

  /** Failed invocations: a rotation step that threw (Secrets Manager retries, and the secret stays as it was). */
  metricErrors(period: Duration): cloudwatch.Metric {
    return this.function.metricErrors({ period, statistic: 'Sum' });
  }
}
