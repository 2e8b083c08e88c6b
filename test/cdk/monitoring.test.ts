// On-call: the topic and its subscriptions, every alarm with its metric, threshold, missing-data
// treatment and SNS actions, each description pointing at a runbook section that exists, and
// the dashboard.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Match } from 'aws-cdk-lib/assertions';
import type { IConstruct } from 'constructs';
import { describe, expect, it } from 'vitest';
import { METRIC, metricNamespace } from '../../runtime/observability/metric-names.ts';
import { connectionBudget, ENVIRONMENTS, INSTANCE_MEMORY_GIB } from '../../lib/config.ts';
import {
  API_DEPLOYMENT_ALARMS,
  DATABASE_PASSWORD_NOT_ROTATED_GRACE_DAYS,
  CLAIMS_FAILING_ALARM,
  SQS_CALLS_FAILING_ALARM,
  DATABASE_LOGINS_REFUSED_ALARM,
  DATABASE_SECRET_UNREADABLE_ALARM,
  JOBS_STUCK_ALARM,
  WORKERS_SILENT_ALARM,
  PUBLISHING_FAILING_ALARM,
  SCHEDULE_FAILING_ALARM,
} from '../../lib/monitoring/alarms.ts';
import { RUNBOOK_PATH, RUNBOOK_SECTION } from '../../lib/monitoring/runbook.ts';
import { REPO_ROOT } from '../../lib/paths.ts';
import { LANE_RECEIVE_BACKOFF_MAX_MS } from '../../runtime/worker/lane-choice.ts';
import { environment, idOf, only, resourcesOfType, synthConfig, synthEnv, withChanges } from './support.ts';

const prod = synthEnv('prod');
const t = prod.servicesTemplate;
const c = environment('prod'); // as synthesized: the on-call address from the command line
const topicId = idOf(prod.services.node.findChild('OnCall').node.findChild('Topic'));

type AlarmProps = Record<string, any>;
const alarms = Object.values(resourcesOfType(t, 'AWS::CloudWatch::Alarm')).map((a) => a.Properties as AlarmProps);
const alarmNamed = (suffix: string): AlarmProps => {
  const a = alarms.find((x) => x.AlarmName === `ERP jobs prod ${suffix}`);
  if (!a) throw new Error(`no alarm "${suffix}" among ${alarms.map((x) => x.AlarmName).join(', ')}`);
  return a;
};

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens. */
function anchors(markdown: string): Set<string> {
  return new Set(
    markdown
      .split('\n')
      .filter((l) => /^#{1,6} /.test(l))
      .map((l) =>
        l
          .replace(/^#+ /, '')
          .trim()
          .toLowerCase()
          .replace(/[^\p{L}\p{N} _-]/gu, '')
          .replace(/ /g, '-'),
      ),
  );
}

describe('on-call topic', () => {
  it('is encrypted with a rotating key CloudWatch may use, and TLS-only', () => {
    const topic = resourcesOfType(t, 'AWS::SNS::Topic')[topicId]!.Properties as Record<string, any>;
    const keyId = topic.KmsMasterKeyId['Fn::GetAtt'][0] as string;
    t.hasResourceProperties('AWS::KMS::Key', {
      EnableKeyRotation: true,
      KeyPolicy: {
        Statement: Match.arrayWith([
          Match.objectLike({ Principal: { Service: 'cloudwatch.amazonaws.com' }, Action: ['kms:Decrypt', 'kms:GenerateDataKey*'] }),
        ]),
      },
    });
    expect(Object.keys(resourcesOfType(t, 'AWS::KMS::Key'))).toEqual([keyId]);
    t.hasResourceProperties('AWS::SNS::TopicPolicy', {
      PolicyDocument: {
        Statement: Match.arrayWith([Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } })]),
      },
    });
  });

  it("has the environment's e-mail subscriptions", () => {
    const subs = Object.values(resourcesOfType(t, 'AWS::SNS::Subscription')).map((s) => s.Properties as Record<string, unknown>);
    expect(subs.map((s) => s.Endpoint).sort()).toEqual([...c.alarms.emails].sort());
    for (const s of subs) expect(s).toMatchObject({ Protocol: 'email', TopicArn: { Ref: topicId } });
  });

  it("a pager's HTTPS integration (-c alarmEndpoints) is subscribed beside the e-mails (alarm review: e-mail only is not a page)", () => {
    const url = 'https://events.pagerduty.com/integration/0123456789abcdef/enqueue';
    const s = synthConfig(withChanges('prod', (x) => void (x.alarms.httpsEndpoints = [url])));
    const subs = Object.values(resourcesOfType(s.servicesTemplate, 'AWS::SNS::Subscription')).map(
      (r) => r.Properties as Record<string, unknown>,
    );
    expect(subs.filter((r) => r.Protocol === 'https')).toEqual([expect.objectContaining({ Endpoint: url, Protocol: 'https' })]);
    expect(subs.filter((r) => r.Protocol === 'email')).toHaveLength(c.alarms.emails.length);
    // With a pager, the e-mail-only note is not made.
    expect(infos(s.services).filter((m) => m.includes('reach e-mail only'))).toEqual([]);
  });

  it('e-mail only says so at synth: a subscription nobody confirmed delivers nothing (stack review)', () => {
    expect(infos(prod.services)).toContainEqual(
      expect.stringMatching(/^the prod alarms reach e-mail only \(.+\): each address must confirm its subscription.*-c alarmEndpoints=/),
    );
  });
});

