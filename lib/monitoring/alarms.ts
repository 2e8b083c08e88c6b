// The alarms that page on-call, all in this file, each to the on-call topic. Every description
// says what the alarm means in this system and names the runbook section to open
// (docs/runbooks/README.md#<anchor>). Each priority lane's queues have their own alarms (the
// bulk lane's keep the names they had before lanes; the urgent lane's say "urgent" and open
// their own, more pressing runbook sections). The platform's own failure metrics are watched by
// the names the worker emits them under (runtime/observability/metric-names.ts), with no
// dimensions. Beyond the queues: the database (CPU, storage, memory, connections against the
// connection budget), the API (5xx, unhealthy targets, tasks below the minimum) and a worker
// fleet at its maximum with a backlog across every lane. The API's 5xx and unhealthy-target
// alarms are its ECS deployment alarms: a deployment that sets them off rolls back.

import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import { Construct } from 'constructs';
import { METRIC, metricNamespace } from '../../runtime/observability/metric-names.ts';
import { INSTANCE_MEMORY_GIB, type AlarmConfig, type ConnectionBudget, type DatabaseConfig, type EnvironmentName } from '../config.ts';
import type { JobDatabase } from '../database.ts';
import type { PasswordRotation } from '../password-rotation.ts';
import type { JobQueues } from '../queues.ts';
import type { ApiService } from '../services/api.ts';
import type { WorkerService } from '../services/worker.ts';
import type { OnCallTopic } from './on-call-topic.ts';
import { runbookRef, RUNBOOK_SECTION, type RunbookSection } from './runbook.ts';

export interface JobAlarmsProps {
  envName: EnvironmentName;
  config: AlarmConfig;
  onCall: OnCallTopic;
  queues: JobQueues;
  api: ApiService;
  worker: WorkerService;
  database: JobDatabase;
  /** Its function's errors: a rotation step that failed. */
  passwordRotation: PasswordRotation;
  databaseConfig: DatabaseConfig;
  /** The connection budget config.ts computes: the connections alarm watches its ceiling. */
  connectionBudget: ConnectionBudget;
}

export type JobAlarmName =
  | 'dlqNotEmpty'
  | 'urgentDlqNotEmpty'
  | 'dlqOldestMessageAge'
  | 'urgentDlqOldestMessageAge'
  | 'queueOldestMessageAge'
  | 'urgentQueueOldestMessageAge'
  | 'leasesLost'
  | 'jobsDeadLettered'
  | 'api5xx'
  | 'workerTasksBelowMinimum'
  | 'jobsStuck'
  | 'workersSilent'
  | 'scheduleFailing'
  | 'publishingFailing'
  | 'passwordRotationFailing'
  | 'databaseSecretUnreadable'
  | 'databasePasswordNotRotated'
  | 'databaseLoginsRefused'
  | 'claimsFailing'
  | 'sqsCallsFailing'
  | 'apiUnhealthyTargets'
  | 'apiTasksBelowMinimum'
  | 'workerAtMaximum'
  | 'databaseCpu'
  | 'databaseFreeStorage'
  | 'databaseFreeableMemory'
  | 'databaseConnections';

/** The alarms that roll an API deployment back (ECS deployment alarms). */
export const API_DEPLOYMENT_ALARMS: readonly JobAlarmName[] = ['api5xx', 'apiUnhealthyTargets'];

const GIB = 1024 ** 3;

/** *Workers silent*: no stuck-job report (the workers' once-a-minute heartbeat) in two 5-minute periods in a row. */
export const WORKERS_SILENT_ALARM = { periodMinutes: 5, evaluationPeriods: 2 } as const;

/**
 * Stuck jobs (runtime/oncall/stuck.ts): every worker publishes the count once a minute, so Maximum
 * over 5 minutes is the count whatever the number of workers. The thresholds that make a job
 * stuck (its type's expected maximum, JOBS_STUCK_*) already wait; two periods more keep a job
 * that finishes just past its limit from paging.
 */
export const JOBS_STUCK_ALARM = { threshold: 1, periodMinutes: 5, evaluationPeriods: 2 } as const;

/**
 * A schedule whose due occurrence cannot be enqueued (runtime/maintenance/scheduler.ts): each
 * failed pass, every 5 s per task, counts SchedulePassesFailed. A failover fails passes for a
 * minute or two, which one or two periods hold; a failure in each of three 5-minute periods is a
 * schedule that has not fired for 10–15 minutes and will not by itself.
 */
