// The SNS topic on-call subscribes to. Encrypted with a customer-managed key because CloudWatch
// alarms cannot publish to a topic under the AWS-managed SNS key; the key policy lets CloudWatch
// use it and nothing else beyond the account. TLS-only publishing.

import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
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
}

export class OnCallTopic extends Construct {
  readonly topic: sns.ITopic;
  private readonly action: cloudwatch.IAlarmAction;

  constructor(scope: Construct, id: string, props: OnCallTopicProps) {
    super(scope, id);
    const key = new kms.Key(this, 'Key', {
      description: `ERP jobs ${props.envName} on-call topic`,
      enableKeyRotation: true,
      pendingWindow: Duration.days(7),
      removalPolicy: RemovalPolicy.DESTROY,
    });
    key.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchAlarmsPublish',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        resources: ['*'],
      }),
    );
    const topic = new sns.Topic(this, 'Topic', {
      displayName: `ERP jobs ${props.envName} on-call`,
      masterKey: key,
      enforceSSL: true,
    });
    for (const email of props.emails) topic.addSubscription(new subscriptions.EmailSubscription(email));
    this.topic = topic;
    this.action = new cloudwatchActions.SnsAction(topic);
  }

  /** Page on-call when the alarm fires, and tell them when it clears. */
  notifyOn(alarm: cloudwatch.Alarm): void {
    alarm.addAlarmAction(this.action);
    alarm.addOkAction(this.action);
  }
}