/** The info annotations under a construct (what cdk synth prints as [Info …]). */
function infos(scope: IConstruct): string[] {
  return scope.node.findAll().flatMap((n) => n.node.metadata.filter((m) => m.type === 'aws:cdk:info').map((m) => String(m.data)));
}

describe('alarms', () => {
  it('are the twenty-seven on-call alarms, no more', () => {
    expect(alarms).toHaveLength(27);
  });

  it.each(alarms.map((a) => [a.AlarmName as string, a] as const))('%s notifies the on-call topic when it fires and clears', (_name, a) => {
    expect(a.AlarmActions).toEqual([{ Ref: topicId }]);
    expect(a.OKActions).toEqual([{ Ref: topicId }]);
  });

  const runbook = readFileSync(join(REPO_ROOT, RUNBOOK_PATH), 'utf8');
  const sections = anchors(runbook);

  it.each(alarms.map((a) => [a.AlarmName as string, a] as const))(
    '%s says what it means and names a runbook section that exists',
    (_name, a) => {
      const description = a.AlarmDescription as string;
      expect(description.length).toBeGreaterThan(80);
      expect(description.length).toBeLessThanOrEqual(1024);
      const m = /Runbook: docs\/runbooks\/README\.md#([a-z0-9-]+)$/.exec(description);
      expect(m, description).not.toBeNull();
      expect(sections.has(m![1]!), `runbook has no section #${m![1]}`).toBe(true);
    },
  );

  it('each runbook section the alarms use exists, one per alarm', () => {
    for (const s of Object.values(RUNBOOK_SECTION)) expect(sections.has(s), s).toBe(true);
    const cited = alarms.map((a) => /#([a-z0-9-]+)$/.exec(a.AlarmDescription as string)![1]);
    expect(new Set(cited).size).toBe(27);
  });

  it('DLQ not empty: any visible message, missing data not breaching', () => {
    const a = alarmNamed('DLQ not empty');
    expect(a).toMatchObject({
      Namespace: 'AWS/SQS',
      MetricName: 'ApproximateNumberOfMessagesVisible',
      ComparisonOperator: 'GreaterThanThreshold',
      Threshold: 0,
      TreatMissingData: 'notBreaching',
      EvaluationPeriods: 1,
    });
    expect(JSON.stringify(a.Dimensions)).toContain('QueuesDeadLetterQueue');
    expect(JSON.stringify(a.Dimensions)).not.toContain('Urgent');
  });

  it("DLQ oldest message age: the config's threshold on the DLQ", () => {
    const a = alarmNamed('DLQ oldest message age');
    expect(a).toMatchObject({
      MetricName: 'ApproximateAgeOfOldestMessage',
      Threshold: c.alarms.deadLetterOldestMessageAgeSeconds,
      TreatMissingData: 'notBreaching',
    });
    expect(JSON.stringify(a.Dimensions)).toContain('QueuesDeadLetterQueue');
  });

  it("job queue oldest message age: the config's threshold on the job queue", () => {
    const a = alarmNamed('job queue oldest message age');
    expect(a).toMatchObject({ MetricName: 'ApproximateAgeOfOldestMessage', Threshold: c.alarms.queueOldestMessageAgeSeconds });
    expect(JSON.stringify(a.Dimensions)).toContain('QueuesJobQueue');
  });

  describe('the urgent lane (issue 14)', () => {
    const urgentDims = (a: AlarmProps, q: 'queue' | 'deadLetterQueue') =>
      expect(a.Dimensions).toEqual([
        {
          Name: 'QueueName',
          Value: {
            'Fn::ImportValue': expect.stringContaining(
              `ExportsOutputFnGetAtt${idOf(prod.data.queues.lanes.urgent[q].node.defaultChild!)}QueueName`,
            ),
          },
        },
      ]);

    it('urgent DLQ not empty: its own alarm on the urgent DLQ, any visible message, paging on-call; its runbook section says what to run', () => {
      const a = alarmNamed('urgent DLQ not empty');
      expect(a).toMatchObject({
        Namespace: 'AWS/SQS',
        MetricName: 'ApproximateNumberOfMessagesVisible',
        ComparisonOperator: 'GreaterThanThreshold',
        Threshold: 0,
        TreatMissingData: 'notBreaching',
        EvaluationPeriods: 1,
        AlarmActions: [{ Ref: topicId }],
        OKActions: [{ Ref: topicId }],
      });
      urgentDims(a, 'deadLetterQueue');
      expect(a.AlarmDescription).toMatch(/URGENT lane.*--lane urgent.*Runbook: docs\/runbooks\/README\.md#urgent-dlq-not-empty$/s);
      const section = runbook.slice(runbook.indexOf('## Urgent DLQ not empty'));
      expect(section.slice(0, section.indexOf('\n## ', 3))).toMatch(
        /jobs\.ts dlq list --lane urgent[\s\S]*jobs\.ts dlq redrive --lane urgent/,
      );
    });

    it("urgent DLQ oldest message age and urgent job queue oldest message age: the bulk lane's thresholds on the urgent queues", () => {
      const dlqAge = alarmNamed('urgent DLQ oldest message age');
      expect(dlqAge).toMatchObject({ MetricName: 'ApproximateAgeOfOldestMessage', Threshold: c.alarms.deadLetterOldestMessageAgeSeconds });
      urgentDims(dlqAge, 'deadLetterQueue');
      const queueAge = alarmNamed('urgent job queue oldest message age');
      expect(queueAge).toMatchObject({
        MetricName: 'ApproximateAgeOfOldestMessage',
        Threshold: c.alarms.queueOldestMessageAgeSeconds,
        EvaluationPeriods: 3,
      });
      urgentDims(queueAge, 'queue');
    });

    it('every queue of every lane has its depth or age alarm: the DLQs both, the job queues both', () => {
      const watched = (q: { node: { defaultChild?: unknown } }) =>
        alarms
          .filter((a) => JSON.stringify([a.Dimensions, a.Metrics]).includes(`${idOf(q.node.defaultChild as never)}QueueName`))
          .map((a) => a.MetricName as string);
      for (const l of prod.data.queues.all()) {
        expect(watched(l.deadLetterQueue).sort(), `${l.lane} DLQ`).toEqual([
          'ApproximateAgeOfOldestMessage',
          'ApproximateNumberOfMessagesVisible',
        ]);
        expect(watched(l.queue), `${l.lane} job queue`).toContain('ApproximateAgeOfOldestMessage');
      }
    });
  });

  it("leases lost: the worker's metric by its imported name, in the environment namespace, no dimensions", () => {
    const a = alarmNamed('leases lost');
    expect(a).toMatchObject({
      Namespace: metricNamespace('prod'),
      MetricName: METRIC.leasesLost,
      Statistic: 'Sum',
      Threshold: c.alarms.leasesLostPer15Minutes,
      Period: 900,
      TreatMissingData: 'notBreaching',
    });
    expect(a.Dimensions).toBeUndefined();
  });

  it("jobs dead-lettered: the worker's metric by its imported name, in the environment namespace, no dimensions", () => {
    const a = alarmNamed('jobs dead-lettered');
    expect(a).toMatchObject({
      Namespace: metricNamespace('prod'),
      MetricName: METRIC.jobsDeadLettered,
      Statistic: 'Sum',
      Threshold: c.alarms.jobsDeadLetteredPer5Minutes,
      TreatMissingData: 'notBreaching',
    });
    expect(a.Dimensions).toBeUndefined();
  });

  it("jobs stuck: the workers' JobsStuck gauge by its imported name, Maximum (any number of workers reports the same count), two periods", () => {
    const a = alarmNamed('jobs stuck');
    expect(a).toMatchObject({
      Namespace: metricNamespace('prod'),
      MetricName: METRIC.jobsStuck,
      Statistic: 'Maximum',
      Period: JOBS_STUCK_ALARM.periodMinutes * 60,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Threshold: 1,
      EvaluationPeriods: 2,
      DatapointsToAlarm: 2,
      TreatMissingData: 'notBreaching',
    });
    expect(a.Dimensions).toBeUndefined();
    expect(a.AlarmDescription).toMatch(/expected maximum.*not picked up.*jobs stuck.*Runbook: docs\/runbooks\/README\.md#jobs-stuck$/s);
  });

  it("workers silent: no JobsStuck report (every worker's once-a-minute heartbeat) in two 5-minute periods pages, missing data counting as silence (alarm review: a wedged fleet, a database the tasks cannot reach, or PutMetricData refused paged nobody)", () => {
    const a = alarmNamed('workers silent');
    expect(a).toMatchObject({
      Namespace: metricNamespace('prod'),
      MetricName: METRIC.jobsStuck,
      Statistic: 'SampleCount',
      Period: WORKERS_SILENT_ALARM.periodMinutes * 60,
      ComparisonOperator: 'LessThanThreshold',
      Threshold: 1,
      EvaluationPeriods: 2,
      DatapointsToAlarm: 2,
      TreatMissingData: 'breaching',
    });
    expect(a.Dimensions).toBeUndefined();
    expect(a.AlarmDescription).toMatch(
      /no worker has reported for 10 minutes.*wedged.*Runbook: docs\/runbooks\/README\.md#workers-silent$/s,
    );
  });

  it("publishing failing: the relays' OutboxPublishesFailed by its imported name, a failure in each of three periods (SQS down a minute or two does not page)", () => {
    const a = alarmNamed('publishing failing');
    expect(a).toMatchObject({
      Namespace: metricNamespace('prod'),
      MetricName: METRIC.outboxPublishesFailed,
      Statistic: 'Sum',
      Period: PUBLISHING_FAILING_ALARM.periodMinutes * 60,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Threshold: 1,
      EvaluationPeriods: 3,
      DatapointsToAlarm: 3,
      TreatMissingData: 'notBreaching',
    });
    expect(a.Dimensions).toBeUndefined();
    expect(a.AlarmDescription).toMatch(
      /outbox relays.*nothing runs them.*outbox relay could not publish.*Runbook: docs\/runbooks\/README\.md#publishing-failing$/s,
    );
  });

  it("schedule failing: the workers' SchedulePassesFailed by its imported name, a failure in each of three periods (a failover's minute does not page)", () => {
    const a = alarmNamed('schedule failing');
    expect(a).toMatchObject({
      Namespace: metricNamespace('prod'),
      MetricName: METRIC.schedulePassesFailed,
      Statistic: 'Sum',
      Period: SCHEDULE_FAILING_ALARM.periodMinutes * 60,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Threshold: 1,
      EvaluationPeriods: 3,
      DatapointsToAlarm: 3,
      TreatMissingData: 'notBreaching',
    });
    expect(a.Dimensions).toBeUndefined();
    expect(a.AlarmDescription).toMatch(
      /stays due.*missed policy.*jobs schedules list.*OVERDUE.*Runbook: docs\/runbooks\/README\.md#schedule-failing$/s,
    );
  });

  it('database password rotation failing: any error of the rotation function, at once (the services are not affected, so no waiting on them)', () => {
    const a = alarmNamed('database password rotation failing');
    expect(a).toMatchObject({
      Namespace: 'AWS/Lambda',
      MetricName: 'Errors',
      Statistic: 'Sum',
      Period: 300,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Threshold: 1,
      EvaluationPeriods: 1,
      TreatMissingData: 'notBreaching',
    });
    expect(JSON.stringify(a.Dimensions)).toContain('PasswordRotationFunction');
    expect(a.AlarmDescription).toMatch(
      /services are not affected.*Runbook: docs\/runbooks\/README\.md#database-password-rotation-failing$/s,
    );
  });

  it("database secret unreadable: the workers' DatabaseSecretReadsFailed by its imported name, in each of three hours", () => {
    const a = alarmNamed('database secret unreadable');
    expect(a).toMatchObject({
      Namespace: metricNamespace('prod'),
      MetricName: METRIC.databaseSecretReadsFailed,
      Statistic: 'Sum',
      Period: DATABASE_SECRET_UNREADABLE_ALARM.periodMinutes * 60,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Threshold: 1,
      EvaluationPeriods: 3,
      DatapointsToAlarm: 3,
      TreatMissingData: 'notBreaching',
    });
    expect(a.AlarmDescription).toMatch(/rotation after next.*Runbook: docs\/runbooks\/README\.md#database-secret-unreadable$/s);
  });

  it("database logins refused: the workers' DatabaseLoginsRefused by its imported name, in each of five minutes", () => {
    const a = alarmNamed('database logins refused');
    expect(a).toMatchObject({
      Namespace: metricNamespace('prod'),
      MetricName: METRIC.databaseLoginsRefused,
      Statistic: 'Sum',
      Period: DATABASE_LOGINS_REFUSED_ALARM.periodMinutes * 60,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Threshold: 1,
      EvaluationPeriods: 5,
      DatapointsToAlarm: 5,
      TreatMissingData: 'notBreaching',
    });
    expect(a.AlarmDescription).toMatch(/stopped receiving.*Runbook: docs\/runbooks\/README\.md#database-logins-refused$/s);
  });

  it("SQS calls failing: the workers' SqsCallsFailed in each of 5 minutes (a failing lane is retried at most 30 s apart), paging with the cause before the DLQ would", () => {
    const a = alarmNamed('SQS calls failing');
    expect(a).toMatchObject({
      Namespace: metricNamespace('prod'),
      MetricName: METRIC.sqsCallsFailed,
      Statistic: 'Sum',
      Period: SQS_CALLS_FAILING_ALARM.periodMinutes * 60,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Threshold: 1,
      EvaluationPeriods: 5,
      DatapointsToAlarm: 5,
      TreatMissingData: 'notBreaching',
    });
    expect(LANE_RECEIVE_BACKOFF_MAX_MS).toBeLessThanOrEqual(SQS_CALLS_FAILING_ALARM.periodMinutes * 60_000);
    expect(SQS_CALLS_FAILING_ALARM.periodMinutes * SQS_CALLS_FAILING_ALARM.evaluationPeriods * 60).toBeLessThan(
      c.jobTimings.maxReceiveCount * c.jobTimings.visibilityTimeoutSeconds,
    );
    expect(a.AlarmDescription).toMatch(/throttling.*Runbook: docs\/runbooks\/README\.md#sqs-calls-failing$/s);
  });

  it("claims failing: the workers' ClaimsFailed by its imported name, in 3 of 5 minutes (a failed claim's messages return a visibility timeout later), paging before the DLQ would", () => {
    const a = alarmNamed('claims failing');
    expect(a).toMatchObject({
      Namespace: metricNamespace('prod'),
      MetricName: METRIC.claimsFailed,
      Statistic: 'Sum',
      Period: CLAIMS_FAILING_ALARM.periodMinutes * 60,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Threshold: 1,
      EvaluationPeriods: 5,
      DatapointsToAlarm: 3,
      TreatMissingData: 'notBreaching',
    });
    // With one message failing each time it returns (every visibility timeout), 3 of 5 minutes fill:
    const minutes = new Set([0, 1, 2, 3].map((k) => Math.floor((k * c.jobTimings.visibilityTimeoutSeconds) / 60)));
    expect([...minutes].filter((m) => m < CLAIMS_FAILING_ALARM.evaluationPeriods).length).toBeGreaterThanOrEqual(
      CLAIMS_FAILING_ALARM.datapointsToAlarm,
    );
    // Five minutes against the messages' way to the DLQ: maxReceiveCount receives a visibility timeout apart.
    expect(CLAIMS_FAILING_ALARM.periodMinutes * CLAIMS_FAILING_ALARM.evaluationPeriods * 60).toBeLessThan(
      c.jobTimings.maxReceiveCount * c.jobTimings.visibilityTimeoutSeconds,
    );
    expect(a.AlarmDescription).toMatch(/class 42.*Runbook: docs\/runbooks\/README\.md#claims-failing$/s);
  });

  it("database password not rotated: the secret's age as the workers read it, past the period plus the grace", () => {
    const a = alarmNamed('database password not rotated');
    expect(a).toMatchObject({
      Namespace: metricNamespace('prod'),
      MetricName: METRIC.databaseSecretAgeMs,
      Statistic: 'Maximum',
      Period: 3600,
      ComparisonOperator: 'GreaterThanThreshold',
      Threshold: (c.database.passwordRotationDays + DATABASE_PASSWORD_NOT_ROTATED_GRACE_DAYS) * 86_400_000,
      TreatMissingData: 'ignore',
    });
    expect(a.AlarmDescription).toMatch(
      /has not rotated for more than 32 days.*Runbook: docs\/runbooks\/README\.md#database-password-not-rotated$/s,
    );
  });

  it('API 5xx: load balancer plus target 5xx on the API load balancer', () => {
    const a = alarmNamed('API 5xx');
    expect(a.Threshold).toBe(c.alarms.api5xxPer5Minutes);
    const names = (a.Metrics as { MetricStat?: { Metric: { MetricName: string; Namespace: string } }; Expression?: string }[]).flatMap(
      (m) => (m.MetricStat ? [m.MetricStat.Metric.MetricName] : []),
    );
    expect(names.sort()).toEqual(['HTTPCode_ELB_5XX_Count', 'HTTPCode_Target_5XX_Count']);
    expect(JSON.stringify(a.Metrics)).toContain('ApiLoadBalancer');
  });

  it("worker tasks below minimum: Container Insights running tasks under the config's minimum, missing data breaching", () => {
    const a = alarmNamed('worker tasks below minimum');
    expect(a).toMatchObject({
      Namespace: 'ECS/ContainerInsights',
      MetricName: 'RunningTaskCount',
      ComparisonOperator: 'LessThanThreshold',
      Threshold: c.worker.minTasks,
      TreatMissingData: 'breaching',
    });
    expect(JSON.stringify(a.Dimensions)).toContain(idOf(prod.services.worker.service));
  });
});

describe('dashboard', () => {
  it("shows both lanes' queues and DLQs, the job metrics and both services", () => {
    const body = JSON.stringify(only(t, 'AWS::CloudWatch::Dashboard').props.DashboardBody);
    for (const needle of [
      'ApproximateNumberOfMessagesVisible',
      'QueuesDeadLetterQueue',
      'QueuesJobQueue',
      METRIC.jobsSucceeded,
      METRIC.leasesLost,
      METRIC.jobsDeadLettered,
      METRIC.jobDuration,
      'RunningTaskCount',
      'HTTPCode_Target_5XX_Count',
      'AlarmsDlqNotEmpty',
      // Both lanes (issue 14).
      'QueuesUrgentJobQueue',
      'QueuesUrgentDeadLetterQueue',
      'AlarmsUrgentDlqNotEmpty',
    ]) {
      expect(body, needle).toContain(needle);
    }
  });

  it('shows every job metric the runbooks name ("the dashboard shows every metric named here"), the stuck gauge as its largest report, and the database', () => {
    const body = JSON.stringify(only(t, 'AWS::CloudWatch::Dashboard').props.DashboardBody);
    const runbooks = readFileSync(new URL('../../docs/runbooks/README.md', import.meta.url), 'utf8');
    const named = Object.values(METRIC).filter((m) => new RegExp(`\\b${m}\\b`).test(runbooks));
    expect(named.length).toBeGreaterThan(5);
    for (const m of named) expect(body, m).toContain(`\\"${m}\\"`);
    // The dashboard body is a JSON string: the stuck gauge's statistic follows its name.
    expect(body).toMatch(new RegExp(`${METRIC.jobsStuck}[^\\]]*"stat\\\\":\\\\"Maximum`));
    for (const rds of ['ReadLatency', 'WriteLatency', 'DatabaseConnections', 'FreeStorageSpace', 'HTTPCode_ELB_5XX_Count']) {
      expect(body, rds).toContain(rds);
    }
  });
});

describe('alarm delivery (issue 12)', () => {
  const account = { Ref: 'AWS::AccountId' };
  const alarmArns = alarms.map((a) => ({
    'Fn::Join': [
      '',
      ['arn:', { Ref: 'AWS::Partition' }, ':cloudwatch:', { Ref: 'AWS::Region' }, ':', account, `:alarm:${a.AlarmName as string}`],
    ],
  }));
  const fromOurAlarms = { StringEquals: { 'aws:SourceAccount': account }, ArnLike: { 'aws:SourceArn': alarmArns } };

  it("the topic policy lets CloudWatch publish, for this account's alarms that notify the topic only", () => {
    const policy = only(t, 'AWS::SNS::TopicPolicy').props;
    expect(policy.Topics).toEqual([{ Ref: topicId }]);
    const statements = policy.PolicyDocument.Statement as Record<string, any>[];
    const allow = statements.filter((st) => st.Effect === 'Allow');
    expect(allow).toEqual([
      {
        Sid: 'CloudWatchAlarmsPublish',
        Effect: 'Allow',
        Principal: { Service: 'cloudwatch.amazonaws.com' },
        Action: 'sns:Publish',
        Resource: { Ref: topicId },
        Condition: fromOurAlarms,
      },
    ]);
    // Every alarm's ARN, in the order they were made, and nothing else.
    expect(allow[0]!.Condition.ArnLike['aws:SourceArn']).toHaveLength(27);
  });

  it('the key lets CloudWatch use it under the same conditions, and allows grants only for AWS services', () => {
    const keyPolicy = only(t, 'AWS::KMS::Key').props.KeyPolicy.Statement as Record<string, any>[];
    const cw = keyPolicy.filter((st) => JSON.stringify(st.Principal).includes('cloudwatch.amazonaws.com'));
    expect(cw).toEqual([
      {
        Sid: 'CloudWatchAlarmsPublish',
        Effect: 'Allow',
        Principal: { Service: 'cloudwatch.amazonaws.com' },
        Action: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        Resource: '*',
        Condition: fromOurAlarms,
      },
    ]);
    expect(keyPolicy).toContainEqual({
      Sid: 'GrantsOnlyForAwsServices',
      Effect: 'Deny',
      Principal: { AWS: '*' },
      Action: 'kms:CreateGrant',
      Resource: '*',
      Condition: { BoolIfExists: { 'kms:GrantIsForAWSResource': 'false', 'aws:PrincipalIsAWSService': 'false' } },
    });
  });

  it('docs/deploy.md has the post-deploy drill on the DLQ alarm, by its name', () => {
    const deploy = readFileSync(join(REPO_ROOT, 'docs/deploy.md'), 'utf8');
    const drill = deploy.slice(deploy.indexOf('## Alarm delivery drill'));
    expect(drill.length).toBeGreaterThan(100);
    expect(drill).toMatch(/aws cloudwatch set-alarm-state --alarm-name "ERP jobs \$ENV DLQ not empty" --state-value ALARM/);
    expect(drill).toMatch(/--state-value OK/);
    expect(t.toJSON().Outputs.DlqAlarmName.Value).toBe('ERP jobs prod DLQ not empty');
  });
});

describe('alarms beyond the queue (issue 12)', () => {
  const budget = connectionBudget(c);
  const dbId = idOf(prod.data.database.instance);
  const dbDims = (a: AlarmProps) => expect(JSON.stringify(a.Dimensions)).toContain(dbId);

  it("database CPU: the config's percentage for 15 minutes", () => {
    const a = alarmNamed('database CPU');
    expect(a).toMatchObject({
      Namespace: 'AWS/RDS',
      MetricName: 'CPUUtilization',
      Threshold: c.alarms.databaseCpuPercent,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Period: 300,
      EvaluationPeriods: 3,
    });
    dbDims(a);
  });

  it("database free storage: below the config's share of the allocated storage, in bytes, for 15 minutes (below autoscaling's 10 % trigger)", () => {
    const a = alarmNamed('database free storage');
    expect(a).toMatchObject({
      MetricName: 'FreeStorageSpace',
      Statistic: 'Minimum',
      ComparisonOperator: 'LessThanThreshold',
      Threshold: Math.round(c.alarms.databaseFreeStorageFraction * c.database.allocatedStorageGiB * 1024 ** 3),
      EvaluationPeriods: 3,
      DatapointsToAlarm: 3,
      TreatMissingData: 'ignore',
    });
    expect(c.alarms.databaseFreeStorageFraction).toBeLessThan(0.1);
    dbDims(a);
  });

  it("database freeable memory: below the config's share of the class's memory, in bytes", () => {
    const a = alarmNamed('database freeable memory');
    expect(a).toMatchObject({
      MetricName: 'FreeableMemory',
      ComparisonOperator: 'LessThanThreshold',
      Threshold: Math.round(c.alarms.databaseFreeableMemoryFraction * INSTANCE_MEMORY_GIB[c.database.instanceClass]! * 1024 ** 3),
    });
    dbDims(a);
  });

  it("database connections: above the connection budget's ceiling config.ts computes", () => {
    const a = alarmNamed('database connections');
    expect(a).toMatchObject({
      MetricName: 'DatabaseConnections',
      Statistic: 'Maximum',
      ComparisonOperator: 'GreaterThanThreshold',
      Threshold: budget.allowed,
    });
    expect(budget.allowed).toBeGreaterThan(budget.total);
    expect(a.AlarmDescription).toContain(String(budget.total));
    dbDims(a);
  });

  it("API unhealthy targets: any unhealthy target of the API's target group for 3 minutes", () => {
    const a = alarmNamed('API unhealthy targets');
    expect(a).toMatchObject({
      Namespace: 'AWS/ApplicationELB',
      MetricName: 'UnHealthyHostCount',
      Statistic: 'Maximum',
      Threshold: 1,
      EvaluationPeriods: 3,
      TreatMissingData: 'notBreaching',
    });
    expect(JSON.stringify(a.Dimensions)).toContain(idOf(prod.services.api.targetGroup));
  });

  it('API tasks below minimum: Container Insights running tasks under api.minTasks, missing data breaching', () => {
    const a = alarmNamed('API tasks below minimum');
    expect(a).toMatchObject({
      Namespace: 'ECS/ContainerInsights',
      MetricName: 'RunningTaskCount',
      ComparisonOperator: 'LessThanThreshold',
      Threshold: c.api.minTasks,
      TreatMissingData: 'breaching',
    });
    expect(JSON.stringify(a.Dimensions)).toContain(idOf(prod.services.api.service));
  });

  it('worker at maximum with backlog: running tasks at worker.maxTasks and backlog per task (both lanes) above its target', () => {
    const a = alarmNamed('worker at maximum with backlog');
    const metrics = a.Metrics as {
      Id: string;
      Expression?: string;
      ReturnData?: boolean;
      MetricStat?: { Metric: { Dimensions?: unknown }; Stat?: string; Period?: number };
    }[];
    const expr = metrics.find((m) => m.Expression && m.ReturnData !== false)!;
    expect(expr.Expression).toBe(`IF(running >= ${c.worker.maxTasks} AND visible / running > ${c.worker.backlogPerTaskTarget}, 1, 0)`);
    // `visible` is the backlog of both lanes, a lane without data counting as empty.
    expect(metrics.find((m) => m.Id === 'visible')?.Expression).toBe('FILL(visibleUrgent, 0) + FILL(visibleBulk, 0)');
    for (const l of prod.data.queues.all()) {
      const id = `visible${l.lane.charAt(0).toUpperCase()}${l.lane.slice(1)}`;
      expect(JSON.stringify(metrics.find((m) => m.Id === id)?.MetricStat?.Metric.Dimensions), id).toContain(
        `${idOf(l.queue.node.defaultChild!)}QueueName`,
      );
      // The backlog over 5 minutes: SQS's once-a-minute count averaged (a Sum counted it five times, alarm review).
      expect(metrics.find((m) => m.Id === id)?.MetricStat).toMatchObject({ Stat: 'Average', Period: 300 });
    }
    expect(a).toMatchObject({
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      EvaluationPeriods: c.alarms.workerAtMaximumMinutes / 5,
    });
    const json = JSON.stringify(a.Metrics);
    expect(json).toContain('QueuesJobQueue');
    expect(json).toContain(idOf(prod.services.worker.service));
  });

  it("the API's 5xx and unhealthy-target alarms roll a bad API deployment back; the worker has none", () => {
    const services = resourcesOfType(t, 'AWS::ECS::Service');
    const api = services[idOf(prod.services.api.service)]!.Properties as Record<string, any>;
    expect(api.DeploymentConfiguration.Alarms).toEqual({
      AlarmNames: ['ERP jobs prod API 5xx', 'ERP jobs prod API unhealthy targets'],
      Enable: true,
      Rollback: true,
    });
    expect(API_DEPLOYMENT_ALARMS).toEqual(['api5xx', 'apiUnhealthyTargets']);
    for (const n of api.DeploymentConfiguration.Alarms.AlarmNames as string[]) expect(alarms.map((x) => x.AlarmName)).toContain(n);
    const worker = services[idOf(prod.services.worker.service)]!.Properties as Record<string, any>;
    expect(worker.DeploymentConfiguration.Alarms?.Enable ?? false).toBe(false);
  });
});
