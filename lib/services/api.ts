// The HTTP API on Fargate behind an internet-facing Application Load Balancer. HTTPS with a
// current TLS policy when the environment names a certificate (HTTP redirects to it); plain HTTP
// otherwise, which only dev may do (config.ts refuses it elsewhere). Deletion protection where
// the environment asks. The task count belongs to the scaling target: the service has no
// DesiredCount, so a deployment never resets it. Access logs go to an encrypted, TLS-only bucket. The target
// group checks GET /healthz. On SQS the task may publish job messages to every lane, and work
// every lane's DLQ for the on-call routes (read, delete, resend to the job queue, SQS's move task
// back to it), never consume a job queue; the database secret, the API token and the on-call
// operator token arrive as ECS secrets.

import { Annotations, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import { FactName } from 'aws-cdk-lib/region-info';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct, type IDependable } from 'constructs';
import { ENV } from '../../runtime/config/env.ts';
import type { JobTimings } from '../../runtime/config/rules.ts';
import type { Retention } from '../../runtime/config/retention.ts';
import type { StuckThresholds } from '../../runtime/config/stuck-thresholds.ts';
import type { ApiConfig, EnvironmentName, LogRetentionDays, QueueConfig } from '../config.ts';
import type { JobDatabase } from '../database.ts';
import { acknowledge } from '../nag.ts';
import type { Network } from '../network.ts';
import type { JobQueues } from '../queues.ts';
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

/** Key prefix of the load balancer's access logs in their bucket. */
export const ACCESS_LOG_PREFIX = 'alb';

/**
 * ALB access logging for an environment-agnostic stack. `logAccessLogs()` needs the region at
 * synth to pick the ELB log-delivery principal; here the bucket policy names both: the regional
 * ELB account (looked up by region at deploy time, for regions older than August 2022) and the
 * log-delivery service principal (newer regions). In a region without an ELB account the first
 * statement falls back to this account, which grants nothing IAM does not already decide.
 */
function enableAccessLogs(alb: elbv2.ApplicationLoadBalancer, bucket: s3.IBucket, prefix: string): void {
  const stack = Stack.of(alb);
  const objects = bucket.arnForObjects(`${prefix}/AWSLogs/${stack.account}/*`);
  const elbAccount = stack.regionalFact(FactName.ELBV2_ACCOUNT, stack.account);
  bucket.addToResourcePolicy(
    new iam.PolicyStatement({
      sid: 'ElbAccountWritesAccessLogs',
      actions: ['s3:PutObject'],
      principals: [new iam.AccountPrincipal(elbAccount)],
      resources: [objects],
    }),
  );
  bucket.addToResourcePolicy(
    new iam.PolicyStatement({
      sid: 'ElbLogDeliveryWritesAccessLogs',
      actions: ['s3:PutObject'],
      principals: [new iam.ServicePrincipal('logdelivery.elasticloadbalancing.amazonaws.com')],
      resources: [objects],
    }),
  );
  alb.setAttribute('access_logs.s3.enabled', 'true');
  alb.setAttribute('access_logs.s3.bucket', bucket.bucketName);
  alb.setAttribute('access_logs.s3.prefix', prefix);
  // The load balancer checks it may write when the attribute is set: the policy must exist first.
  const policy = bucket.policy?.node.defaultChild;
  if (policy) alb.node.addDependency(policy);
}

/** The port the API listens on inside the task (PORT). */
export const API_PORT = 8080;
export const API_HEALTH_CHECK_PATH = '/healthz';

export interface ApiServiceProps {
  envName: EnvironmentName;
  config: ApiConfig;
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
  apiToken: secretsmanager.ISecret;
  /** The on-call operator's token (API_OPERATOR_TOKEN): the on-call routes need it, not the API token. */
  operatorToken: secretsmanager.ISecret;
  /** The execution role's fixed name: the secrets' resource policies admit it by name (secret-readers.ts). */
  executionRoleName: string;
  /** The task role's fixed name: the database secret's resource policy admits it too, to read the secret again (secret-readers.ts). */
  taskRoleName: string;
  logRetentionDays: LogRetentionDays;
  logRemovalPolicy: RemovalPolicy;
  accessLogRetentionDays: number;
  /** What must exist before the first task starts (the schema bootstrap). */
  startAfter: IDependable[];
}

export class ApiService extends Construct {
  readonly service: ecs.FargateService;
  readonly loadBalancer: elbv2.IApplicationLoadBalancer;
  readonly targetGroup: elbv2.ApplicationTargetGroup;
  /** The URL clients use (scheme by the listener, host the load balancer's DNS name). */
  readonly url: string;
  readonly minTasks: number;
  /** The tasks' log group (the stack's ApiLogGroup output). */
  readonly logGroup: logs.LogGroup;
  private readonly clusterName: string;

