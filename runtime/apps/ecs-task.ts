// The ECS task a process runs in, from the task metadata endpoint (v4: ECS sets
// ECS_CONTAINER_METADATA_URI_V4 in every container). A worker's id starts with its task's id, so
// on-call goes from a job's owner (`jobs show`, the lease-lost log lines) straight to the task to
// stop (`aws ecs stop-task --cluster <ClusterName> --task <task id>`); a host name on Fargate
// (ip-10-0-1-23…) names no task. And which deployment of its service started it: a worker that a
// newer deployment has replaced stops taking jobs (worker/deployment-watch.ts).

import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { DescribeServicesCommand, DescribeTasksCommand, type ECSClient } from '@aws-sdk/client-ecs';
import type { DeploymentProbe } from '../worker/deployment-watch.ts';

/** The task a container runs in, as the metadata endpoint names it. */
export interface EcsTask {
  /** The task's ARN (DescribeTasks takes it). */
  taskArn: string;
  /** Its cluster (name or ARN; ECS takes either); the endpoint always says it. */
  cluster: string | undefined;
  /** The last part of its ARN. */
  taskId: string;
}

/** The task this process runs in, or undefined outside ECS or when the endpoint does not answer in time. */
export async function ecsTask(
  env: Record<string, string | undefined>,
  fetchFn: typeof fetch = fetch,
  timeoutMs = 2000,
): Promise<EcsTask | undefined> {
  const uri = env.ECS_CONTAINER_METADATA_URI_V4?.trim();
  if (!uri) return undefined;
  try {
    const res = await fetchFn(`${uri}/task`, { signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) return undefined;
    const { TaskARN: arn, Cluster: cluster } = (await res.json()) as { TaskARN?: unknown; Cluster?: unknown };
    if (typeof arn !== 'string') return undefined;
    const taskId = arn.slice(arn.lastIndexOf('/') + 1);
    if (!/^[A-Za-z0-9]{1,64}$/.test(taskId)) return undefined;
    return { taskArn: arn, cluster: typeof cluster === 'string' && cluster !== '' ? cluster : undefined, taskId };
  } catch {
    return undefined;
  }
}

/** The task's id (the last part of its ARN), or undefined outside ECS or when the endpoint does not answer in time. */
export async function ecsTaskId(
  env: Record<string, string | undefined>,
  fetchFn: typeof fetch = fetch,
  timeoutMs = 2000,
): Promise<string | undefined> {
  return (await ecsTask(env, fetchFn, timeoutMs))?.taskId;
}

/** A worker's id when JOBS_WORKER_ID sets none: `<task id>-<random>` in ECS, else `<host>-<pid>-<random>`. */
export function defaultWorkerId(taskId: string | undefined): string {
  const random = randomBytes(3).toString('hex');
  return taskId ? `${taskId}-${random}` : `${hostname()}-${process.pid}-${random}`;
}

/**
 * What ECS says about a task's deployment (worker/deployment-watch.ts): the deployment that
 * started it (DescribeTasks' startedBy, read once) and its service's primary deployment
 * (DescribeServices, each call). Null for a task no service deployment started (a one-off
 * `run-task`). The worker's task role may describe its own cluster's tasks and services only.
 */
export function ecsDeploymentProbe(ecs: ECSClient, task: EcsTask): DeploymentProbe {
  let own: { deployment: string; service: string } | null | undefined;
  return async () => {
    if (!task.cluster) return null;
    if (own === undefined) {
      const out = await ecs.send(new DescribeTasksCommand({ cluster: task.cluster, tasks: [task.taskArn] }));
      const t = out.tasks?.[0];
      if (!t)
        throw new Error(
          `ECS does not describe task ${task.taskArn}: ${(out.failures ?? []).map((f) => f.reason).join(', ') || 'no answer'}`,
        );
      own =
        t.startedBy?.startsWith('ecs-svc/') && t.group?.startsWith('service:')
          ? { deployment: t.startedBy, service: t.group.slice('service:'.length) }
          : null;
    }
    if (own === null) return null;
    const out = await ecs.send(new DescribeServicesCommand({ cluster: task.cluster, services: [own.service] }));
    const primary = out.services?.[0]?.deployments?.find((d) => d.status === 'PRIMARY');
    if (!primary?.id) throw new Error(`ECS names no primary deployment for service ${own.service}`);
    return {
      own: own.deployment,
      primary: primary.id,
      primaryRunning: primary.runningCount ?? 0,
      primaryDesired: primary.desiredCount ?? 0,
      primaryFailed: primary.failedTasks ?? 0,
      ...(primary.rolloutState ? { primaryRolloutState: primary.rolloutState } : {}),
    };
  };
}
