// The worker on Fargate. It scales on backlog per task — visible job messages ÷ running tasks —
// between the environment's bounds (target tracking on a metric-math expression). Its stop
// timeout covers the drain plus the release, so a stopping task hands its unfinished jobs back
// before ECS kills it; while it runs jobs it sets ECS task protection, so scale-in picks idle
// tasks. On SQS it may consume and publish job messages and send dead letters, nothing wider;
// it puts metrics into its environment's namespace only.

import { ArnFormat, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as appscaling from 'aws-cdk-lib/aws-applicationautoscaling';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct, type IDependable } from 'constructs';
import { ECS_MAX_STOP_TIMEOUT_SECONDS, RELEASE_MARGIN_SECONDS, type JobTimings } from '../../runtime/config/rules.ts';
import { ENV } from '../../runtime/config/env.ts';
import type { StuckThresholds } from '../../runtime/config/stuck-thresholds.ts';
import { metricNamespace } from '../../runtime/metrics/names.ts';
import type { EnvironmentName, LogRetentionDays, WorkerConfig } from '../config.ts';
import type { JobDatabase } from '../database.ts';
import { acknowledge } from '../nag.ts';
import type { JobQueues } from '../queues.ts';
import { CONTAINER_INSIGHTS_NAMESPACE } from './cluster.ts';
import { CPU_ARCHITECTURE, databaseSecret, jobEnvironment, serviceImage } from './container-config.ts';

export interface WorkerServiceProps {
  envName: EnvironmentName;
  config: WorkerConfig;
  jobTimings: JobTimings;
  /** When a job counts as stuck (alarms.stuckJobs). */
  stuckJobs: StuckThresholds;
  vpc: ec2.IVpc;
  taskSubnets: ec2.SubnetSelection;
  cluster: ecs.ICluster;
  queues: JobQueues;
  database: JobDatabase;
  logRetentionDays: LogRetentionDays;
  /** What must exist before the first task starts (the schema bootstrap). */
  startAfter: IDependable[];
}

/** Seconds ECS waits after SIGTERM before SIGKILL: the drain, then the fenced release. */
export function workerStopTimeoutSeconds(t: JobTimings): number {
  const s = t.drainSeconds + RELEASE_MARGIN_SECONDS;
  if (s > ECS_MAX_STOP_TIMEOUT_SECONDS) {
    throw new Error(`worker stop timeout ${s} s (drainSeconds ${t.drainSeconds} + release ${RELEASE_MARGIN_SECONDS}) exceeds Fargate's ${ECS_MAX_STOP_TIMEOUT_SECONDS} s`);
  }
  return Math.ceil(s);
}

export class WorkerService extends Construct {
  readonly service: ecs.FargateService;
  readonly minTasks: number;
  private readonly clusterName: string;
  private readonly queueName: string;

