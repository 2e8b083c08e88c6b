// A worker task that a newer deployment of its ECS service has replaced stops taking jobs.
//
// Why: while it holds jobs a worker keeps ECS task scale-in protection (task-protection.ts), and
// ECS honours protection in deployments as well as in scale-in. In a backlog (a month end) a
// worker always holds jobs, so without this an old task would never let a deployment replace it:
// the rollout would wait for the whole backlog to drain (hours), and CloudFormation's update with
// it. So each task asks ECS, every `intervalMs`, which deployment of its service is the primary
// one. Once a newer deployment has all its tasks running, the old task retires: it stops
// receiving, hands back the jobs it claimed ahead (other tasks, the new ones, take them), lets
// the jobs already running finish under protection, and then goes idle: protection is dropped and
// ECS stops the task. A deployment waits for the longest job still running on an old task, not for
// the backlog.
//
// A newer deployment whose tasks are not all running (an image that crashes, before the circuit
// breaker rolls it back) retires nothing: the old tasks keep working. Nor does one read: two reads
// 30 s apart must find all its tasks running and its rollout not failed (steadilySuperseded). A task ECS did not start
// for a service deployment (a one-off `run-task`), a process outside ECS, or ECS not answering:
// nothing changes, as before this existed (an error is logged once per failing streak).

import type { Logger } from '../observability/log.ts';

/**
 * How long a retired worker lets its running jobs finish before releasing them (fenced, no attempt
 * spent: they resume on a new task from their last checkpoint); a SIGTERM shortens it to the stop's
 * drain. Below CloudFormation's wait for the worker service to stabilize (about 3 hours, not
 * configurable): past it the stack update fails and rolls back, and the rollback's deployment
 * waits on the same jobs. It was 24 h: a four-hour costing run on an old task failed the deploy.
 */
export const RETIRED_DRAIN_SECONDS = 2.5 * 3600;

/** What ECS says about this task's deployment and its service's primary one. */
export interface DeploymentState {
  /** The deployment that started this task (DescribeTasks' startedBy, `ecs-svc/…`). */
  own: string;
  /** The service's primary deployment (the one ECS is rolling out, or the one in place). */
  primary: string;
  /** The primary deployment's tasks running, and how many it wants. */
  primaryRunning: number;
  primaryDesired: number;
  /** The primary deployment's tasks that failed to start (ECS's failedTasks, which it stops counting once a task runs). */
  primaryFailed?: number;
  /** ECS's rolloutState of the primary deployment: FAILED once its circuit breaker gave up on it. */
  primaryRolloutState?: string;
}

/** Reads the state, or null for a task no service deployment started (nothing to watch). */
export type DeploymentProbe = () => Promise<DeploymentState | null>;

/** A newer deployment is the primary one and all of its tasks run (the watch retires on two such reads in a row: steady). */
export function superseded(s: DeploymentState): boolean {
  return s.own !== s.primary && s.primaryDesired > 0 && s.primaryRunning >= s.primaryDesired;
}

/**
 * Two reads an interval apart (30 s) that both find all of the same newer deployment's tasks
 * running, its launch failures not growing and its rollout not failed. One read was enough
 * before, and retirement cannot be undone: a new image whose tasks all reached RUNNING and then
 * crashed under load retired every old task, and the backlog stalled. A crash within the interval
 * shows as a task short on the second read; one later than that is the circuit breaker's, and the
 * retired tasks' jobs are already handed on.
 */
export function steadilySuperseded(previous: DeploymentState | null, now: DeploymentState): boolean {
  return (
    previous !== null &&
    superseded(previous) &&
    superseded(now) &&
    previous.primary === now.primary &&
    now.primaryRolloutState !== 'FAILED' &&
    (now.primaryFailed ?? 0) <= (previous.primaryFailed ?? 0)
  );
}

export interface DeploymentWatchOptions {
  probe: DeploymentProbe;
  log: Logger;
  /** Called once, when this task is superseded. */
  onSuperseded: (s: DeploymentState) => void;
  /** Between two reads (default 30 s). */
  intervalMs?: number;
}

export class DeploymentWatch {
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private failing = false;
  /** The last read: retirement needs two in a row (steadilySuperseded). */
  private previous: DeploymentState | null = null;
  private readonly intervalMs: number;

  constructor(private readonly o: DeploymentWatchOptions) {
    this.intervalMs = o.intervalMs ?? 30_000;
  }

  start(): void {
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** One read now; true when it found this task superseded (and said so). */
  async check(): Promise<boolean> {
    let state: DeploymentState | null;
    try {
      state = await this.o.probe();
    } catch (err) {
      if (!this.failing) {
        this.o.log.warn(
          { err },
          "could not read the worker service's deployments from ECS: this task keeps taking jobs; in a deployment it is replaced once its protection is dropped (the backlog drained)",
        );
      }
      this.failing = true;
      return false;
    }
    if (this.stopped) return false; // stopped while ECS was asked (a SIGTERM): nothing more to do
    if (this.failing) this.o.log.info("the worker service's deployments can be read again");
    this.failing = false;
    if (state === null) {
      this.o.log.info('this task was not started by a service deployment: no deployment watch');
      this.stop();
      return false;
    }
    const previous = this.previous;
    this.previous = state;
    if (!steadilySuperseded(previous, state)) return false;
    this.stop();
    this.o.onSuperseded(state);
    return true;
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(async () => {
      this.timer = null;
      if (!(await this.check())) this.schedule();
    }, this.intervalMs);
    this.timer.unref();
  }
}