  constructor(scope: Construct, id: string, props: ApiServiceProps) {
    super(scope, id);
    const c = props.config;
    const https = c.certificateArn !== undefined;
    const vpc = props.network.vpc;
    this.minTasks = c.minTasks;
    this.clusterName = props.cluster.clusterName;

    // --- Load balancer --------------------------------------------------------------------
    const accessLogs = new s3.Bucket(this, 'AccessLogs', {
      // ALB access logs support SSE-S3 only (not SSE-KMS).
      encryption: s3.BucketEncryption.S3_MANAGED,
      enforceSSL: true,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      lifecycleRules: [{ expiration: Duration.days(props.accessLogRetentionDays) }],
      // Access logs are evidence: they outlive the stack and expire by the lifecycle rule.
      removalPolicy: RemovalPolicy.RETAIN,
    });
    acknowledge(
      accessLogs,
      'AwsSolutions-S1',
      'This bucket is itself the access-log destination of the load balancer; logging requests to it would need yet another log bucket and records only the ELB delivery writes.',
    );

    const albSecurityGroup = new ec2.SecurityGroup(this, 'LoadBalancerSecurityGroup', {
      vpc,
      description: `ERP jobs API load balancer (${https ? 'HTTPS, HTTP redirects' : 'HTTP'})`,
      allowAllOutbound: false,
    });
    const alb = new elbv2.ApplicationLoadBalancer(this, 'LoadBalancer', {
      vpc,
      vpcSubnets: props.network.publicSubnets,
      internetFacing: true,
      securityGroup: albSecurityGroup,
      dropInvalidHeaderFields: true,
      deletionProtection: c.deletionProtection,
    });
    enableAccessLogs(alb, accessLogs, ACCESS_LOG_PREFIX);
    acknowledge(
      albSecurityGroup,
      'AwsSolutions-EC23',
      'The load balancer is the public entry point of the API for the ERP clients; the ingress is limited to the listener ports, and the API authenticates every request with its bearer token.',
    );

    const targetGroup = new elbv2.ApplicationTargetGroup(this, 'Targets', {
      vpc,
      port: API_PORT,
      protocol: elbv2.ApplicationProtocol.HTTP,
      targetType: elbv2.TargetType.IP,
      deregistrationDelay: Duration.seconds(30),
      healthCheck: {
        path: API_HEALTH_CHECK_PATH,
        healthyHttpCodes: '200',
        interval: Duration.seconds(15),
        timeout: Duration.seconds(5),
        healthyThresholdCount: 2,
        unhealthyThresholdCount: 3,
      },
    });

    if (https) {
      alb.addListener('Https', {
        port: 443,
        protocol: elbv2.ApplicationProtocol.HTTPS,
        sslPolicy: elbv2.SslPolicy.RECOMMENDED_TLS,
        certificates: [elbv2.ListenerCertificate.fromArn(c.certificateArn!)],
        defaultTargetGroups: [targetGroup],
      });
      alb.addRedirect({
        sourcePort: 80,
        sourceProtocol: elbv2.ApplicationProtocol.HTTP,
        targetPort: 443,
        targetProtocol: elbv2.ApplicationProtocol.HTTPS,
      });
    } else {
      alb.addListener('Http', { port: 80, protocol: elbv2.ApplicationProtocol.HTTP, defaultTargetGroups: [targetGroup] });
      Annotations.of(this).addWarningV2(
        'erp-jobs:api-plain-http',
        `the ${props.envName} API is served over plain HTTP: set api.certificateArn in lib/config.ts or pass -c apiCertificateArn=ARN for an HTTPS listener`,
      );
    }
    this.url = `${https ? 'https' : 'http'}://${alb.loadBalancerDnsName}`;

    // --- Task -------------------------------------------------------------------------------
    const logGroup = (this.logGroup = new logs.LogGroup(this, 'Logs', {
      retention: props.logRetentionDays as logs.RetentionDays,
      removalPolicy: props.logRemovalPolicy,
    }));
    const executionRole = new iam.Role(this, 'TaskExecutionRole', {
      roleName: props.executionRoleName,
      assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
      description: 'ERP jobs API: pull the image, write logs, read the database secret and the two tokens at task start',
    });
    const taskRole = new iam.Role(this, 'TaskRole', {
      roleName: props.taskRoleName,
      assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
      description: 'ERP jobs API tasks: publish jobs, redrive the DLQs, the database secret read again on rotation, its reads counted',
    });
    const taskDefinition = new ecs.FargateTaskDefinition(this, 'Task', {
      cpu: c.cpu,
      memoryLimitMiB: c.memoryMiB,
      executionRole,
      taskRole,
      runtimePlatform: { cpuArchitecture: CPU_ARCHITECTURE, operatingSystemFamily: ecs.OperatingSystemFamily.LINUX },
    });
    const container = taskDefinition.addContainer('api', {
      image: serviceImage('api'),
      essential: true,
      ...hardenedContainerOptions(c.memoryMiB),
      logging: ecs.LogDrivers.awsLogs({ logGroup, streamPrefix: 'api' }),
      portMappings: [{ containerPort: API_PORT, protocol: ecs.Protocol.TCP }],
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
        [ENV.port]: String(API_PORT),
        [ENV.apiPoolSize]: String(c.poolSize),
        ...databaseSecretRenewal(props.database.appSecret, taskRole),
      },
      secrets: {
        ...databaseSecret(props.database.appSecret),
        [ENV.apiToken]: ecs.Secret.fromSecretsManager(props.apiToken),
        [ENV.apiOperatorToken]: ecs.Secret.fromSecretsManager(props.operatorToken),
      },
      linuxParameters: new ecs.LinuxParameters(this, 'Linux', { initProcessEnabled: true }),
    });
    hardenContainer(taskDefinition, container);
    // Its reads of the database secret that failed, and the secret's age (the "database secret
    // unreadable" and "database password not rotated" alarms count the API's as the workers').
    const metricsPolicy = new iam.Policy(this, 'MetricsPolicy', { statements: [putJobMetricsStatement(props.envName)] });
    taskRole.attachInlinePolicy(metricsPolicy);
    acknowledge(metricsPolicy, 'AwsSolutions-IAM5[Resource::*]', PUT_JOB_METRICS_ACK);
    acknowledge(
      taskDefinition.obtainExecutionRole(),
      'AwsSolutions-IAM5[Resource::*]',
      "The execution role's ecr:GetAuthorizationToken takes no resource ARN; image pulls, log writes and secret reads are scoped to this task's repository, log group and secrets.",
    );
    acknowledge(
      taskDefinition,
      'AwsSolutions-ECS2',
      'The environment holds only non-secret configuration (queue URLs, job timings, port, pool size); the database secret, the API token and the operator token are ECS secrets resolved from Secrets Manager.',
    );