export const SCHEDULE_FAILING_ALARM = { periodMinutes: 5, evaluationPeriods: 3 } as const;

/**
 * Committed jobs that cannot reach SQS (runtime/store/outbox.ts OutboxRelay): each relay pass that
 * could not publish some counts OutboxPublishesFailed (the API's relay and each worker's, every
 * second). SQS down for a minute or two fails passes in one or two periods; a failure in each of
 * three 5-minute periods is a queue deleted, a permission revoked or an endpoint gone: jobs are
 * committed and nothing runs them. Before, only *jobs stuck* noticed, after about 25 minutes.
 */
export const PUBLISHING_FAILING_ALARM = { periodMinutes: 5, evaluationPeriods: 3 } as const;

/**
 * Tasks (workers, API) that cannot read the database secret (runtime/db/credentials.ts reads it hourly): one
 * failed hour is a Secrets Manager blip; three in a row is a task role or a route that lost
 * Secrets Manager, which the rotation after next turns into refused logins.
 */
export const DATABASE_SECRET_UNREADABLE_ALARM = { periodMinutes: 60, evaluationPeriods: 3 } as const;

/**
 * A rotation that stopped happening (a failure nobody fixed, a rotation left pending, the schedule
 * gone): the secret's current version older than the rotation period plus this many days, as the
 * tasks see it hourly (DatabaseSecretAgeMs).
 */
export const DATABASE_PASSWORD_NOT_ROTATED_GRACE_DAYS = 2;

/**
 * Workers whose fresh logins the database has refused (DatabaseLoginsRefused, counted at each
 * probe while they have stopped receiving) in each of this many minutes: not a rotation being
 * followed (that takes one secret read, seconds), but credentials that do not match.
 */
export const DATABASE_LOGINS_REFUSED_ALARM = { periodMinutes: 1, evaluationPeriods: 5 } as const;

/**
 * Workers whose claims fail while the database answers (ClaimsFailed: a grant revoked, a table or
 * function changed by hand, a statement timeout), in 3 of 5 minutes. A failed claim's messages
 * return after the visibility timeout (90 s by default), so with little traffic the failures come
 * a minute or two apart: 3 minutes in a row would miss them. A one-off (a deadlock that outlived
 * its retries) fills one. Paged before the messages reach the DLQ (maxReceiveCount × the
 * visibility timeout: 15 minutes by default), with the cause rather than a DLQ of healthy jobs.
 */
export const CLAIMS_FAILING_ALARM = { periodMinutes: 1, evaluationPeriods: 5, datapointsToAlarm: 3 } as const;

/**
 * The workers' SQS calls failing after the wire's own retries (SqsCallsFailed: throttling, a
 * permission revoked, a queue gone, SQS not answering) in each of 5 minutes: a lane's receive is
 * retried at most 30 s apart, so a failure that lasts fills every minute, and a brownout of a
 * minute or two does not page. Before, such an outage paged only through its consequences (jobs
 * stuck, the queue's age), a quarter of an hour later and without its cause.
 */
export const SQS_CALLS_FAILING_ALARM = { periodMinutes: 1, evaluationPeriods: 5 } as const;

/** A platform metric as the worker emits it: its environment's namespace, no dimensions. */
export function jobMetric(
  envName: EnvironmentName,
  name: (typeof METRIC)[keyof typeof METRIC],
  statistic: string,
  period: Duration,
): cloudwatch.Metric {
  return new cloudwatch.Metric({ namespace: metricNamespace(envName), metricName: name, statistic, period });
}

export class JobAlarms extends Construct {
  readonly alarms: Readonly<Record<JobAlarmName, cloudwatch.Alarm>>;
  /** Each alarm's name, as created (what `aws cloudwatch set-alarm-state --alarm-name` takes). */
  readonly names: Partial<Record<JobAlarmName, string>> = {};

