// What both services' containers are given, keyed by the runtime's own variable names
// (runtime/config/env.ts): the checked job timings and queue URLs as plain environment, the
// database secret (and the API's tokens) as ECS secrets that ECS resolves from Secrets Manager at
// task start, never as environment values. And the two images, each built from its Dockerfile.

import { Aws } from 'aws-cdk-lib';
import { IgnoreMode } from 'aws-cdk-lib';
import { Platform } from 'aws-cdk-lib/aws-ecr-assets';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { ENV, RDS_CA_BUNDLE_PATH } from '../../runtime/config/env.ts';
import type { JobTimings } from '../../runtime/config/rules.ts';
import { metricNamespace } from '../../runtime/metrics/names.ts';
import { STUCK_ENV, type StuckThresholds } from '../../runtime/config/stuck-thresholds.ts';
import type { EnvironmentName } from '../config.ts';
import type { JobQueues } from '../queues.ts';
import { REPO_ROOT } from '../paths.ts';

export interface JobEnvironmentProps {
  envName: EnvironmentName;
  jobTimings: JobTimings;
  queues: JobQueues;
  /** When a job counts as stuck: both services judge it (the worker's JobsStuck metric, the API's on-call route). */
  stuckJobs: StuckThresholds;
}

/** Plain, non-secret configuration both services read. */
export function jobEnvironment(p: JobEnvironmentProps): Record<string, string> {
  const t = p.jobTimings;
  return {
    [ENV.queueUrl]: p.queues.queue.queueUrl,
    [ENV.dlqUrl]: p.queues.deadLetterQueue.queueUrl,
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
  };
}

/** The whole RDS secret JSON as DATABASE_SECRET; the runtime builds its connection URL from it. */
export function databaseSecret(secret: secretsmanager.ISecret): Record<string, ecs.Secret> {
  return { [ENV.databaseSecret]: ecs.Secret.fromSecretsManager(secret) };
}

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
