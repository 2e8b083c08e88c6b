// The ECS task a process runs in, from the task metadata endpoint (v4: ECS sets
// ECS_CONTAINER_METADATA_URI_V4 in every container). A worker's id starts with its task's id, so
// on-call goes from a job's owner (`jobs show`, the lease-lost log lines) straight to the task to
// stop (`aws ecs stop-task --cluster <ClusterName> --task <task id>`); a host name on Fargate
// (ip-10-0-1-23…) names no task. And which deployment of its service started it: a worker that a
// newer deployment has replaced stops taking jobs (worker/deployment-watch.ts).

import { DescribeServicesCommand, DescribeTasksCommand, type ECSClient } from '@aws-sdk/client-ecs';
import type { DeploymentProbe } from '../worker/deployment-watch.ts';
import type { EcsTask } from './ecs-metadata.ts';

export { defaultWorkerId, type EcsTask, ecsTask, ecsTaskId } from './ecs-metadata.ts';

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
