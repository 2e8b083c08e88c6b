// Rotates the services' database password on a schedule: Secrets Manager calls a function of
// ours (runtime/rotation/handler.ts, alternating users) every `rotationDays`, and once when the
// schedule is created. Ours rather than AWS's serverless-application function: its role carries a
// fixed name, which the secrets' resource policies admit (secret-readers.ts, they deny every
// other reader), it runs in the same subnets and security rules as the schema bootstrap, it grants
// exactly the row access the bootstrap grants (runtime/db/app-role.ts), and the suite runs it
// against a real PostgreSQL. The services follow without a restart (runtime/db/credentials.ts).
// A rotation that fails pages on-call through the function's Errors metric (lib/monitoring/alarms.ts).

import { Duration, type RemovalPolicy, Stack } from 'aws-cdk-lib';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import { ENV } from '../runtime/config/env.ts';
import type { LogRetentionDays } from './config.ts';
import type { JobDatabase } from './database.ts';
import { acknowledge } from './nag.ts';
import type { Network } from './network.ts';
import { LOCK_FILE, REPO_ROOT, ROTATION_ENTRY } from './paths.ts';
import { LAMBDA_AMAZON_CA_BUNDLE } from './schema-bootstrap.ts';

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

export class PasswordRotation extends Construct {
  readonly function: lambda.IFunction;
  readonly schedule: secretsmanager.RotationSchedule;
  /** Where each rotation step logs a line (the runbook's first step). */
  readonly logGroup: logs.LogGroup;

  constructor(scope: Construct, id: string, props: PasswordRotationProps) {
    super(scope, id);
    const securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc: props.network.vpc,
      description: 'Database password rotation function: PostgreSQL to the job store, HTTPS to Secrets Manager',
      allowAllOutbound: false,
    });
    props.network.allowHttpsToAws(securityGroup, 'the password rotation');
    props.database.allowConnectionsFrom(securityGroup, 'the password rotation');

    const role = new iam.Role(this, 'Role', {
      roleName: props.roleName,
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: "Database password rotation function: logs, VPC network interfaces, read the master secret, rotate the services' secret",
      managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName('service-role/AWSLambdaVPCAccessExecutionRole')],
    });
    // The master user creates and updates the services' two roles; the services' secret itself is granted by the schedule below.
    props.database.secret.grantRead(role);
    acknowledge(
      role,
      'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]',
      "The AWS-managed policy Lambda documents for functions in a VPC: CloudWatch Logs plus the EC2 network-interface actions, which take no resource ARNs; AWS maintains it as Lambda's needs change.",
    );

    const logGroup = new logs.LogGroup(this, 'Logs', {
      retention: props.logRetentionDays as logs.RetentionDays,
      removalPolicy: props.logRemovalPolicy,
    });
    this.logGroup = logGroup;
    const fn = new nodejs.NodejsFunction(this, 'Function', {
      description: "Rotates the services' database password (alternating users; runtime/rotation/handler.ts)",
      entry: ROTATION_ENTRY,
      handler: 'handler',
      projectRoot: REPO_ROOT,
      depsLockFilePath: LOCK_FILE,
      runtime: lambda.Runtime.NODEJS_22_X,
      architecture: lambda.Architecture.ARM_64,
      memorySize: 256,
      timeout: Duration.minutes(1),
      vpc: props.network.vpc,
      vpcSubnets: props.network.appSubnets,
      securityGroups: [securityGroup],
      role,
      logGroup,
      environment: {
        NODE_OPTIONS: '--enable-source-maps',
        MASTER_SECRET_ARN: props.database.secret.secretArn,
        [ENV.databaseCaFile]: LAMBDA_AMAZON_CA_BUNDLE,
      },
      bundling: {
        format: nodejs.OutputFormat.ESM,
        target: 'node22',
        mainFields: ['module', 'main'],
        banner: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
        // The Lambda runtime has the AWS SDK v3.
        externalModules: ['pg-native', '@aws-sdk/*'],
        sourceMap: true,
        minify: true,
      },
    });
    acknowledge(
      fn,
      'AwsSolutions-L1',
      'Pinned to Node.js 22, the runtime of the service images (node:22), so the rotation runs the app-role code on the Node version the runtime is tested on; moves with the images.',
    );
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
