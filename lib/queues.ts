// The job queue and its dead-letter queue. SQS only delivers: a message carries a job id, the
// job row decides. The redrive policy is the net for what the worker cannot reach (a crash loop
// on one message); its maxReceiveCount comes from the checked job timings, so SQS never
// dead-letters a job the database would still retry. The DLQ keeps longer than the queue so a
// redriven message (which keeps its original timestamp) does not expire on arrival. The DLQ's
// redrive-allow policy admits the job queue alone as a source, so no other queue can dead-letter
// into it (and page on-call) by pointing its redrive policy here.

import { Duration, type RemovalPolicy, Stack } from 'aws-cdk-lib';
import type * as iam from 'aws-cdk-lib/aws-iam';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import * as cr from 'aws-cdk-lib/custom-resources';
import { Construct } from 'constructs';
import type { JobTimings } from '../runtime/config/rules.ts';
import type { QueueConfig } from './config.ts';
import { acknowledgeAwsCustomResourceFunction } from './nag.ts';

export interface JobQueuesProps extends QueueConfig {
  jobTimings: JobTimings;
  removalPolicy: RemovalPolicy;
}

export class JobQueues extends Construct {
  readonly queue: sqs.IQueue;
  readonly deadLetterQueue: sqs.IQueue;

  constructor(scope: Construct, id: string, props: JobQueuesProps) {
    super(scope, id);
    const dlq = new sqs.Queue(this, 'DeadLetterQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(props.deadLetterRetentionDays),
      removalPolicy: props.removalPolicy,
    });
    const queue = new sqs.Queue(this, 'JobQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(props.retentionDays),
      visibilityTimeout: Duration.seconds(props.jobTimings.visibilityTimeoutSeconds),
      // Long polling by default: a worker that forgets WaitTimeSeconds still does not busy-poll.
      receiveMessageWaitTime: Duration.seconds(20),
      deadLetterQueue: { queue: dlq, maxReceiveCount: props.jobTimings.maxReceiveCount },
      removalPolicy: props.removalPolicy,
    });
    this.queue = queue;
    this.deadLetterQueue = dlq;
    restrictRedriveSources(this, dlq, queue);
  }

  /** Publish job messages (the API after commit; the worker's relay and sweeper re-publish). */
  grantPublish(grantee: iam.IGrantable): iam.Grant {
    return this.queue.grantSendMessages(grantee);
  }

  /** Receive, extend visibility of and delete job messages (the worker). */
  grantConsume(grantee: iam.IGrantable): iam.Grant {
    return this.queue.grantConsumeMessages(grantee);
  }

  /**
   * Work the DLQ as the on-call routes do (the API): receive dead letters, hold them
   * (ChangeMessageVisibility), delete obsolete or discarded ones, read its ARN (GetQueueAttributes),
   * and SQS's message move task from the DLQ: StartMessageMoveTask needs, on the source queue, the
   * action itself plus ReceiveMessage, DeleteMessage and GetQueueAttributes, and SendMessage on the
   * destination (the job queue: grantPublish). List and cancel a move on the DLQ only. SSE-SQS
   * encryption: no KMS key to grant.
   */
  grantDeadLetterRedrive(grantee: iam.IGrantable): iam.Grant[] {
    return [
      this.deadLetterQueue.grantConsumeMessages(grantee),
      this.deadLetterQueue.grant(grantee, 'sqs:StartMessageMoveTask', 'sqs:ListMessageMoveTasks', 'sqs:CancelMessageMoveTask'),
    ];
  }

  /** Send a dead letter with its reason (the worker, for poison messages and dead jobs). */
  grantDeadLetter(grantee: iam.IGrantable): iam.Grant {
    return this.deadLetterQueue.grantSendMessages(grantee);
  }
}

/**
 * The DLQ's RedriveAllowPolicy: `byQueue`, the job queue only. Set after both queues exist: in the
 * template the policy would name the job queue's ARN while the job queue's redrive policy names the
 * DLQ's, a cycle CloudFormation refuses. CloudFormation never writes the attribute afterwards (it
 * is not in the DLQ's properties), so nothing resets it.
 */
function restrictRedriveSources(scope: Construct, dlq: sqs.Queue, source: sqs.Queue): void {
  const policy = Stack.of(scope).toJsonString({ redrivePermission: 'byQueue', sourceQueueArns: [source.queueArn] });
  const call: cr.AwsSdkCall = {
    service: 'SQS',
    action: 'setQueueAttributes',
    parameters: { QueueUrl: dlq.queueUrl, Attributes: { RedriveAllowPolicy: policy } },
    physicalResourceId: cr.PhysicalResourceId.of('dead-letter-queue-redrive-allow-policy'),
  };
  const resource = new cr.AwsCustomResource(scope, 'DeadLetterQueueRedriveAllowPolicy', {
    onCreate: call,
    onUpdate: call,
    policy: cr.AwsCustomResourcePolicy.fromSdkCalls({ resources: [dlq.queueArn] }),
    installLatestAwsSdk: false,
  });
  resource.node.addDependency(source);
  acknowledgeAwsCustomResourceFunction(resource);
}
