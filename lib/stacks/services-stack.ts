// The stateless stack: the schema bootstrap, the ECS cluster with the API and the worker, and
// what on-call watches (topic, alarms, dashboard). Safe to destroy and redeploy; it only
// references the stateful stack.

import { CfnOutput, RemovalPolicy, Stack, type StackProps } from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import { connectionBudget, type EnvironmentConfig, stackTags } from '../config.ts';
import { JobAlarms } from '../monitoring/alarms.ts';
import { JobsDashboard } from '../monitoring/dashboard.ts';
import { OnCallTopic } from '../monitoring/on-call-topic.ts';
import { PasswordRotation } from '../password-rotation.ts';
import { SchemaBootstrap } from '../schema-bootstrap.ts';
import { ApiService } from '../services/api.ts';
import { JobsCluster } from '../services/cluster.ts';
import { WorkerService } from '../services/worker.ts';
import { serviceRoleNames } from '../secret-readers.ts';
import type { JobsDataStack } from './data-stack.ts';

export interface JobsServicesStackProps extends StackProps {
  config: EnvironmentConfig;
  data: JobsDataStack;
}

export class JobsServicesStack extends Stack {
  readonly bootstrap: SchemaBootstrap;
  readonly passwordRotation: PasswordRotation;
  readonly api: ApiService;
  readonly worker: WorkerService;
  readonly alarms: JobAlarms;

  constructor(scope: Construct, id: string, props: JobsServicesStackProps) {
    const c = props.config;
    super(scope, id, {
      description: `ERP jobs ${c.envName}: schema bootstrap, API and worker on ECS Fargate, alarms and dashboard`,
      tags: stackTags(c),
      ...props,
    });
    const { network, queues, database, apiToken, operatorToken } = props.data;
    const roles = serviceRoleNames(c.stackPrefix);
    const logRemovalPolicy = c.retainLogs ? RemovalPolicy.RETAIN : RemovalPolicy.DESTROY;

    this.bootstrap = new SchemaBootstrap(this, 'SchemaBootstrap', {
      network,
      database,
      roleName: roles.schemaBootstrap,
      logRetentionDays: c.logRetentionDays,
      logRemovalPolicy,
    });
    // After the bootstrap: the first rotation (when the schedule is created) needs the role and the tables.
    this.passwordRotation = new PasswordRotation(this, 'PasswordRotation', {
      network,
      database,
      roleName: roles.passwordRotation,
      rotationDays: c.database.passwordRotationDays,
      logRetentionDays: c.logRetentionDays,
      logRemovalPolicy,
    });
    this.passwordRotation.schedule.node.addDependency(this.bootstrap.resource);
    const { cluster } = new JobsCluster(this, 'Cluster', { vpc: network.vpc });
    this.api = new ApiService(this, 'Api', {
      envName: c.envName,
      config: c.api,
      jobTimings: c.jobTimings,
      stuckJobs: c.alarms.stuckJobs,
      retention: c.jobRetention,
      network,
      cluster,
      queues,
      database,
      idleInTransactionTimeoutSeconds: c.database.idleInTransactionTimeoutSeconds,
      sqsHttpClient: c.queues.httpClient,
      apiToken: apiToken.secret,
      operatorToken: operatorToken.secret,
      executionRoleName: roles.apiExecution,
      taskRoleName: roles.apiTask,
      logRetentionDays: c.logRetentionDays,
      logRemovalPolicy,
      accessLogRetentionDays: c.accessLogRetentionDays,
      startAfter: [this.bootstrap.resource],
    });
    this.worker = new WorkerService(this, 'Worker', {
      envName: c.envName,
      config: c.worker,
      jobTimings: c.jobTimings,
      stuckJobs: c.alarms.stuckJobs,
      retention: c.jobRetention,
      network,
      cluster,
      queues,
      database,
      idleInTransactionTimeoutSeconds: c.database.idleInTransactionTimeoutSeconds,
      sqsHttpClient: c.queues.httpClient,
      executionRoleName: roles.workerExecution,
      taskRoleName: roles.workerTask,
      logRetentionDays: c.logRetentionDays,
      logRemovalPolicy,
      startAfter: [this.bootstrap.resource],
    });

    const onCall = new OnCallTopic(this, 'OnCall', {
      envName: c.envName,
      emails: c.alarms.emails,
      httpsEndpoints: c.alarms.httpsEndpoints ?? [],
    });
    this.alarms = new JobAlarms(this, 'Alarms', {
      envName: c.envName,
      config: c.alarms,
      onCall,
      queues,
      api: this.api,
      worker: this.worker,
      database,
      passwordRotation: this.passwordRotation,
      databaseConfig: c.database,
      connectionBudget: connectionBudget(c),
    });
    new JobsDashboard(this, 'Dashboard', {
      envName: c.envName,
      queues,
      api: this.api,
      worker: this.worker,
      database,
      alarms: this.alarms,
    });

    new CfnOutput(this, 'ApiUrl', { value: this.api.url, description: 'Base URL of the jobs API' });
    new CfnOutput(this, 'ClusterName', { value: cluster.clusterName });
    new CfnOutput(this, 'ApiServiceName', { value: this.api.service.serviceName });
    new CfnOutput(this, 'WorkerServiceName', { value: this.worker.service.serviceName });
    new CfnOutput(this, 'ApiTargetGroupArn', { value: this.api.targetGroup.targetGroupArn });
    new CfnOutput(this, 'ApiLogGroup', { value: this.api.logGroup.logGroupName, description: "The API tasks' log (aws logs tail)" });
    new CfnOutput(this, 'WorkerLogGroup', {
      value: this.worker.logGroup.logGroupName,
      description: "The worker tasks' log (aws logs tail)",
    });
    new CfnOutput(this, 'PasswordRotationLogGroup', {
      value: this.passwordRotation.logGroup.logGroupName,
      description: "Log of the services' database password rotation (docs/runbooks/README.md#database-password-rotation-failing)",
    });
    new CfnOutput(this, 'PasswordRotationFunctionArn', {
      value: this.passwordRotation.function.functionArn,
      description: "The function that rotates the services' database password (docs/runbooks/README.md#database-password-not-rotated)",
    });
    new CfnOutput(this, 'SchemaBootstrapFunctionName', {
      value: this.bootstrap.function.functionName,
      description:
        "Applies the migrations and grants the services' role its access; invoke it to give back a revoked grant (docs/runbooks/README.md#claims-failing)",
    });
    new CfnOutput(this, 'OnCallTopicArn', { value: onCall.topic.topicArn, description: 'SNS topic the alarms publish to' });
    new CfnOutput(this, 'DlqAlarmName', {
      value: this.alarms.names.dlqNotEmpty!,
      description: 'The alarm of the post-deploy delivery drill (docs/deploy.md#alarm-delivery-drill)',
    });
  }
}
