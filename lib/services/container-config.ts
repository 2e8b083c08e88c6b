// What both services' containers are given, keyed by the runtime's own variable names
// (runtime/config/env.ts): the checked job timings and queue URLs as plain environment, the
// database secret (and the API's tokens) as ECS secrets that ECS resolves from Secrets Manager at
// task start, never as environment values. And the two images, each built from its Dockerfile,
// and how their containers run: read-only root file system with a writable /tmp, the images'
// unprivileged user, a hard memory limit.

import { Aws } from 'aws-cdk-lib';
import { IgnoreMode } from 'aws-cdk-lib';
import { Platform } from 'aws-cdk-lib/aws-ecr-assets';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { ENV, RDS_CA_BUNDLE_PATH } from '../../runtime/config/env.ts';
import { retentionEnv, type Retention } from '../../runtime/config/retention.ts';
import type { JobTimings } from '../../runtime/config/rules.ts';
import { metricNamespace } from '../../runtime/observability/metric-names.ts';
import { STUCK_ENV, type StuckThresholds } from '../../runtime/config/stuck-thresholds.ts';
import type { EnvironmentName, QueueConfig } from '../config.ts';
import type { JobQueues } from '../queues.ts';
import { REPO_ROOT } from '../paths.ts';

export interface JobEnvironmentProps {
  envName: EnvironmentName;
  jobTimings: JobTimings;
  queues: JobQueues;
  /** When a job counts as stuck: both services judge it (the worker's JobsStuck metric, the API's on-call route). */
  stuckJobs: StuckThresholds;
  /** database.idleInTransactionTimeoutSeconds: the services' sessions end a transaction left idle this long. */
  idleInTransactionTimeoutSeconds: number;
  /** jobRetention: the API decides a new job's keep (JOBS_KEEP_FINISHED_DAYS), the workers' pruner all four. */
  retention: Retention;
  /** queues.httpClient (JOBS_SQS_HTTP_CLIENT), when set. */
  sqsHttpClient?: QueueConfig['httpClient'];
}

/**
 * PGOPTIONS: startup options node-postgres (like libpq) sends with every connection it opens when
 * the connection string has none. Here: end a transaction left idle for
 * database.idleInTransactionTimeoutSeconds. No statement_timeout: a job's statement may run long
 * (the API sets its own, runtime/apps/api.ts). docs/deploy.md#database-diagnostics.
 */
export const PG_OPTIONS_VARIABLE = 'PGOPTIONS';
export function pgOptions(idleInTransactionTimeoutSeconds: number): string {
  return `-c idle_in_transaction_session_timeout=${idleInTransactionTimeoutSeconds}s`;
}

/** Plain, non-secret configuration both services read. */
export function jobEnvironment(p: JobEnvironmentProps): Record<string, string> {
  const t = p.jobTimings;
  const urgent = p.queues.lanes.urgent;
  return {
    [ENV.queueUrl]: p.queues.queue.queueUrl,
    [ENV.dlqUrl]: p.queues.deadLetterQueue.queueUrl,
    // URLs are not secrets: plain environment, as the bulk lane's.
    [ENV.urgentQueueUrl]: urgent.queue.queueUrl,
    [ENV.urgentDlqUrl]: urgent.deadLetterQueue.queueUrl,
    [ENV.region]: Aws.REGION,
    [ENV.leaseSeconds]: String(t.leaseSeconds),
    [ENV.heartbeatSeconds]: String(t.heartbeatSeconds),
    [ENV.visibilityTimeoutSeconds]: String(t.visibilityTimeoutSeconds),
    [ENV.maxAttempts]: String(t.maxAttempts),
    [ENV.maxReceiveCount]: String(t.maxReceiveCount),
    [ENV.backoffBaseSeconds]: String(t.backoffBaseSeconds),
    [ENV.backoffMaxSeconds]: String(t.backoffMaxSeconds),
    [ENV.concurrency]: String(t.concurrency),
    [ENV.drainSeconds]: String(t.drainSeconds),
    [ENV.metricsNamespace]: metricNamespace(p.envName),
    // Verified TLS to the database: the images carry the RDS CA bundle here (docker/*.Dockerfile).
    [ENV.databaseCaFile]: RDS_CA_BUNDLE_PATH,
    [STUCK_ENV.runningSeconds]: String(p.stuckJobs.runningSeconds),
    [STUCK_ENV.pendingSeconds]: String(p.stuckJobs.pendingSeconds),
    [PG_OPTIONS_VARIABLE]: pgOptions(p.idleInTransactionTimeoutSeconds),
    ...retentionEnv(p.retention),
    ...(p.sqsHttpClient ? { [ENV.sqsHttpClient]: p.sqsHttpClient } : {}),
  };
}

