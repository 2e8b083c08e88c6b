// A Lambda function that works on the job store from inside the VPC, as the schema bootstrap and
// the password rotation do: its own security group (PostgreSQL to the database, HTTPS to the AWS
// APIs, nothing else), a role with a fixed name (the database secrets' resource policies admit
// readers by name, secret-readers.ts), its own log group, Node.js 22 (the images' version) on arm64
// (cheaper for a function; the images are x86_64, CPU_ARCHITECTURE: the code is architecture-free),
// and the Amazon CA bundle to verify the database's certificate. The constructs are made in the
// caller's scope with the ids they always had, so the bootstrap's resources keep their logical ids.

import type { Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import { ENV } from '../runtime/config/env.ts';
import type { LogRetentionDays } from './config.ts';
import type { JobDatabase } from './database.ts';
import { acknowledge } from './nag.ts';
import type { Network } from './network.ts';
import { LOCK_FILE, REPO_ROOT } from './paths.ts';

/** The Amazon CA certificates (RDS's among them) in AWS Lambda's Node.js runtimes. */
export const LAMBDA_AMAZON_CA_BUNDLE = '/var/runtime/ca-cert.pem';

/**
 * esbuild settings of both: an ESM bundle (migrate() finds its folder via import.meta.url), pg
 * bundled, the AWS SDK left to the Lambda runtime, which has v3.
 */
export const ESM_BUNDLING: nodejs.BundlingOptions = {
  format: nodejs.OutputFormat.ESM,
  target: 'node22',
  mainFields: ['module', 'main'],
  // pg is CommonJS and requires node built-ins; give the ESM bundle a real `require`.
  banner: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
  // pg-native is an optional peer pg never loads unless asked.
  externalModules: ['pg-native', '@aws-sdk/*'],
  sourceMap: true,
  minify: true,
};

export interface DatabaseFunctionProps {
  network: Network;
  database: JobDatabase;
  /** Who it is, in the rules' descriptions: "the schema bootstrap". */
  who: string;
  securityGroupDescription: string;
  roleName: string;
  roleDescription: string;
  description: string;
  entry: string;
  memorySize: number;
  timeout: Duration;
  environment?: Record<string, string>;
  bundling: nodejs.BundlingOptions;
  paramsAndSecrets?: lambda.ParamsAndSecretsLayerVersion;
  /** Why Node.js 22 (cdk-nag L1), in the function's words. */
  runtimeReason: string;
  logRetentionDays: LogRetentionDays;
  logRemovalPolicy: RemovalPolicy;
}

export function databaseFunction(
  scope: Construct,
  p: DatabaseFunctionProps,
): { fn: nodejs.NodejsFunction; role: iam.Role; securityGroup: ec2.SecurityGroup; logGroup: logs.LogGroup } {
  const securityGroup = new ec2.SecurityGroup(scope, 'SecurityGroup', {
    vpc: p.network.vpc,
    description: p.securityGroupDescription,
    allowAllOutbound: false,
  });
  p.network.allowHttpsToAws(securityGroup, p.who);
  p.database.allowConnectionsFrom(securityGroup, p.who);

  const role = new iam.Role(scope, 'Role', {
    roleName: p.roleName,
    assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
    description: p.roleDescription,
    managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName('service-role/AWSLambdaVPCAccessExecutionRole')],
  });
  acknowledge(
    role,
    'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]',
    "The AWS-managed policy Lambda documents for functions in a VPC: CloudWatch Logs plus the EC2 network-interface actions, which take no resource ARNs; AWS maintains it as Lambda's needs change.",
  );

  const logGroup = new logs.LogGroup(scope, 'Logs', {
    retention: p.logRetentionDays as logs.RetentionDays,
    removalPolicy: p.logRemovalPolicy,
  });

  const fn = new nodejs.NodejsFunction(scope, 'Function', {
    description: p.description,
    entry: p.entry,
    handler: 'handler',
    projectRoot: REPO_ROOT,
    depsLockFilePath: LOCK_FILE,
    runtime: lambda.Runtime.NODEJS_22_X,
    architecture: lambda.Architecture.ARM_64,
    memorySize: p.memorySize,
    timeout: p.timeout,
    vpc: p.network.vpc,
    vpcSubnets: p.network.appSubnets,
    securityGroups: [securityGroup],
    role,
    logGroup,
    environment: {
      NODE_OPTIONS: '--enable-source-maps',
      // Verify the database's certificate and host name: the Node.js runtimes keep the Amazon
      // CA certificates, RDS's among them, in this file (they no longer load them by default).
      [ENV.databaseCaFile]: LAMBDA_AMAZON_CA_BUNDLE,
      ...p.environment,
    },
    ...(p.paramsAndSecrets ? { paramsAndSecrets: p.paramsAndSecrets } : {}),
    bundling: p.bundling,
  });
  acknowledge(fn, 'AwsSolutions-L1', p.runtimeReason);
  return { fn, role, securityGroup, logGroup };
}
