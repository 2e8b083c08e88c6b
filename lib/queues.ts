// The job queues and their dead-letter queues, one pair per priority lane (issue 14): `urgent`
// and `bulk`, the default. The bulk lane is the queue and DLQ this stack had before lanes, under
// the same construct IDs, so a deployed stack keeps them (same logical IDs: no replacement, no
// lost messages); the urgent lane is a second pair with the same properties. SQS only delivers:
// a message carries a job id, the job row decides. The redrive policy is the net for what the
// worker cannot reach (a crash loop on one message); its maxReceiveCount comes from the checked
// job timings, so SQS never dead-letters a job the database would still retry. The DLQ keeps
// longer than the queue so a redriven message (which keeps its original timestamp) does not
// expire on arrival. Each DLQ's redrive-allow policy admits its own lane's job queue alone as a
// source, so no other queue (not even the other lane's) can dead-letter into it (and page
// on-call) by pointing its redrive policy here.

import { Duration, type RemovalPolicy, Stack } from 'aws-cdk-lib';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as logs from 'aws-cdk-lib/aws-logs';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import * as cr from 'aws-cdk-lib/custom-resources';
import { Construct } from 'constructs';
import type { JobTimings } from '../runtime/config/rules.ts';
import type { LogRetentionDays, QueueConfig } from './config.ts';
import { awsCustomResourceLogs } from './custom-resource-logs.ts';
import { acknowledgeAwsCustomResourceFunction } from './nag.ts';

export interface JobQueuesProps extends QueueConfig {
  jobTimings: JobTimings;
  removalPolicy: RemovalPolicy;
  /** The logs of the function that sets the DLQs' redrive-allow policies: the environment's retention and removal. */
  logRetentionDays: LogRetentionDays;
  logRemovalPolicy: RemovalPolicy;
}

/** The priority lanes, highest first. The worker takes from a higher lane first (runtime). */
export const JOB_LANES = ['urgent', 'bulk'] as const;
export type JobLane = (typeof JOB_LANES)[number];
/** The lane of a job that names none, and the one whose queues predate lanes. */
export const DEFAULT_LANE: JobLane = 'bulk';

/** One lane's job queue and the DLQ its redrive policy points to. */
export interface LaneQueues {
  readonly lane: JobLane;
  readonly queue: sqs.IQueue;
  readonly deadLetterQueue: sqs.IQueue;
}

/**
 * A lane's construct ID for one of its parts: the default lane keeps the bare IDs it had before
 * lanes (a new ID would be a new logical ID, and CloudFormation would replace the queue, losing
 * its messages); the others carry their name in front (`UrgentJobQueue`).
 */
export function laneConstructId(lane: JobLane, id: string): string {
  return lane === DEFAULT_LANE ? id : `${lane.charAt(0).toUpperCase()}${lane.slice(1)}${id}`;
}

export class JobQueues extends Construct {
  /** Every lane's queues. */
  readonly lanes: Readonly<Record<JobLane, LaneQueues>>;
  /** The bulk (default) lane's job queue: JOBS_QUEUE_URL. */
  readonly queue: sqs.IQueue;
  /** The bulk (default) lane's DLQ: JOBS_DLQ_URL. */
  readonly deadLetterQueue: sqs.IQueue;

  constructor(scope: Construct, id: string, props: JobQueuesProps) {
    super(scope, id);
    const customResourceLogs = awsCustomResourceLogs(this, {
      retentionDays: props.logRetentionDays,
      removalPolicy: props.logRemovalPolicy,
    });
    const lane = (name: JobLane): LaneQueues => {
      const dlq = new sqs.Queue(this, laneConstructId(name, 'DeadLetterQueue'), {
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        retentionPeriod: Duration.days(props.deadLetterRetentionDays),
        removalPolicy: props.removalPolicy,
      });
      const queue = new sqs.Queue(this, laneConstructId(name, 'JobQueue'), {
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        retentionPeriod: Duration.days(props.retentionDays),
        visibilityTimeout: Duration.seconds(props.jobTimings.visibilityTimeoutSeconds),
        // Long polling by default: a worker that forgets WaitTimeSeconds still does not busy-poll.
        receiveMessageWaitTime: Duration.seconds(20),
        deadLetterQueue: { queue: dlq, maxReceiveCount: props.jobTimings.maxReceiveCount },
        removalPolicy: props.removalPolicy,
      });
      restrictRedriveSources(this, name, dlq, queue, customResourceLogs);
      return { lane: name, queue, deadLetterQueue: dlq };
    };
    this.lanes = { bulk: lane('bulk'), urgent: lane('urgent') };
    this.queue = this.lanes[DEFAULT_LANE].queue;
    this.deadLetterQueue = this.lanes[DEFAULT_LANE].deadLetterQueue;
  }