  constructor(scope: Construct, id: string, props: JobAlarmsProps) {
    super(scope, id);
    const { envName, config: c, queues } = props;
    const prefix = `ERP jobs ${envName}`;
    const describe = (meaning: string, section: RunbookSection) => `${prefix}: ${meaning} Runbook: ${runbookRef(section)}`;
    const minutes = (s: number) => Math.round(s / 60);

    const make = (name: JobAlarmName, p: cloudwatch.AlarmProps & { alarmName: string }): cloudwatch.Alarm => {
      const alarm = new cloudwatch.Alarm(this, name.charAt(0).toUpperCase() + name.slice(1), p);
      props.onCall.notifyOn(alarm, p.alarmName);
      this.names[name] = p.alarmName;
      return alarm;
    };
    const db = props.database.instance;
    const dbc = props.databaseConfig;
    const memoryGib = INSTANCE_MEMORY_GIB[dbc.instanceClass];
    if (memoryGib === undefined)
      throw new Error(
        `JobAlarms: database.instanceClass = ${dbc.instanceClass} is not in INSTANCE_MEMORY_GIB (lib/config.ts): the freeable-memory alarm needs its memory`,
      );
    const budget = props.connectionBudget;
    const { worker, api } = props;
    const fmtGib = (bytes: number) => `${(bytes / GIB).toFixed(1)} GiB`;
    const freeStorageBytes = Math.round(c.databaseFreeStorageFraction * dbc.allocatedStorageGiB * GIB);
    const freeMemoryBytes = Math.round(c.databaseFreeableMemoryFraction * memoryGib * GIB);
    const atMaxPeriods = Math.max(1, Math.round(c.workerAtMaximumMinutes / 5));
    const urgent = queues.lanes.urgent;

    this.alarms = {
      dlqNotEmpty: make('dlqNotEmpty', {
        alarmName: `${prefix} DLQ not empty`,
        alarmDescription: describe(
          "the bulk (default) lane's dead-letter queue holds at least one message. A job reached its attempt cap or failed non-retryably, or the worker met a message it cannot handle (unparseable body, unknown job, crash loop past maxReceiveCount). Nothing retries a dead letter: triage it. First: jobs dlq list (each letter's job, verdict and what to do), then jobs dead show ID.",
          RUNBOOK_SECTION.dlqNotEmpty,
        ),
        metric: queues.deadLetterQueue.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(1), statistic: 'Maximum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        threshold: 0,
        evaluationPeriods: 1,
        // SQS stops reporting an idle, empty queue: no data means nothing arrived.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      urgentDlqNotEmpty: make('urgentDlqNotEmpty', {
        alarmName: `${prefix} urgent DLQ not empty`,
        alarmDescription: describe(
          "the URGENT lane's dead-letter queue holds at least one message: urgent work (what the ERP marked must not wait, e.g. month-end postings) died or could not be handled, and nothing retries it. Triage it before anything in the bulk DLQ: jobs dlq list --lane urgent.",
          RUNBOOK_SECTION.urgentDlqNotEmpty,
        ),
        metric: urgent.deadLetterQueue.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(1), statistic: 'Maximum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        threshold: 0,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      dlqOldestMessageAge: make('dlqOldestMessageAge', {
        alarmName: `${prefix} DLQ oldest message age`,
        alarmDescription: describe(
          `a dead letter of the bulk lane has waited more than ${minutes(c.deadLetterOldestMessageAgeSeconds)} minutes without triage; the DLQ expires messages after its retention, and the reason then exists only in the job row.`,
          RUNBOOK_SECTION.dlqOldestMessageAge,
        ),
        metric: queues.deadLetterQueue.metricApproximateAgeOfOldestMessage({ period: Duration.minutes(5), statistic: 'Maximum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: c.deadLetterOldestMessageAgeSeconds,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      urgentDlqOldestMessageAge: make('urgentDlqOldestMessageAge', {
        alarmName: `${prefix} urgent DLQ oldest message age`,
        alarmDescription: describe(
          `an urgent dead letter has waited more than ${minutes(c.deadLetterOldestMessageAgeSeconds)} minutes without triage: urgent work has been stopped all that time, and the DLQ expires messages after its retention.`,
          RUNBOOK_SECTION.urgentDlqOldestMessageAge,
        ),
        metric: urgent.deadLetterQueue.metricApproximateAgeOfOldestMessage({ period: Duration.minutes(5), statistic: 'Maximum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: c.deadLetterOldestMessageAgeSeconds,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      queueOldestMessageAge: make('queueOldestMessageAge', {
        alarmName: `${prefix} job queue oldest message age`,
        alarmDescription: describe(
          `the oldest message of the bulk (default) lane's job queue is more than ${minutes(c.queueOldestMessageAgeSeconds)} minutes old (running jobs keep their message, so this includes the longest job). Workers are not keeping up, are stuck, or a job runs far past its expected time.`,
          RUNBOOK_SECTION.queueOldestMessageAge,
        ),
        metric: queues.queue.metricApproximateAgeOfOldestMessage({ period: Duration.minutes(5), statistic: 'Maximum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: c.queueOldestMessageAgeSeconds,
        evaluationPeriods: 3,
        datapointsToAlarm: 3,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      urgentQueueOldestMessageAge: make('urgentQueueOldestMessageAge', {
        alarmName: `${prefix} urgent job queue oldest message age`,
        alarmDescription: describe(
          `the oldest message of the URGENT lane's job queue is more than ${minutes(c.queueOldestMessageAgeSeconds)} minutes old (running jobs keep their message, so this includes the longest urgent job). Workers take urgent jobs first, so this is not a bulk backlog: no worker is claiming, the fleet is saturated by urgent work alone, or an urgent job runs far past its expected time.`,
          RUNBOOK_SECTION.urgentQueueOldestMessageAge,
        ),
        metric: urgent.queue.metricApproximateAgeOfOldestMessage({ period: Duration.minutes(5), statistic: 'Maximum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: c.queueOldestMessageAgeSeconds,
        evaluationPeriods: 3,
        datapointsToAlarm: 3,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      leasesLost: make('leasesLost', {
        alarmName: `${prefix} leases lost`,
        alarmDescription: describe(
          `workers lost at least ${c.leasesLostPer15Minutes} job leases in 15 minutes: a heartbeat or a completion found the job reclaimed, or the lease ran out before it could be renewed, and the handler was aborted (a cancel is not counted). A crashed task costs a few; more means heartbeats are late (CPU starvation, database latency, event-loop stalls) and jobs are running twice.`,
          RUNBOOK_SECTION.leasesLost,
        ),
        metric: jobMetric(envName, METRIC.leasesLost, 'Sum', Duration.minutes(15)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: c.leasesLostPer15Minutes,
        evaluationPeriods: 1,
        // The worker emits only when it loses a lease.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      jobsDeadLettered: make('jobsDeadLettered', {
        alarmName: `${prefix} jobs dead-lettered`,
        alarmDescription: describe(
          `at least ${c.jobsDeadLetteredPer5Minutes} job(s) became dead in 5 minutes: they exhausted their attempts or failed non-retryably, and each has its reason (error, attempts, last owner) in the job row and the DLQ.`,
          RUNBOOK_SECTION.jobsDeadLettered,
        ),
        metric: jobMetric(envName, METRIC.jobsDeadLettered, 'Sum', Duration.minutes(5)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: c.jobsDeadLetteredPer5Minutes,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      api5xx: make('api5xx', {
        alarmName: `${prefix} API 5xx`,
        alarmDescription: describe(
          `the API answered at least ${c.api5xxPer5Minutes} requests with 5xx in 5 minutes (load balancer or tasks): ERP clients cannot enqueue or read jobs. Unhealthy targets, the database, or a bad deployment.`,
          RUNBOOK_SECTION.api5xx,
        ),
        metric: props.api.metric5xx(Duration.minutes(5)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: c.api5xxPer5Minutes,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      workerTasksBelowMinimum: make('workerTasksBelowMinimum', {
        alarmName: `${prefix} worker tasks below minimum`,
        alarmDescription: describe(
          `fewer than ${props.worker.minTasks} worker task(s) have been running for 5 minutes: jobs are not being claimed and the relay that publishes committed jobs is not running. Tasks are failing to start or crashing. Missing data counts as breaching: no Container Insights data means no running workers can be seen.`,
          RUNBOOK_SECTION.workerTasksBelowMinimum,
        ),
        metric: props.worker.metricRunningTasks(Duration.minutes(1)),
        comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        threshold: props.worker.minTasks,
        evaluationPeriods: 5,
        datapointsToAlarm: 5,
        treatMissingData: cloudwatch.TreatMissingData.BREACHING,
      }),
      jobsStuck: make('jobsStuck', {
        alarmName: `${prefix} jobs stuck`,
        alarmDescription: describe(
          `at least ${JOBS_STUCK_ALARM.threshold} job has been stuck for ${JOBS_STUCK_ALARM.periodMinutes * JOBS_STUCK_ALARM.evaluationPeriods} minutes: running past its type's expected maximum (a hung handler or a slow dependency), or due and not picked up (no worker claims it, or its lease expired and nobody reclaimed it). \`jobs stuck\` lists them with the reason.`,
          RUNBOOK_SECTION.jobsStuck,
        ),
        metric: jobMetric(envName, METRIC.jobsStuck, 'Maximum', Duration.minutes(JOBS_STUCK_ALARM.periodMinutes)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: JOBS_STUCK_ALARM.threshold,
        evaluationPeriods: JOBS_STUCK_ALARM.evaluationPeriods,
        datapointsToAlarm: JOBS_STUCK_ALARM.evaluationPeriods,
        // Workers publish every minute, zero included; no data means no worker, which
        // "worker tasks below minimum" pages for.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      // The stuck count doubles as the workers' heartbeat: every worker publishes it once a minute
      // once the database has answered its count. None for 10 minutes while tasks run (or none
      // run) is a fleet that stopped working or reporting: wedged handlers, a database the tasks
      // cannot reach, metrics that cannot be put. Every other custom-metric alarm goes quiet then,
      // and *worker tasks below minimum* counts running tasks only (alarm review).
      workersSilent: make('workersSilent', {
        alarmName: `${prefix} workers silent`,
        alarmDescription: describe(
          `no worker has reported for ${WORKERS_SILENT_ALARM.periodMinutes * WORKERS_SILENT_ALARM.evaluationPeriods} minutes (each reports its stuck-job count once a minute after the database answers it): the workers are wedged, cannot reach the database, or cannot put metrics, and every alarm on the workers' own metrics is blind meanwhile. Check the worker tasks' logs for the last lines and errors.`,
          RUNBOOK_SECTION.workersSilent,
        ),
        metric: jobMetric(envName, METRIC.jobsStuck, 'SampleCount', Duration.minutes(WORKERS_SILENT_ALARM.periodMinutes)),
        comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        threshold: 1,
        evaluationPeriods: WORKERS_SILENT_ALARM.evaluationPeriods,
        datapointsToAlarm: WORKERS_SILENT_ALARM.evaluationPeriods,
        treatMissingData: cloudwatch.TreatMissingData.BREACHING,
      }),
      scheduleFailing: make('scheduleFailing', {
        alarmName: `${prefix} schedule failing`,
        alarmDescription: describe(
          `the workers' schedulers have failed to enqueue a schedule's due occurrence in each of ${SCHEDULE_FAILING_ALARM.evaluationPeriods} periods of ${SCHEDULE_FAILING_ALARM.periodMinutes} minutes: a scheduled job (the month-end close, say) has not been enqueued and will not be until the cause is fixed. The occurrence stays due: the first pass that succeeds enqueues it, late, as the schedule's missed policy says. \`jobs schedules list\` shows which schedule is OVERDUE; the worker logs \`schedule <name>: pass failed\` with the error.`,
          RUNBOOK_SECTION.scheduleFailing,
        ),
        metric: jobMetric(envName, METRIC.schedulePassesFailed, 'Sum', Duration.minutes(SCHEDULE_FAILING_ALARM.periodMinutes)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: 1,
        evaluationPeriods: SCHEDULE_FAILING_ALARM.evaluationPeriods,
        datapointsToAlarm: SCHEDULE_FAILING_ALARM.evaluationPeriods,
        // The worker emits only when a pass fails.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      publishingFailing: make('publishingFailing', {
        alarmName: `${prefix} publishing failing`,
        alarmDescription: describe(
          `the outbox relays (API and workers) have failed to publish committed jobs to SQS in each of ${PUBLISHING_FAILING_ALARM.evaluationPeriods} periods of ${PUBLISHING_FAILING_ALARM.periodMinutes} minutes: the jobs are in the database and their outbox rows wait, but no message reaches the queue, so nothing runs them. A queue deleted or recreated, a permission or key policy changed, SQS unreachable from the tasks. The relays log \`outbox relay could not publish\` with each lane, the SQS error and the job ids; every pass tries again, so the jobs go out once the cause is fixed.`,
          RUNBOOK_SECTION.publishingFailing,
        ),
        metric: jobMetric(envName, METRIC.outboxPublishesFailed, 'Sum', Duration.minutes(PUBLISHING_FAILING_ALARM.periodMinutes)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: 1,
        evaluationPeriods: PUBLISHING_FAILING_ALARM.evaluationPeriods,
        datapointsToAlarm: PUBLISHING_FAILING_ALARM.evaluationPeriods,
        // The relays emit only when a pass fails.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      passwordRotationFailing: make('passwordRotationFailing', {
        alarmName: `${prefix} database password rotation failing`,
        alarmDescription: describe(
          "a step of the services' database password rotation failed (the rotation function threw). The services are not affected: the secret stays as it was, and the user and password they hold stay valid. Secrets Manager retries the rotation; the function's log says which step failed and why.",
          RUNBOOK_SECTION.passwordRotationFailing,
        ),
        metric: props.passwordRotation.metricErrors(Duration.minutes(5)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: 1,
        evaluationPeriods: 1,
        datapointsToAlarm: 1,
        // The function runs once a rotation; no data is no rotation.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      databaseSecretUnreadable: make('databaseSecretUnreadable', {
        alarmName: `${prefix} database secret unreadable`,
        alarmDescription: describe(
          `worker or API tasks have failed to read the services' database secret (DATABASE_SECRET_ARN) in each of ${DATABASE_SECRET_UNREADABLE_ALARM.evaluationPeriods} hours. Nothing fails yet: they keep the user and password they have. But they cannot follow a rotation: the rotation after next changes the password they hold, and from then their new connections are refused. The tasks log \`could not read the database secret\` with the error.`,
          RUNBOOK_SECTION.databaseSecretUnreadable,
        ),
        metric: jobMetric(
          envName,
          METRIC.databaseSecretReadsFailed,
          'Sum',
          Duration.minutes(DATABASE_SECRET_UNREADABLE_ALARM.periodMinutes),
        ),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: 1,
        evaluationPeriods: DATABASE_SECRET_UNREADABLE_ALARM.evaluationPeriods,
        datapointsToAlarm: DATABASE_SECRET_UNREADABLE_ALARM.evaluationPeriods,
        // The workers emit only when a read fails.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      databaseLoginsRefused: make('databaseLoginsRefused', {
        alarmName: `${prefix} database logins refused`,
        alarmDescription: describe(
          `the database has refused the workers' logins in each of ${DATABASE_LOGINS_REFUSED_ALARM.evaluationPeriods} minutes: the workers have stopped receiving (new jobs wait in the queue, where they spend no receives toward the DLQ; a running job whose handler needs a new connection fails that attempt) and resume by themselves once a login succeeds. Their credentials do not match the database: a password changed outside the rotation, a secret they cannot read after a rotation, or a role gone. The workers log \`database refused this worker's login\` with the error.`,
          RUNBOOK_SECTION.databaseLoginsRefused,
        ),
        metric: jobMetric(envName, METRIC.databaseLoginsRefused, 'Sum', Duration.minutes(DATABASE_LOGINS_REFUSED_ALARM.periodMinutes)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: 1,
        evaluationPeriods: DATABASE_LOGINS_REFUSED_ALARM.evaluationPeriods,
        datapointsToAlarm: DATABASE_LOGINS_REFUSED_ALARM.evaluationPeriods,
        // The workers emit only while their logins are refused.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      claimsFailing: make('claimsFailing', {
        alarmName: `${prefix} claims failing`,
        alarmDescription: describe(
          `the workers' claims of received messages have failed in ${CLAIMS_FAILING_ALARM.datapointsToAlarm} of the last ${CLAIMS_FAILING_ALARM.evaluationPeriods} minutes while the database answers (not an outage): nothing new starts, and every message received spends a receive toward the DLQ (it returns after the visibility timeout; after maxReceiveCount receives SQS dead-letters it, and *DLQ not empty* pages). Usually the platform's statements are refused: a grant revoked or a table or function changed by hand (SQLSTATE class 42), or a statement timeout. The workers log \`could not handle received messages\` with the error.`,
          RUNBOOK_SECTION.claimsFailing,
        ),
        metric: jobMetric(envName, METRIC.claimsFailed, 'Sum', Duration.minutes(CLAIMS_FAILING_ALARM.periodMinutes)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: 1,
        evaluationPeriods: CLAIMS_FAILING_ALARM.evaluationPeriods,
        datapointsToAlarm: CLAIMS_FAILING_ALARM.datapointsToAlarm,
        // The workers emit only when a claim fails.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      sqsCallsFailing: make('sqsCallsFailing', {
        alarmName: `${prefix} SQS calls failing`,
        alarmDescription: describe(
          `the workers' SQS calls (receives, visibility changes, deletes, dead letters) have failed in each of the last ${SQS_CALLS_FAILING_ALARM.evaluationPeriods} minutes after their own retries: throttling, a permission revoked, a queue deleted, or SQS not answering. Jobs are safe in the database; a lane whose receives fail is left alone while the other goes on, and undeleted messages return (a succeeded job's, after maxReceiveCount receives, in the DLQ). The workers log the lane and the SQS error.`,
          RUNBOOK_SECTION.sqsCallsFailing,
        ),
        metric: jobMetric(envName, METRIC.sqsCallsFailed, 'Sum', Duration.minutes(SQS_CALLS_FAILING_ALARM.periodMinutes)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: 1,
        evaluationPeriods: SQS_CALLS_FAILING_ALARM.evaluationPeriods,
        datapointsToAlarm: SQS_CALLS_FAILING_ALARM.evaluationPeriods,
        // The workers emit only when a call fails.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      databasePasswordNotRotated: make('databasePasswordNotRotated', {
        alarmName: `${prefix} database password not rotated`,
        alarmDescription: describe(
          `the services' database secret has not rotated for more than ${dbc.passwordRotationDays + DATABASE_PASSWORD_NOT_ROTATED_GRACE_DAYS} days (database.passwordRotationDays = ${dbc.passwordRotationDays}, plus ${DATABASE_PASSWORD_NOT_ROTATED_GRACE_DAYS}), as the tasks read it every hour: rotations fail, one was left unfinished (Secrets Manager then refuses the next), or the schedule is gone. Nothing fails: the password simply stays the same.`,
          RUNBOOK_SECTION.databasePasswordNotRotated,
        ),
        metric: jobMetric(envName, METRIC.databaseSecretAgeMs, 'Maximum', Duration.hours(1)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        threshold: (dbc.passwordRotationDays + DATABASE_PASSWORD_NOT_ROTATED_GRACE_DAYS) * 86_400_000,
        evaluationPeriods: 1,
        datapointsToAlarm: 1,
        // Workers publish it at start and hourly; a gap (tasks replaced within the hour) keeps the
        // alarm's state rather than clearing it, which would page again at the next reading.
        treatMissingData: cloudwatch.TreatMissingData.IGNORE,
      }),
      apiUnhealthyTargets: make('apiUnhealthyTargets', {
        alarmName: `${prefix} API unhealthy targets`,
        alarmDescription: describe(
          'the load balancer has counted at least one API task unhealthy (GET /healthz failing) for 3 minutes: fewer tasks serve the ERP clients, or none. Rolls back an API deployment in progress.',
          RUNBOOK_SECTION.apiUnhealthyTargets,
        ),
        metric: api.metricUnhealthyHosts(Duration.minutes(1)),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: 1,
        evaluationPeriods: 3,
        datapointsToAlarm: 3,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      apiTasksBelowMinimum: make('apiTasksBelowMinimum', {
        alarmName: `${prefix} API tasks below minimum`,
        alarmDescription: describe(
          `fewer than ${api.minTasks} API task(s) have been running for 5 minutes: tasks fail to start or crash, and the ERP clients are served by fewer tasks than planned or none. Missing data counts as breaching: no Container Insights data means no running API task can be seen.`,
          RUNBOOK_SECTION.apiTasksBelowMinimum,
        ),
        metric: api.metricRunningTasks(Duration.minutes(1)),
        comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        threshold: api.minTasks,
        evaluationPeriods: 5,
        datapointsToAlarm: 5,
        treatMissingData: cloudwatch.TreatMissingData.BREACHING,
      }),
      workerAtMaximum: make('workerAtMaximum', {
        alarmName: `${prefix} worker at maximum with backlog`,
        alarmDescription: describe(
          `the worker has run at its maximum of ${worker.maxTasks} tasks with more than ${worker.backlogPerTaskTarget} waiting messages per task (every lane's) for ${atMaxPeriods * 5} minutes: scaling has nothing left, the backlog grows, and jobs wait. Raise worker.maxTasks within the connection budget, or find what slowed the jobs.`,
          RUNBOOK_SECTION.workerAtMaximum,
        ),
        metric: new cloudwatch.MathExpression({
          expression: `IF(running >= ${worker.maxTasks} AND visible / running > ${worker.backlogPerTaskTarget}, 1, 0)`,
          usingMetrics: {
            visible: worker.metricVisibleMessages(Duration.minutes(5)),
            running: worker.metricRunningTasks(Duration.minutes(5)),
          },
          label: 'Worker at maximum with backlog (1 = yes)',
          period: Duration.minutes(5),
        }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: 1,
        evaluationPeriods: atMaxPeriods,
        datapointsToAlarm: atMaxPeriods,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      databaseCpu: make('databaseCpu', {
        alarmName: `${prefix} database CPU`,
        alarmDescription: describe(
          `the job store's CPU has been at or above ${c.databaseCpuPercent} % for 15 minutes: claims, heartbeats and completions slow down, leases may be lost. Find the statements (Performance Insights, the slow-statement log) before scaling the instance.`,
          RUNBOOK_SECTION.databaseCpu,
        ),
        metric: db.metricCPUUtilization({ period: Duration.minutes(5), statistic: 'Average' }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: c.databaseCpuPercent,
        evaluationPeriods: 3,
        datapointsToAlarm: 3,
        // A gap in RDS's metrics says nothing of its CPU (an instance down pages as workers silent and claims failing).
        treatMissingData: cloudwatch.TreatMissingData.IGNORE,
      }),
      databaseFreeStorage: make('databaseFreeStorage', {
        alarmName: `${prefix} database free storage`,
        alarmDescription: describe(
          `the job store has had less than ${fmtGib(freeStorageBytes)} of free storage (${Math.round(c.databaseFreeStorageFraction * 100)} % of the ${dbc.allocatedStorageGiB} GiB allocated) for 15 minutes; storage autoscaling (up to ${dbc.maxAllocatedStorageGiB} GiB) did not keep up or hit its ceiling. A full disk stops every write: enqueues, claims, completions.`,
          RUNBOOK_SECTION.databaseFreeStorage,
        ),
        metric: db.metricFreeStorageSpace({ period: Duration.minutes(5), statistic: 'Minimum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        threshold: freeStorageBytes,
        // 15 minutes: autoscaling acts after 5 below its 10 %; one period paged as it was about to.
        evaluationPeriods: 3,
        datapointsToAlarm: 3,
        treatMissingData: cloudwatch.TreatMissingData.IGNORE,
      }),
      databaseFreeableMemory: make('databaseFreeableMemory', {
        alarmName: `${prefix} database freeable memory`,
        alarmDescription: describe(
          `the job store has had less than ${fmtGib(freeMemoryBytes)} of freeable memory (${Math.round(c.databaseFreeableMemoryFraction * 100)} % of ${dbc.instanceClass}'s ${memoryGib} GiB) for 15 minutes: the instance swaps or kills backends, and every service's connections fail with it.`,
          RUNBOOK_SECTION.databaseFreeableMemory,
        ),
        metric: db.metricFreeableMemory({ period: Duration.minutes(5), statistic: 'Minimum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        threshold: freeMemoryBytes,
        evaluationPeriods: 3,
        datapointsToAlarm: 3,
        treatMissingData: cloudwatch.TreatMissingData.BREACHING,
      }),
      databaseConnections: make('databaseConnections', {
        alarmName: `${prefix} database connections`,
        alarmDescription: describe(
          `the job store has more than ${budget.allowed} connections (the connection budget's ceiling: 80 % of max_connections ≈ ${budget.maxConnections}; the services plan at most ${budget.total}): something beyond the plan holds connections (a leak, an operator's sessions, a second deployment), and new connections will soon be refused.`,
          RUNBOOK_SECTION.databaseConnections,
        ),
        metric: db.metricDatabaseConnections({ period: Duration.minutes(1), statistic: 'Maximum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        threshold: budget.allowed,
        evaluationPeriods: 5,
        datapointsToAlarm: 5,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
    };

    // A deployment that makes the API answer 5xx or fail its health checks rolls back. Not the
    // tasks-below-minimum alarm: its missing data breaches (right for paging), and an alarm
    // already in ALARM when a deployment starts would roll back the very first one; the circuit
    // breaker covers tasks that never start.
    api.service.enableDeploymentAlarms(
      API_DEPLOYMENT_ALARMS.map((n) => this.names[n]!),
      { behavior: ecs.AlarmBehavior.ROLLBACK_ON_ALARM },
    );
  }
}
