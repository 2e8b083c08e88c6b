// The stateful stack: the network, the job queues, the database, the API token and the on-call
// operator token — what must survive a redeploy of the services. Termination protection where
// the environment asks.

import { CfnOutput, RemovalPolicy, Stack, type StackProps } from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import { ENV } from '../../runtime/config/env.ts';
import { BearerToken } from '../bearer-token.ts';
import { type EnvironmentConfig, stackTags } from '../config.ts';
import { JobDatabase } from '../database.ts';
import { Network } from '../network.ts';
import { JobQueues } from '../queues.ts';
import { restrictSecretReaders, serviceRoleNames } from '../secret-readers.ts';

export interface JobsDataStackProps extends StackProps {
  config: EnvironmentConfig;
}

export class JobsDataStack extends Stack {
  readonly network: Network;
  readonly queues: JobQueues;
  readonly database: JobDatabase;
  readonly apiToken: BearerToken;
  readonly operatorToken: BearerToken;

  constructor(scope: Construct, id: string, props: JobsDataStackProps) {
    const c = props.config;
    super(scope, id, {
      description: `ERP jobs ${c.envName}: network, job queues, PostgreSQL job store (stateful)`,
      terminationProtection: c.terminationProtection,
      // Stack tags (cdk.json's explicitStackTags: Tags.of(app) tags the resources only), which
      // CloudFormation also puts on what it creates untagged by the CDK.
      tags: stackTags(c),
      ...props,
    });
    const retain = c.database.removal === 'snapshot' ? RemovalPolicy.RETAIN : RemovalPolicy.DESTROY;
    const roles = serviceRoleNames(c.stackPrefix);
    this.network = new Network(this, 'Network', {
      ...c.network,
      logRetentionDays: c.logRetentionDays,
      logRemovalPolicy: c.retainLogs ? RemovalPolicy.RETAIN : RemovalPolicy.DESTROY,
    });
    this.queues = new JobQueues(this, 'Queues', {
      ...c.queues,
      jobTimings: c.jobTimings,
      removalPolicy: retain,
      logRetentionDays: c.logRetentionDays,
      logRemovalPolicy: c.retainLogs ? RemovalPolicy.RETAIN : RemovalPolicy.DESTROY,
    });
    this.database = new JobDatabase(this, 'Database', {
      ...c.database,
      vpc: this.network.vpc,
      subnets: this.network.dataSubnets,
      logRetentionDays: c.logRetentionDays,
      // The master secret: the bootstrap migrates with it. The services' secret: the bootstrap sets
      // the role's password from it, ECS hands it to both services through their execution roles.
      readers: {
        master: [roles.schemaBootstrap, roles.passwordRotation],
        app: [roles.schemaBootstrap, roles.apiExecution, roles.workerExecution, roles.apiTask, roles.workerTask, roles.passwordRotation],
      },
    });
    this.apiToken = new BearerToken(this, 'ApiToken', {
      description: 'Bearer token of the ERP jobs API (API_TOKEN)',
      removalPolicy: retain,
      manualRotationReason:
        'A static bearer token shared with the ERP clients: rotating it needs the clients reconfigured in step, so it is rotated by the manual procedure in docs/deploy.md, not by a Lambda.',
    });
    this.operatorToken = new BearerToken(this, 'OperatorToken', {
      description: `On-call operator token of the ERP jobs API (${ENV.apiOperatorToken}): the on-call routes /v1/dead-jobs, /v1/dlq, /v1/poison-messages, /v1/stuck-jobs, /v1/pending-jobs`,
      removalPolicy: retain,
      manualRotationReason:
        'ECS resolves the token only at task start, so a rotation Lambda would leave running API tasks on the old value; it is rotated by the manual procedure in docs/deploy.md (new value, then a forced API deployment).',
    });
    // The API reads both tokens (ECS secrets); people only as config.secretReaders says.
    restrictSecretReaders(this.apiToken.secret, [roles.apiExecution, ...c.secretReaders.apiTokenRoleNames]);
    restrictSecretReaders(this.operatorToken.secret, [roles.apiExecution, ...c.secretReaders.operatorTokenRoleNames]);

    // What on-call and operators look up (docs/runbooks/README.md).
    new CfnOutput(this, 'JobQueueUrl', { value: this.queues.queue.queueUrl });
    new CfnOutput(this, 'DeadLetterQueueUrl', { value: this.queues.deadLetterQueue.queueUrl });
    new CfnOutput(this, 'DeadLetterQueueArn', { value: this.queues.deadLetterQueue.queueArn });
    // The urgent lane's (the three above are the bulk lane's, under their names from before lanes).
    const urgent = this.queues.lanes.urgent;
    new CfnOutput(this, 'UrgentJobQueueUrl', { value: urgent.queue.queueUrl });
    new CfnOutput(this, 'UrgentDeadLetterQueueUrl', { value: urgent.deadLetterQueue.queueUrl });
    new CfnOutput(this, 'UrgentDeadLetterQueueArn', { value: urgent.deadLetterQueue.queueArn });
    new CfnOutput(this, 'DatabaseSecretArn', {
      value: this.database.secret.secretArn,
      description: 'Master user: migrations only (the schema bootstrap, `jobs migrate`)',
    });
    new CfnOutput(this, 'DatabaseAppSecretArn', {
      value: this.database.appSecret.secretArn,
      description: "The services' role (row access, no DDL): what the services and the on-call `jobs` commands use",
    });
    new CfnOutput(this, 'DatabaseEndpoint', { value: this.database.instance.dbInstanceEndpointAddress });
    new CfnOutput(this, 'OperatorTokenSecretArn', {
      value: this.operatorToken.secret.secretArn,
      description:
        "On-call operator token for the API's on-call routes: aws secretsmanager get-secret-value --secret-id <this ARN> --query SecretString --output text (docs/deploy.md#secrets)",
    });
  }
}