  constructor(scope: Construct, id: string, props: WorkerServiceProps) {
    super(scope, id);
    const c = props.config;
    this.minTasks = c.minTasks;
    this.clusterName = props.cluster.clusterName;
    this.queueName = props.queues.queue.queueName;

    const logGroup = new logs.LogGroup(this, 'Logs', {
      retention: props.logRetentionDays as logs.RetentionDays,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    const taskDefinition = new ecs.FargateTaskDefinition(this, 'Task', {
      cpu: c.cpu,
      memoryLimitMiB: c.memoryMiB,
      runtimePlatform: { cpuArchitecture: CPU_ARCHITECTURE, operatingSystemFamily: ecs.OperatingSystemFamily.LINUX },
    });
    taskDefinition.addContainer('worker', {
      image: serviceImage('worker'),
      essential: true,
      logging: ecs.LogDrivers.awsLogs({ logGroup, streamPrefix: 'worker' }),
      environment: {
        ...jobEnvironment({ envName: props.envName, jobTimings: props.jobTimings, queues: props.queues, stuckJobs: props.stuckJobs }),
        ...(c.prefetch !== undefined ? { [ENV.prefetch]: String(c.prefetch) } : {}),
      },
      secrets: databaseSecret(props.database.appSecret),
      stopTimeout: Duration.seconds(workerStopTimeoutSeconds(props.jobTimings)),
      // An init process forwards SIGTERM to node and reaps children.
      linuxParameters: new ecs.LinuxParameters(this, 'Linux', { initProcessEnabled: true }),
    });
    acknowledge(taskDefinition.obtainExecutionRole(), 'AwsSolutions-IAM5[Resource::*]',
      'The execution role\'s ecr:GetAuthorizationToken takes no resource ARN; image pulls, log writes and secret reads are scoped to this task\'s repository, log group and secrets.');
    acknowledge(taskDefinition, 'AwsSolutions-ECS2',
      'The environment holds only non-secret configuration (queue URLs, job timings, metrics namespace); the database secret is an ECS secret resolved from Secrets Manager.');

    const taskRole = taskDefinition.taskRole;
    props.queues.grantConsume(taskRole);
    props.queues.grantPublish(taskRole);
    props.queues.grantDeadLetter(taskRole);
    const stack = Stack.of(this);
    const policy = new iam.Policy(this, 'WorkerPolicy', {
      statements: [
        new iam.PolicyStatement({
          sid: 'PutJobMetrics',
          actions: ['cloudwatch:PutMetricData'],
          resources: ['*'],
          conditions: { StringEquals: { 'cloudwatch:namespace': metricNamespace(props.envName) } },
        }),
        new iam.PolicyStatement({
          sid: 'OwnTaskProtection',
          actions: ['ecs:UpdateTaskProtection', 'ecs:GetTaskProtection'],
          resources: [stack.formatArn({ service: 'ecs', resource: 'task', resourceName: `${props.cluster.clusterName}/*`, arnFormat: ArnFormat.SLASH_RESOURCE_NAME })],
        }),
      ],
    });
    taskRole.attachInlinePolicy(policy);
    acknowledge(policy, 'AwsSolutions-IAM5[Resource::*]',
      'cloudwatch:PutMetricData supports no resource ARNs; the statement is limited by the cloudwatch:namespace condition to this environment\'s job metrics namespace.');
    acknowledge(policy, `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task/<${stack.getLogicalId(props.cluster.node.defaultChild as ecs.CfnCluster)}>/*]`,
      'Task IDs exist only once ECS starts a task, so task protection is granted on the tasks of this cluster; the worker sets protection on its own task only (ECS agent endpoint).');

    const securityGroup = new ec2.SecurityGroup(this, 'ServiceSecurityGroup', {
      vpc: props.vpc,
      description: 'ERP jobs worker tasks: no ingress; out to PostgreSQL and HTTPS (SQS, Secrets Manager, ECR, CloudWatch)',
      allowAllOutbound: false,
    });
    securityGroup.addEgressRule(ec2.Peer.anyIpv4(), ec2.Port.tcp(443), 'HTTPS to AWS APIs through NAT');
    const service = new ecs.FargateService(this, 'Service', {
      cluster: props.cluster,
      taskDefinition,
      desiredCount: c.minTasks,
      vpcSubnets: props.taskSubnets,
      securityGroups: [securityGroup],
      assignPublicIp: false,
      minHealthyPercent: 100,
      maxHealthyPercent: c.deploymentMaxPercent,
      circuitBreaker: { rollback: true },
      propagateTags: ecs.PropagatedTagSource.SERVICE,
    });
    props.database.allowConnectionsFrom(service, 'the worker service');
    service.node.addDependency(securityGroup, policy);
    for (const d of props.startAfter) service.node.addDependency(d);
    this.service = service;

    // --- Scaling on backlog per task ---------------------------------------------------------
    const target = new appscaling.ScalableTarget(this, 'TaskCount', {
      serviceNamespace: appscaling.ServiceNamespace.ECS,
      resourceId: `service/${props.cluster.clusterName}/${service.serviceName}`,
      scalableDimension: 'ecs:service:DesiredCount',
      minCapacity: c.minTasks,
      maxCapacity: c.maxTasks,
      // The service-linked role Application Auto Scaling uses for ECS (as autoScaleTaskCount does), not a new role.
      role: iam.Role.fromRoleArn(this, 'AutoScalingRole', stack.formatArn({
        service: 'iam',
        region: '',
        resource: 'role',
        resourceName: 'aws-service-role/ecs.application-autoscaling.amazonaws.com/AWSServiceRoleForApplicationAutoScaling_ECSService',
      })),
    });
    // The L2 target-tracking policy takes only a single metric; backlog per task is metric math.
    new appscaling.CfnScalingPolicy(this, 'BacklogPerTask', {
      policyName: `${stack.stackName}-worker-backlog-per-task`,
      policyType: 'TargetTrackingScaling',
      scalingTargetId: target.scalableTargetId,
      targetTrackingScalingPolicyConfiguration: {
        targetValue: c.backlogPerTaskTarget,
        scaleOutCooldown: c.scaleOutCooldownSeconds,
        scaleInCooldown: c.scaleInCooldownSeconds,
        customizedMetricSpecification: {
          metrics: [
            {
              id: 'visible',
              label: 'Visible job messages',
              returnData: false,
              metricStat: {
                metric: { namespace: 'AWS/SQS', metricName: 'ApproximateNumberOfMessagesVisible', dimensions: [{ name: 'QueueName', value: this.queueName }] },
                stat: 'Sum',
              },
            },
            {
              id: 'running',
              label: 'Running worker tasks',
              returnData: false,
              metricStat: {
                metric: {
                  namespace: CONTAINER_INSIGHTS_NAMESPACE,
                  metricName: 'RunningTaskCount',
                  dimensions: [
                    { name: 'ClusterName', value: this.clusterName },
                    { name: 'ServiceName', value: service.serviceName },
                  ],
                },
                stat: 'Average',
              },
            },
            // No running task yet still has a backlog to answer: count it as one task.
            { id: 'backlogPerTask', label: 'Backlog per task', expression: 'visible / IF(running > 0, running, 1)', returnData: true },
          ],
        },
      },
    });
  }

  /** Running tasks of this service (Container Insights). */
  metricRunningTasks(period: Duration = Duration.minutes(1)): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: CONTAINER_INSIGHTS_NAMESPACE,
      metricName: 'RunningTaskCount',
      dimensionsMap: { ClusterName: this.clusterName, ServiceName: this.service.serviceName },
      statistic: 'Average',
      period,
    });
  }

  /** The scaling signal, for the dashboard. */
  metricBacklogPerTask(period: Duration = Duration.minutes(1)): cloudwatch.IMetric {
    return new cloudwatch.MathExpression({
      expression: 'visible / IF(running > 0, running, 1)',
      usingMetrics: {
        visible: new cloudwatch.Metric({ namespace: 'AWS/SQS', metricName: 'ApproximateNumberOfMessagesVisible', dimensionsMap: { QueueName: this.queueName }, statistic: 'Sum', period }),
        running: this.metricRunningTasks(period),
      },
      label: 'Backlog per task',
      period,
    });
  }
}