    // --- Service ----------------------------------------------------------------------------
    const serviceSecurityGroup = new ec2.SecurityGroup(this, 'ServiceSecurityGroup', {
      vpc,
      description: 'ERP jobs API tasks: HTTP from the load balancer; out to PostgreSQL and HTTPS (SQS, Secrets Manager, ECR, logs)',
      allowAllOutbound: false,
    });
    props.network.allowHttpsToAws(serviceSecurityGroup, 'the API tasks');
    const service = new ecs.FargateService(this, 'Service', {
      cluster: props.cluster,
      taskDefinition,
      // No desiredCount: the scaling target owns the count (CloudFormation starts one task, the
      // target raises it to minTasks, and a deployment leaves the running count alone).
      vpcSubnets: props.network.appSubnets,
      securityGroups: [serviceSecurityGroup],
      assignPublicIp: false,
      minHealthyPercent: 100,
      maxHealthyPercent: c.deploymentMaxPercent,
      circuitBreaker: { rollback: true },
      healthCheckGracePeriod: Duration.seconds(60),
      propagateTags: ecs.PropagatedTagSource.SERVICE,
    });
    service.attachToApplicationTargetGroup(targetGroup);
    // Only now: the connections between the load balancer and the tasks both know their security groups.
    alb.connections.allowTo(service, ec2.Port.tcp(API_PORT), 'Load balancer to API tasks');
    for (const d of props.startAfter) service.node.addDependency(d);

    const scaling = service.autoScaleTaskCount({ minCapacity: c.minTasks, maxCapacity: c.maxTasks });
    scaling.scaleOnCpuUtilization('Cpu', {
      targetUtilizationPercent: 60,
      scaleOutCooldown: Duration.seconds(60),
      scaleInCooldown: Duration.seconds(300),
    });

    props.database.allowConnectionsFrom(service, 'the API service');
    // The ingress rule for this service lives under its security group; tasks wait for it.
    service.node.addDependency(serviceSecurityGroup);
    props.queues.grantPublish(taskDefinition.taskRole);
    // The on-call DLQ routes (runtime/oncall/dlq.ts), on every lane's DLQ: look at, delete and
    // resend dead letters, and `move` them back server-side. Resends and the move's destination
    // (the lane's job queue) use grantPublish above.
    props.queues.grantDeadLetterRedrive(taskDefinition.taskRole);

    this.service = service;
    this.loadBalancer = alb;
    this.targetGroup = targetGroup;
  }

  /** Targets the load balancer counts unhealthy (Maximum per period). */
  metricUnhealthyHosts(period: Duration = Duration.minutes(1)): cloudwatch.IMetric {
    return this.targetGroup.metrics.unhealthyHostCount({ period, statistic: 'Maximum' });
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

  /** Load balancer and target 5xx responses (Sum per period). */
  metric5xx(period: Duration = Duration.minutes(5)): cloudwatch.IMetric {
    const alb = this.loadBalancer.metrics;
    return new cloudwatch.MathExpression({
      expression: 'FILL(elb, 0) + FILL(target, 0)',
      usingMetrics: {
        elb: alb.httpCodeElb(elbv2.HttpCodeElb.ELB_5XX_COUNT, { period, statistic: 'Sum' }),
        target: alb.httpCodeTarget(elbv2.HttpCodeTarget.TARGET_5XX_COUNT, { period, statistic: 'Sum' }),
      },
      label: 'API 5xx (load balancer + targets)',
      period,
    });
  }
}
