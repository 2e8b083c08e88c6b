// One CloudWatch dashboard per environment: each lane's job queue and DLQ, the platform's own job
// metrics, the worker's scaling signal and tasks, the API behind its load balancer and the database,
// with the alarms on top. Reads left to right in the order a job flows: API → queue → worker → outcome.

import { Duration, Stack } from 'aws-cdk-lib';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import { Construct } from 'constructs';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import type { EnvironmentName } from '../config.ts';
import type { JobDatabase } from '../database.ts';
import type { JobQueues } from '../queues.ts';
import type { ApiService } from '../services/api.ts';
import type { WorkerService } from '../services/worker.ts';
import { jobMetric, type JobAlarms } from './alarms.ts';

export interface JobsDashboardProps {
  envName: EnvironmentName;
  queues: JobQueues;
  api: ApiService;
  worker: WorkerService;
  database: JobDatabase;
  alarms: JobAlarms;
}

export class JobsDashboard extends Construct {
  readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: JobsDashboardProps) {
    super(scope, id);
    const { envName, queues, api, worker } = props;
    const db = props.database.instance;
    const p = Duration.minutes(1);
    const five = Duration.minutes(5);
    const sum = (name: (typeof METRIC)[keyof typeof METRIC], label: string) => jobMetric(envName, name, 'Sum', five).with({ label });

    const d = new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: `${Stack.of(this).stackName}-jobs`,
      defaultInterval: Duration.hours(6),
    });
    d.addWidgets(new cloudwatch.AlarmStatusWidget({ title: 'Alarms', alarms: Object.values(props.alarms.alarms), width: 24, height: 3 }));
    d.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'API requests and 5xx',
        left: [api.loadBalancer.metrics.requestCount({ period: five, statistic: 'Sum', label: 'Requests' })],
        // Apart: 5xx from the load balancer alone (no healthy target, tasks restarting) and from the tasks.
        right: [
          api.loadBalancer.metrics.httpCodeElb(elbv2.HttpCodeElb.ELB_5XX_COUNT, {
            period: five,
            statistic: 'Sum',
            label: '5xx from the load balancer',
          }),
          api.loadBalancer.metrics.httpCodeTarget(elbv2.HttpCodeTarget.TARGET_5XX_COUNT, {
            period: five,
            statistic: 'Sum',
            label: '5xx from the API tasks',
          }),
        ],
        width: 8,
      }),
      new cloudwatch.GraphWidget({
        title: 'API latency (target response time)',
        left: [
          api.loadBalancer.metrics.targetResponseTime({ period: five, statistic: 'p50', label: 'p50' }),
          api.loadBalancer.metrics.targetResponseTime({ period: five, statistic: 'p99', label: 'p99' }),
        ],
        width: 8,
      }),
      new cloudwatch.GraphWidget({
        title: 'API tasks CPU / memory %',
        left: [
          api.service.metricCpuUtilization({ period: five, label: 'CPU' }),
          api.service.metricMemoryUtilization({ period: five, label: 'Memory' }),
        ],
        width: 8,
      }),
    );
    d.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'Job queues (per lane)',
        left: queues.all().flatMap(({ lane, queue }) => [
          queue.metricApproximateNumberOfMessagesVisible({ period: p, statistic: 'Maximum', label: `${lane}: visible (waiting)` }),
          queue.metricApproximateNumberOfMessagesNotVisible({
            period: p,
            statistic: 'Maximum',
            label: `${lane}: in flight (running or backing off)`,
          }),
        ]),
        right: queues
          .all()
          .map(({ lane, queue }) =>
            queue.metricApproximateAgeOfOldestMessage({ period: p, statistic: 'Maximum', label: `${lane}: oldest message age (s)` }),
          ),
        width: 8,
      }),
      new cloudwatch.GraphWidget({
        title: 'Dead-letter queues (per lane)',
        left: queues
          .all()
          .map(({ lane, deadLetterQueue }) =>
            deadLetterQueue.metricApproximateNumberOfMessagesVisible({ period: p, statistic: 'Maximum', label: `${lane}: dead letters` }),
          ),
        right: queues.all().map(({ lane, deadLetterQueue }) =>
          deadLetterQueue.metricApproximateAgeOfOldestMessage({
            period: p,
            statistic: 'Maximum',
            label: `${lane}: oldest dead letter age (s)`,
          }),
        ),
        width: 8,
      }),
      new cloudwatch.GraphWidget({
        title: 'Worker scaling: backlog per task (all lanes) and running tasks',
        left: [worker.metricBacklogPerTask(p)],
        right: [worker.metricRunningTasks(p).with({ label: 'Running worker tasks' })],
        width: 8,
      }),
    );
    d.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'Job outcomes (per 5 min)',
        left: [
          sum(METRIC.jobsSucceeded, 'Succeeded'),
          sum(METRIC.jobsFailed, 'Failed (will retry)'),
          sum(METRIC.jobsDeadLettered, 'Dead-lettered'),
        ],
        width: 8,
      }),
      new cloudwatch.GraphWidget({
        title: 'Job anomalies (per 5 min)',
        left: [
          sum(METRIC.leasesLost, 'Leases lost'),
          sum(METRIC.messagesDeadLettered, 'Messages dead-lettered by the worker'),
          sum(METRIC.duplicateDeliveries, 'Duplicate deliveries ignored'),
          sum(METRIC.handlersIgnoringAbort, 'Handlers ignoring their abort signal'),
          sum(METRIC.claimMisses, 'Claim misses'),
          sum(METRIC.schedulePassesFailed, 'Schedule passes failed'),
          sum(METRIC.outboxPublishesFailed, 'Publishes failed (outbox relays)'),
          sum(METRIC.jobsRepublished, 'Jobs republished (messages lost)'),
          sum(METRIC.databaseUnavailable, 'Database unreachable (worker stopped receiving)'),
          sum(METRIC.databaseLoginsRefused, 'Database logins refused (worker probes)'),
          sum(METRIC.claimsFailed, 'Claims failed (database answering)'),
          sum(METRIC.sqsCallsFailed, 'SQS calls failed (workers)'),
        ],
        // A gauge each worker reports every minute: the largest, as the alarm reads it, not a sum.
        right: [jobMetric(envName, METRIC.jobsStuck, 'Maximum', five).with({ label: 'Jobs stuck (largest report)' })],
        width: 8,
      }),
      new cloudwatch.GraphWidget({
        title: 'Job duration and queue lag (ms)',
        left: [
          jobMetric(envName, METRIC.jobDuration, 'p50', five).with({ label: 'Duration p50' }),
          jobMetric(envName, METRIC.jobDuration, 'p99', five).with({ label: 'Duration p99' }),
        ],
        right: [jobMetric(envName, METRIC.queueLag, 'p99', five).with({ label: 'Queue lag p99' })],
        width: 8,
      }),
    );
    d.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'Worker tasks CPU / memory %',
        left: [
          worker.service.metricCpuUtilization({ period: five, label: 'CPU' }),
          worker.service.metricMemoryUtilization({ period: five, label: 'Memory' }),
        ],
        width: 8,
      }),
      new cloudwatch.GraphWidget({
        title: 'Database latency (ms) and connections',
        // RDS reports disk latency in seconds: shown in milliseconds.
        left: (['ReadLatency', 'WriteLatency'] as const).map(
          (name) =>
            new cloudwatch.MathExpression({
              expression: `${name.toLowerCase()} * 1000`,
              usingMetrics: { [name.toLowerCase()]: db.metric(name, { period: five, statistic: 'Average' }) },
              label: name === 'ReadLatency' ? 'Disk read latency' : 'Disk write latency',
              period: five,
            }),
        ),
        right: [db.metricDatabaseConnections({ period: p, statistic: 'Maximum', label: 'Connections' })],
        width: 8,
      }),
      new cloudwatch.GraphWidget({
        title: 'Database CPU % and free storage (GiB)',
        left: [db.metricCPUUtilization({ period: five, statistic: 'Average', label: 'CPU' })],
        right: [
          new cloudwatch.MathExpression({
            expression: 'storage / 1073741824',
            usingMetrics: { storage: db.metricFreeStorageSpace({ period: five, statistic: 'Minimum' }) },
            label: 'Free storage (GiB)',
            period: five,
          }),
        ],
        width: 8,
      }),
    );
    d.addWidgets(
      new cloudwatch.GraphWidget({
        title: "Services' database password: secret age (days) and failed reads",
        left: [
          new cloudwatch.MathExpression({
            expression: 'age / 86400000',
            usingMetrics: { age: jobMetric(envName, METRIC.databaseSecretAgeMs, 'Maximum', Duration.hours(1)) },
            label: 'Age of the current version (days)',
            period: Duration.hours(1),
          }),
        ],
        right: [jobMetric(envName, METRIC.databaseSecretReadsFailed, 'Sum', Duration.hours(1)).with({ label: 'Reads failed (per hour)' })],
        width: 8,
      }),
    );
    this.dashboard = d;
  }
}