  /** Every lane, highest first. */
  all(): LaneQueues[] {
    return JOB_LANES.map((l) => this.lanes[l]);
  }

  /** Publish job messages to every lane (the API after commit; the worker's relay and sweeper re-publish). */
  grantPublish(grantee: iam.IGrantable): iam.Grant[] {
    return this.all().map((l) => l.queue.grantSendMessages(grantee));
  }

  /** Receive, extend visibility of and delete job messages of every lane (the worker). */
  grantConsume(grantee: iam.IGrantable): iam.Grant[] {
    return this.all().map((l) => l.queue.grantConsumeMessages(grantee));
  }

  /**
   * Work every lane's DLQ as the on-call routes do (the API): receive dead letters, hold them
   * (ChangeMessageVisibility), delete obsolete or discarded ones, read its ARN (GetQueueAttributes),
   * and SQS's message move task from the DLQ: StartMessageMoveTask needs, on the source queue, the
   * action itself plus ReceiveMessage, DeleteMessage and GetQueueAttributes, and SendMessage on the
   * destination (the lane's job queue: grantPublish). List and cancel a move on the DLQs only.
   * SSE-SQS encryption: no KMS key to grant.
   */
  grantDeadLetterRedrive(grantee: iam.IGrantable): iam.Grant[] {
    return this.all().flatMap((l) => [
      l.deadLetterQueue.grantConsumeMessages(grantee),
      l.deadLetterQueue.grant(grantee, 'sqs:StartMessageMoveTask', 'sqs:ListMessageMoveTasks', 'sqs:CancelMessageMoveTask'),
    ]);
  }

  /** Send a dead letter with its reason to every lane's DLQ (the worker, for poison messages and dead jobs). */
  grantDeadLetter(grantee: iam.IGrantable): iam.Grant[] {
    return this.all().map((l) => l.deadLetterQueue.grantSendMessages(grantee));
  }
}

/**
 * A lane's DLQ's RedriveAllowPolicy: `byQueue`, that lane's job queue only. Set after both queues
 * exist: in the template the policy would name the job queue's ARN while the job queue's redrive
 * policy names the DLQ's, a cycle CloudFormation refuses. CloudFormation never writes the attribute afterwards (it
 * is not in the DLQ's properties), so nothing resets it.
 */
function restrictRedriveSources(scope: Construct, lane: JobLane, dlq: sqs.Queue, source: sqs.Queue, logGroup: logs.ILogGroup): void {
  const policy = Stack.of(scope).toJsonString({ redrivePermission: 'byQueue', sourceQueueArns: [source.queueArn] });
  const call: cr.AwsSdkCall = {
    service: 'SQS',
    action: 'setQueueAttributes',
    parameters: { QueueUrl: dlq.queueUrl, Attributes: { RedriveAllowPolicy: policy } },
    // The bulk lane's as before lanes: a new physical ID would turn the next update into a replacement.
    physicalResourceId: cr.PhysicalResourceId.of(
      lane === DEFAULT_LANE ? 'dead-letter-queue-redrive-allow-policy' : `${lane}-dead-letter-queue-redrive-allow-policy`,
    ),
  };
  const resource = new cr.AwsCustomResource(scope, laneConstructId(lane, 'DeadLetterQueueRedriveAllowPolicy'), {
    onCreate: call,
    onUpdate: call,
    policy: cr.AwsCustomResourcePolicy.fromSdkCalls({ resources: [dlq.queueArn] }),
    installLatestAwsSdk: false,
    logGroup,
  });
  resource.node.addDependency(source);
  acknowledgeAwsCustomResourceFunction(resource);
}
