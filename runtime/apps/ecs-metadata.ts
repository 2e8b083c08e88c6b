// The ECS task a process runs in, from the task metadata endpoint (v4: ECS sets
// ECS_CONTAINER_METADATA_URI_V4 in every container), without the AWS SDK: the API names its
// database connections by it and a worker's id starts with it (ecs-task.ts has what asks ECS).

import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

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
