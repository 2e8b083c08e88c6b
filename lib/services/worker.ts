// The worker on Fargate. It scales on backlog per task — visible job messages of every lane ÷
// running tasks — between the environment's bounds (target tracking on a metric-math
// expression). Its stop timeout covers the drain plus the release, so a stopping task hands its
// unfinished jobs back before ECS kills it; while it runs jobs it sets ECS task protection, so
// scale-in picks idle tasks. On SQS it may consume and publish job messages and send dead
// letters, on every lane's queues, nothing wider; it puts metrics into its environment's
// namespace only. The task count belongs to the scaling target (no DesiredCount: a deployment
// never resets a scaled-out fleet). The container's health check replaces a task whose node
// process is gone, stopped (SIGSTOP) or a zombie.

import { ArnFormat, Duration, type RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as appscaling from 'aws-cdk-lib/aws-applicationautoscaling';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct, type IDependable } from 'constructs';
import { ECS_MAX_STOP_TIMEOUT_SECONDS, RELEASE_MARGIN_SECONDS, type JobTimings } from '../../runtime/config/rules.ts';
import { ENV } from '../../runtime/config/env.ts';
import type { Retention } from '../../runtime/config/retention.ts';
import type { StuckThresholds } from '../../runtime/config/stuck-thresholds.ts';
import type { EnvironmentName, LogRetentionDays, QueueConfig, WorkerConfig } from '../config.ts';
import type { JobDatabase } from '../database.ts';
import { acknowledge } from '../nag.ts';
import type { Network } from '../network.ts';
import type { JobLane, JobQueues } from '../queues.ts';
import { CONTAINER_INSIGHTS_NAMESPACE } from './cluster.ts';
import {
  CPU_ARCHITECTURE,
  databaseSecret,
  databaseSecretRenewal,
  hardenContainer,
  hardenedContainerOptions,
  jobEnvironment,
  PUT_JOB_METRICS_ACK,
  putJobMetricsStatement,
  serviceImage,
} from './container-config.ts';

export interface WorkerServiceProps {
  envName: EnvironmentName;
  config: WorkerConfig;
  jobTimings: JobTimings;
  /** When a job counts as stuck (alarms.stuckJobs). */
  stuckJobs: StuckThresholds;
  /** jobRetention (JOBS_KEEP_*). */
  retention: Retention;
  network: Network;
  cluster: ecs.ICluster;
  queues: JobQueues;
  database: JobDatabase;
  /** database.idleInTransactionTimeoutSeconds (PGOPTIONS). */
  idleInTransactionTimeoutSeconds: number;
  /** queues.httpClient (JOBS_SQS_HTTP_CLIENT), when set. */
  sqsHttpClient?: QueueConfig['httpClient'];
  /** The execution role's fixed name: the database secret's resource policy admits it by name (secret-readers.ts). */
  executionRoleName: string;
  /** The task role's fixed name: the database secret's resource policy admits it too, to read the secret again (secret-readers.ts). */
  taskRoleName: string;
  logRetentionDays: LogRetentionDays;
  logRemovalPolicy: RemovalPolicy;
  /** What must exist before the first task starts (the schema bootstrap). */
  startAfter: IDependable[];
}

/** Seconds ECS waits after SIGTERM before SIGKILL: the drain, then the fenced release. */
export function workerStopTimeoutSeconds(t: JobTimings): number {
  const s = t.drainSeconds + RELEASE_MARGIN_SECONDS;
  if (s > ECS_MAX_STOP_TIMEOUT_SECONDS) {
    throw new Error(
      `worker stop timeout ${s} s (drainSeconds ${t.drainSeconds} + release ${RELEASE_MARGIN_SECONDS}) exceeds Fargate's ${ECS_MAX_STOP_TIMEOUT_SECONDS} s`,
    );
  }
  return Math.ceil(s);
}

/**
 * The worker container's health check, run by ECS inside the container without a shell: healthy
 * while a node process other than the check itself runs (`node index.mjs`, or an operator's
 * `node jobs.mjs …`) and is neither stopped (SIGSTOP, a debugger) nor a zombie. The worker has no
 * port to probe; what it can be caught at is a frozen process, which would hold its leases'
 * jobs until their leases expire and then never come back.
 */
export const WORKER_HEALTH_CHECK_SCRIPT = [
  "const fs=require('fs');",
  "const alive=fs.readdirSync('/proc').filter((p)=>/^[0-9]+$/.test(p)&&Number(p)!==process.pid).some((p)=>{try{",
  "const argv=fs.readFileSync('/proc/'+p+'/cmdline','utf8').split('\\0');",
  "if(!/(^|\\/)node$/.test(argv[0])||!/\\.mjs$/.test(argv[1]||''))return false;",
  "const stat=fs.readFileSync('/proc/'+p+'/stat','utf8');",
  "return !'TtZX'.includes(stat.charAt(stat.lastIndexOf(')')+2));",
  '}catch{return false}});',
  'process.exit(alive?0:1);',
].join('');

