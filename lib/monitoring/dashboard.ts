// One CloudWatch dashboard per environment: each lane's job queue and DLQ, the platform's own job
// metrics, the worker's scaling signal and tasks, and the API behind its load balancer, with the
// alarms on top. Reads left to right in the order a job flows: API → queue → worker → outcome.

import { Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import { Construct } from 'constructs';
import { METRIC } from '../../runtime/observability/metric-names.ts';
import type { EnvironmentName } from '../config.ts';
import type { JobQueues } from '../queues.ts';
import type { ApiService } from '../services/api.ts';
import type { WorkerService } from '../services/worker.ts';
import { jobMetric, type JobAlarms } from './alarms.ts';

export interface JobsDashboardProps {
  envName: EnvironmentName;
  queues: JobQueues;
  api: ApiService;
  worker: WorkerService;
  alarms: JobAlarms;
}

export class JobsDashboard extends Construct {
  readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: JobsDashboardProps) {
    super(scope, id);
    const { envName, queues, api, worker } = props;
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
        right: [api.metric5xx(five)],
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
          sum(METRIC.claimMisses, 'Claim misses'),
          sum(METRIC.jobsStuck, 'Jobs stuck'),
          sum(METRIC.schedulePassesFailed, 'Schedule passes failed'),
          sum(METRIC.databaseSecretReadsFailed, 'Database secret reads failed'),
        ],
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
        width: 12,
      }),
    );
    this.dashboard = d;
  }
}
