// The ECS task a process runs in, from the task metadata endpoint (v4: ECS sets
// ECS_CONTAINER_METADATA_URI_V4 in every container). A worker's id starts with its task's id, so
// on-call goes from a job's owner (`jobs show`, the lease-lost log lines) straight to the task to
// stop (`aws ecs stop-task --cluster <ClusterName> --task <task id>`); a host name on Fargate
// (ip-10-0-1-23…) names no task.

import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

/** The task's id (the last part of its ARN), or undefined outside ECS or when the endpoint does not answer in time. */
export async function ecsTaskId(
  env: Record<string, string | undefined>,
  fetchFn: typeof fetch = fetch,
  timeoutMs = 2000,
): Promise<string | undefined> {
  const uri = env.ECS_CONTAINER_METADATA_URI_V4?.trim();
  if (!uri) return undefined;
  try {
    const res = await fetchFn(`${uri}/task`, { signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) return undefined;
    const arn = ((await res.json()) as { TaskARN?: unknown }).TaskARN;
    if (typeof arn !== 'string') return undefined;
    const id = arn.slice(arn.lastIndexOf('/') + 1);
    return /^[A-Za-z0-9]{1,64}$/.test(id) ? id : undefined;
  } catch {
    return undefined;
  }
}

/** A worker's id when JOBS_WORKER_ID sets none: `<task id>-<random>` in ECS, else `<host>-<pid>-<random>`. */
export function defaultWorkerId(taskId: string | undefined): string {
  const random = randomBytes(3).toString('hex');
  return taskId ? `${taskId}-${random}` : `${hostname()}-${process.pid}-${random}`;
}
