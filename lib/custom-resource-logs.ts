// The log group of aws-cdk-lib's AwsCustomResource function, one per stack (the function is a
// singleton: the first AwsCustomResource of the stack creates it, and with it, under the
// `@aws-cdk/aws-lambda:useCdkManagedLogGroup` flag, a log group of two years' retention kept
// forever). Every AwsCustomResource of the stack passes this one, so its logs are kept and
// removed as the environment's other logs (lib/config.ts logRetentionDays, retainLogs).

import { type RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import type { LogRetentionDays } from './config.ts';

const ID = 'AwsCustomResourceLogs';

export function awsCustomResourceLogs(
  scope: Construct,
  o: { retentionDays: LogRetentionDays; removalPolicy: RemovalPolicy },
): logs.ILogGroup {
  const stack = Stack.of(scope);
  return (
    (stack.node.tryFindChild(ID) as logs.LogGroup | undefined) ??
    new logs.LogGroup(stack, ID, { retention: o.retentionDays as logs.RetentionDays, removalPolicy: o.removalPolicy })
  );
}