export const WORKER_HEALTH_CHECK = {
  command: ['CMD', 'node', '-e', WORKER_HEALTH_CHECK_SCRIPT],
  interval: Duration.seconds(30),
  timeout: Duration.seconds(5),
  retries: 3,
  startPeriod: Duration.seconds(30),
} as const;

export class WorkerService extends Construct {
  readonly service: ecs.FargateService;
  readonly minTasks: number;
  /** The tasks' log group (the stack's WorkerLogGroup output). */
  readonly logGroup: logs.LogGroup;
  readonly maxTasks: number;
  readonly backlogPerTaskTarget: number;
  private readonly clusterName: string;
  /** Each lane's job queue name, highest lane first: the backlog counts them all. */
  private readonly laneQueueNames: { lane: JobLane; queueName: string }[];

  constructor(scope: Construct, id: string, props: WorkerServiceProps) {
    super(scope, id);
    const c = props.config;
    this.minTasks = c.minTasks;
    this.maxTasks = c.maxTasks;
    this.backlogPerTaskTarget = c.backlogPerTaskTarget;
    this.clusterName = props.cluster.clusterName;
    this.laneQueueNames = props.queues.all().map((l) => ({ lane: l.lane, queueName: l.queue.queueName }));

    const logGroup = (this.logGroup = new logs.LogGroup(this, 'Logs', {
      retention: props.logRetentionDays as logs.RetentionDays,
      removalPolicy: props.logRemovalPolicy,
    }));
    const executionRole = new iam.Role(this, 'TaskExecutionRole', {
      roleName: props.executionRoleName,
      assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
      description: 'ERP jobs worker: pull the image, write logs, read the database secret at task start',
    });
    const taskRole = new iam.Role(this, 'TaskRole', {
      roleName: props.taskRoleName,
      assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
      description:
        'ERP jobs worker tasks: the job queues, job metrics, own task protection and deployments, the database secret read again on rotation',
    });
    const taskDefinition = new ecs.FargateTaskDefinition(this, 'Task', {
      cpu: c.cpu,
      memoryLimitMiB: c.memoryMiB,
      executionRole,
      taskRole,
      runtimePlatform: { cpuArchitecture: CPU_ARCHITECTURE, operatingSystemFamily: ecs.OperatingSystemFamily.LINUX },
    });
    const container = taskDefinition.addContainer('worker', {
      image: serviceImage('worker'),
      essential: true,
      ...hardenedContainerOptions(c.memoryMiB),
      healthCheck: { ...WORKER_HEALTH_CHECK, command: [...WORKER_HEALTH_CHECK.command] },
      logging: ecs.LogDrivers.awsLogs({ logGroup, streamPrefix: 'worker' }),
      environment: {
        ...jobEnvironment({
          envName: props.envName,
          jobTimings: props.jobTimings,
          queues: props.queues,
          stuckJobs: props.stuckJobs,
          retention: props.retention,
          idleInTransactionTimeoutSeconds: props.idleInTransactionTimeoutSeconds,
          sqsHttpClient: props.sqsHttpClient,
        }),
        ...(c.prefetch !== undefined ? { [ENV.prefetch]: String(c.prefetch) } : {}),
        ...databaseSecretRenewal(props.database.appSecret, taskRole),
      },
      secrets: databaseSecret(props.database.appSecret),
      stopTimeout: Duration.seconds(workerStopTimeoutSeconds(props.jobTimings)),
      // An init process forwards SIGTERM to node and reaps children.
      linuxParameters: new ecs.LinuxParameters(this, 'Linux', { initProcessEnabled: true }),
    });
    hardenContainer(taskDefinition, container);
    acknowledge(
      taskDefinition.obtainExecutionRole(),
      'AwsSolutions-IAM5[Resource::*]',
      "The execution role's ecr:GetAuthorizationToken takes no resource ARN; image pulls, log writes and secret reads are scoped to this task's repository, log group and secrets.",
    );
    acknowledge(
      taskDefinition,
      'AwsSolutions-ECS2',
      'The environment holds only non-secret configuration (queue URLs, job timings, metrics namespace); the database secret is an ECS secret resolved from Secrets Manager.',
    );

    props.queues.grantConsume(taskRole);
    props.queues.grantPublish(taskRole);
    props.queues.grantDeadLetter(taskRole);
    const stack = Stack.of(this);
    // Task and service ARNs of this cluster: task ids exist only once ECS starts a task, and the
    // service's name only once it exists (the service waits for this policy).
    const ofCluster = (resource: string) =>
      stack.formatArn({
        service: 'ecs',
        resource,
        resourceName: `${props.cluster.clusterName}/*`,
        arnFormat: ArnFormat.SLASH_RESOURCE_NAME,
      });
    const clusterTasks = ofCluster('task');
    const clusterServices = ofCluster('service');
    const policy = new iam.Policy(this, 'WorkerPolicy', {
      statements: [
        putJobMetricsStatement(props.envName),
        new iam.PolicyStatement({
          sid: 'OwnTaskProtection',
          actions: ['ecs:UpdateTaskProtection', 'ecs:GetTaskProtection'],
          resources: [clusterTasks],
        }),
        // Which deployment started the task, and which is the service's primary one: a task a
        // newer deployment has replaced stops taking jobs (runtime/worker/deployment-watch.ts).
        new iam.PolicyStatement({
          sid: 'OwnDeployments',
          actions: ['ecs:DescribeTasks', 'ecs:DescribeServices'],
          resources: [clusterTasks, clusterServices],
        }),
      ],
    });
    taskRole.attachInlinePolicy(policy);
    acknowledge(policy, 'AwsSolutions-IAM5[Resource::*]', PUT_JOB_METRICS_ACK);
    acknowledge(
      policy,
      `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task/<${stack.getLogicalId(props.cluster.node.defaultChild as ecs.CfnCluster)}>/*]`,
      'Task IDs exist only once ECS starts a task, so task protection and DescribeTasks are granted on the tasks of this cluster; the worker sets protection on its own task only (ECS agent endpoint) and describes its own task only.',
    );
    acknowledge(
      policy,
      `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:service/<${stack.getLogicalId(props.cluster.node.defaultChild as ecs.CfnCluster)}>/*]`,
      "DescribeServices on this cluster's services (the API's and the worker's): the worker service's generated name exists only once the service does, and the service waits for this policy. Read-only; the worker reads its own service's deployments.",
    );

    const securityGroup = new ec2.SecurityGroup(this, 'ServiceSecurityGroup', {
      vpc: props.network.vpc,
      description: 'ERP jobs worker tasks: no ingress; out to PostgreSQL and HTTPS (SQS, Secrets Manager, ECR, CloudWatch)',
      allowAllOutbound: false,
    });
    props.network.allowHttpsToAws(securityGroup, 'the worker tasks');
    const service = new ecs.FargateService(this, 'Service', {
      cluster: props.cluster,
      taskDefinition,
      // No desiredCount: the scaling target below owns the count; a deployment (every new image)
      // leaves a scaled-out fleet as it is instead of resetting it to minTasks.
      vpcSubnets: props.network.appSubnets,
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
      role: iam.Role.fromRoleArn(
        this,
        'AutoScalingRole',
        stack.formatArn({
          service: 'iam',
          region: '',
          resource: 'role',
          resourceName: 'aws-service-role/ecs.application-autoscaling.amazonaws.com/AWSServiceRoleForApplicationAutoScaling_ECSService',
        }),
      ),
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
            ...this.laneQueueNames.map(({ lane, queueName }) => ({
              id: visibleId(lane),
              label: `Visible job messages (${lane})`,
              returnData: false,
              metricStat: {
                metric: {
                  namespace: 'AWS/SQS',
                  metricName: 'ApproximateNumberOfMessagesVisible',
                  dimensions: [{ name: 'QueueName', value: queueName }],
                },
                stat: 'Sum',
              },
            })),
            // The backlog is every lane's: urgent work needs workers as much as bulk work does.
            { id: 'visible', label: 'Visible job messages (all lanes)', expression: this.visibleExpression(), returnData: false },
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

  /**
   * Visible (waiting) job messages of every lane: the backlog the scaling divides by running tasks.
   * FILL: a lane with no data point (SQS stops reporting a queue idle for hours) counts as empty
   * instead of blanking the sum. Each lane's Average: SQS reports the count once a minute, so over
   * a longer period (the *worker at maximum* alarm's 5 minutes) a Sum counted the backlog five
   * times and paged at a fifth of its threshold (alarm review).
   */
  metricVisibleMessages(period: Duration = Duration.minutes(1)): cloudwatch.IMetric {
    return new cloudwatch.MathExpression({
      expression: this.visibleExpression(),
      usingMetrics: Object.fromEntries(
        this.laneQueueNames.map(({ lane, queueName }) => [
          visibleId(lane),
          new cloudwatch.Metric({
            namespace: 'AWS/SQS',
            metricName: 'ApproximateNumberOfMessagesVisible',
            dimensionsMap: { QueueName: queueName },
            statistic: 'Average',
            period,
          }),
        ]),
      ),
      label: 'Visible job messages (all lanes)',
      period,
    });
  }

  private visibleExpression(): string {
    return this.laneQueueNames.map(({ lane }) => `FILL(${visibleId(lane)}, 0)`).join(' + ');
  }

  /** The scaling signal, for the dashboard. */
  metricBacklogPerTask(period: Duration = Duration.minutes(1)): cloudwatch.IMetric {
    return new cloudwatch.MathExpression({
      expression: 'visible / IF(running > 0, running, 1)',
      usingMetrics: {
        visible: this.metricVisibleMessages(period),
        running: this.metricRunningTasks(period),
      },
      label: 'Backlog per task',
      period,
    });
  }
}

/** The metric-math ID of a lane's visible messages (`visibleUrgent`, `visibleBulk`). */
function visibleId(lane: JobLane): string {
  return `visible${lane.charAt(0).toUpperCase()}${lane.slice(1)}`;
}