/** The images' unprivileged `node` user (uid and gid 1000 in the official node images), explicit so ECS runs nothing as root. */
export const SERVICE_USER = '1000:1000';
/** The one writable path of the containers: node and native tooling put temporary files here. */
export const TMP_PATH = '/tmp';

/**
 * How both services' containers run: the root file system read-only, a task-local scratch volume
 * at /tmp (Fargate copies the image's /tmp, mode 1777, into it), the images' `node` user, and the
 * task's memory as the container's hard limit.
 */
export function hardenContainer(taskDefinition: ecs.FargateTaskDefinition, container: ecs.ContainerDefinition): void {
  taskDefinition.addVolume({ name: 'tmp' });
  container.addMountPoints({ sourceVolume: 'tmp', containerPath: TMP_PATH, readOnly: false });
}

export function hardenedContainerOptions(
  memoryMiB: number,
): Pick<ecs.ContainerDefinitionOptions, 'readonlyRootFilesystem' | 'user' | 'memoryLimitMiB'> {
  return { readonlyRootFilesystem: true, user: SERVICE_USER, memoryLimitMiB: memoryMiB };
}

/** The whole RDS secret JSON as DATABASE_SECRET; the runtime builds its connection URL from it. */
export function databaseSecret(secret: secretsmanager.ISecret): Record<string, ecs.Secret> {
  return { [ENV.databaseSecret]: ecs.Secret.fromSecretsManager(secret) };
}

/**
 * The same secret's ARN as DATABASE_SECRET_ARN (an ARN is not a secret), and its read granted to
 * the task role: a task reads the secret again when PostgreSQL refuses a login and every hour, so
 * a rotated password reaches running tasks without a deployment (runtime/db/credentials.ts).
 */
export function databaseSecretRenewal(secret: secretsmanager.ISecret, taskRole: iam.IGrantable): Record<string, string> {
  secret.grantRead(taskRole);
  return { [ENV.databaseSecretArn]: secret.secretArn };
}

/**
 * Lets a task publish this environment's job metrics (the worker its job counts, the API its
 * database-secret reads): cloudwatch:PutMetricData takes no resource ARN, so the statement is
 * scoped by the cloudwatch:namespace condition instead (PUT_JOB_METRICS_ACK says so to cdk-nag).
 */
export function putJobMetricsStatement(envName: EnvironmentName): iam.PolicyStatement {
  return new iam.PolicyStatement({
    sid: 'PutJobMetrics',
    actions: ['cloudwatch:PutMetricData'],
    resources: ['*'],
    conditions: { StringEquals: { 'cloudwatch:namespace': metricNamespace(envName) } },
  });
}

export const PUT_JOB_METRICS_ACK =
  "cloudwatch:PutMetricData supports no resource ARNs; the statement is limited by the cloudwatch:namespace condition to this environment's job metrics namespace.";

export type ServiceImageName = 'api' | 'worker';

/** Fargate runs the images on x86-64; the Dockerfiles build for it. */
export const CPU_ARCHITECTURE = ecs.CpuArchitecture.X86_64;

/**
 * The image of one service, built from docker/<name>.Dockerfile with the repository as the
 * context (.dockerignore keeps it to what the bundle needs). Synth only stages the context;
 * `cdk deploy` builds and pushes.
 */
export function serviceImage(name: ServiceImageName): ecs.ContainerImage {
  return ecs.ContainerImage.fromAsset(REPO_ROOT, {
    file: `docker/${name}.Dockerfile`,
    platform: Platform.LINUX_AMD64,
    ignoreMode: IgnoreMode.DOCKER,
    assetName: `erp-jobs-${name}`,
  });
}
