// The SNS topic on-call subscribes to. Encrypted with a customer-managed key because CloudWatch
// alarms cannot publish to a topic under the AWS-managed SNS key. A topic policy replaces SNS's
// default policy, so it must say who may publish: CloudWatch, for this account's alarms that
// notify it (by ARN, aws:SourceArn) and nothing else; the key's policy lets CloudWatch use the key
// under the same conditions. TLS-only publishing; key grants only for AWS services.

import { Annotations, ArnFormat, Duration, Lazy, RemovalPolicy, Stack } from 'aws-cdk-lib';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cloudwatchActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import { Construct } from 'constructs';
import type { EnvironmentName } from '../config.ts';

export interface OnCallTopicProps {
  envName: EnvironmentName;
  /** E-mail addresses subscribed (each confirms once by mail). */
  emails: string[];
  /** HTTPS endpoints subscribed: a pager's integration (it confirms the subscription itself). */
  httpsEndpoints?: string[];
}

export const CLOUDWATCH_PRINCIPAL = 'cloudwatch.amazonaws.com';

export class OnCallTopic extends Construct {
  readonly topic: sns.ITopic;
  readonly key: kms.IKey;
  private readonly action: cloudwatch.IAlarmAction;
  /** ARNs of the alarms that notify this topic, by name: CloudWatch publishes as them. */
  private readonly alarmArns: string[] = [];

  constructor(scope: Construct, id: string, props: OnCallTopicProps) {
    super(scope, id);
    const stack = Stack.of(this);
    // Built from the alarms' names, not their GetAtt: the alarms reference the topic, which
    // references the key, so the key's policy cannot reference the alarms.
    const fromOurAlarms = {
      StringEquals: { 'aws:SourceAccount': stack.account },
      ArnLike: { 'aws:SourceArn': Lazy.list({ produce: () => this.alarmArns }) },
    };
    const key = new kms.Key(this, 'Key', {
      description: `ERP jobs ${props.envName} on-call topic`,
      enableKeyRotation: true,
      pendingWindow: Duration.days(7),
      removalPolicy: RemovalPolicy.DESTROY,
    });
    key.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchAlarmsPublish',
        principals: [new iam.ServicePrincipal(CLOUDWATCH_PRINCIPAL)],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        resources: ['*'],
        conditions: fromOurAlarms,
      }),
    );
    key.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'GrantsOnlyForAwsServices',
        effect: iam.Effect.DENY,
        principals: [new iam.AnyPrincipal()],
        actions: ['kms:CreateGrant'],
        resources: ['*'],
        conditions: { BoolIfExists: { 'kms:GrantIsForAWSResource': 'false', 'aws:PrincipalIsAWSService': 'false' } },
      }),
    );
    const topic = new sns.Topic(this, 'Topic', {
      displayName: `ERP jobs ${props.envName} on-call`,
      masterKey: key,
      enforceSSL: true,
    });
    topic.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchAlarmsPublish',
        principals: [new iam.ServicePrincipal(CLOUDWATCH_PRINCIPAL)],
        actions: ['sns:Publish'],
        resources: [topic.topicArn],
        conditions: fromOurAlarms,
      }),
    );
    this.node.addValidation({
      validate: () =>
        this.alarmArns.length === 0 ? ['no alarm notifies the on-call topic: CloudWatch would be allowed to publish for none'] : [],
    });
    for (const email of props.emails) topic.addSubscription(new subscriptions.EmailSubscription(email));
    for (const url of props.httpsEndpoints ?? [])
      topic.addSubscription(new subscriptions.UrlSubscription(url, { protocol: sns.SubscriptionProtocol.HTTPS }));
    // Staging and prod refuse to synthesize without an address (lib/config.ts checkAlarmEmails); an
    // environment allowed none still says so, so that nobody takes its alarms for a pager.
    if (props.emails.length === 0 && (props.httpsEndpoints ?? []).length === 0)
      Annotations.of(this).addWarningV2(
        'erp-jobs:alarms-page-nobody',
        `the ${props.envName} alarms notify an on-call topic with no subscription: they page nobody; set alarms.emails in lib/config.ts or pass -c alarmEmails=you@your-company.com`,
      );
    else if ((props.httpsEndpoints ?? []).length === 0)
      // Said at every synth, not refused: an e-mail list is allowed, but a subscription nobody
      // confirmed delivers nothing, and no alarm notices (stack review).
      Annotations.of(this).addInfo(
        `the ${props.envName} alarms reach e-mail only (${props.emails.join(', ')}): each address must confirm its subscription before it receives anything, and e-mail wakes nobody at night; a pager's HTTPS endpoint (-c alarmEndpoints=https://…) pages a person. Run the alarm delivery drill (docs/deploy.md) after the first deploy.`,
      );
    this.topic = topic;
    this.key = key;
    this.action = new cloudwatchActions.SnsAction(topic);
  }

  /**
   * Page on-call when the alarm fires, and tell them when it clears. `alarmName` is the name the
   * alarm was created with (a token would not do: its ARN goes into the topic's and the key's
   * policies, which the alarm itself depends on).
   */
  notifyOn(alarm: cloudwatch.Alarm, alarmName: string): void {
    alarm.addAlarmAction(this.action);
    alarm.addOkAction(this.action);
    this.alarmArns.push(
      Stack.of(this).formatArn({
        service: 'cloudwatch',
        resource: 'alarm',
        resourceName: alarmName,
        arnFormat: ArnFormat.COLON_RESOURCE_NAME,
      }),
    );
  }
}
