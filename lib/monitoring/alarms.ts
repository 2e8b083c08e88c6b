// The alarms that page on-call, all in this file, each to the on-call topic. Every description
// says what the alarm means in this system and names the runbook section to open
// (docs/runbooks/README.md#<anchor>). The platform's own failure metrics are watched by the names
// the worker emits them under (runtime/metrics/names.ts), with no dimensions.

import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import { Construct } from 'constructs';
import { METRIC, metricNamespace } from '../../runtime/metrics/names.ts';
import type { AlarmConfig, EnvironmentName } from '../config.ts';
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
}

export type JobAlarmName =
  | 'dlqNotEmpty'
  | 'dlqOldestMessageAge'
  | 'queueOldestMessageAge'
  | 'leasesLost'
  | 'jobsDeadLettered'
  | 'api5xx'
  | 'workerTasksBelowMinimum'
  | 'jobsStuck';

/**
 * Stuck jobs (runtime/ops/stuck.ts): every worker publishes the count once a minute, so Maximum
 * over 5 minutes is the count whatever the number of workers. The thresholds that make a job
 * stuck (its type's expected maximum, JOBS_STUCK_*) already wait; two periods more keep a job
 * that finishes just past its limit from paging.
 */
export const JOBS_STUCK_ALARM = { threshold: 1, periodMinutes: 5, evaluationPeriods: 2 } as const;

/** A platform metric as the worker emits it: its environment's namespace, no dimensions. */
export function jobMetric(envName: EnvironmentName, name: (typeof METRIC)[keyof typeof METRIC], statistic: string, period: Duration): cloudwatch.Metric {
  return new cloudwatch.Metric({ namespace: metricNamespace(envName), metricName: name, statistic, period });
}

export class JobAlarms extends Construct {
  readonly alarms: Readonly<Record<JobAlarmName, cloudwatch.Alarm>>;

  constructor(scope: Construct, id: string, props: JobAlarmsProps) {
    super(scope, id);
    const { envName, config: c, queues } = props;
    const prefix = `ERP jobs ${envName}`;
    const describe = (meaning: string, section: RunbookSection) => `${prefix}: ${meaning} Runbook: ${runbookRef(section)}`;
    const minutes = (s: number) => Math.round(s / 60);

    const make = (name: JobAlarmName, p: cloudwatch.AlarmProps): cloudwatch.Alarm => {
      const alarm = new cloudwatch.Alarm(this, name.charAt(0).toUpperCase() + name.slice(1), p);
      props.onCall.notifyOn(alarm);
      return alarm;
    };

    this.alarms = {
      dlqNotEmpty: make('dlqNotEmpty', {
        alarmName: `${prefix} DLQ not empty`,
        alarmDescription: describe(
          'the dead-letter queue holds at least one message. A job reached its attempt cap or failed non-retryably, or the worker met a message it cannot handle (unparseable body, unknown job, crash loop past maxReceiveCount). Nothing retries a dead letter: triage it.',
          RUNBOOK_SECTION.dlqNotEmpty,
        ),
        metric: queues.deadLetterQueue.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(1), statistic: 'Maximum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        threshold: 0,
        evaluationPeriods: 1,
        // SQS stops reporting an idle, empty queue: no data means nothing arrived.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      dlqOldestMessageAge: make('dlqOldestMessageAge', {
        alarmName: `${prefix} DLQ oldest message age`,
        alarmDescription: describe(
          `a dead letter has waited more than ${minutes(c.deadLetterOldestMessageAgeSeconds)} minutes without triage; the DLQ expires messages after its retention, and the reason then exists only in the job row.`,
          RUNBOOK_SECTION.dlqOldestMessageAge,
        ),
        metric: queues.deadLetterQueue.metricApproximateAgeOfOldestMessage({ period: Duration.minutes(5), statistic: 'Maximum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: c.deadLetterOldestMessageAgeSeconds,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      queueOldestMessageAge: make('queueOldestMessageAge', {
        alarmName: `${prefix} job queue oldest message age`,
        alarmDescription: describe(
          `the oldest job message is more than ${minutes(c.queueOldestMessageAgeSeconds)} minutes old (running jobs keep their message, so this includes the longest job). Workers are not keeping up, are stuck, or a job runs far past its expected time.`,
          RUNBOOK_SECTION.queueOldestMessageAge,
        ),
        metric: queues.queue.metricApproximateAgeOfOldestMessage({ period: Duration.minutes(5), statistic: 'Maximum' }),
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        threshold: c.queueOldestMessageAgeSeconds,
        evaluationPeriods: 3,
        datapointsToAlarm: 3,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      leasesLost: make('leasesLost', {
        alarmName: `${prefix} leases lost`,
        alarmDescription: describe(
          `workers lost at least ${c.leasesLostPer15Minutes} job leases in 15 minutes: a heartbeat found the job reclaimed or cancelled and aborted the handler. A crashed task costs a few; more means heartbeats are late (CPU starvation, database latency, event-loop stalls) and jobs are running twice.`,
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
    };
  }
}
