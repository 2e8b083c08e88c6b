// cdk-nag AwsSolutions on the whole app, and the one way this code base acknowledges a finding:
// beside the construct it concerns, with a reason a reviewer would accept. An acknowledgement
// covers the construct and its children, never a whole stack.

import { Stack, Validations, type App } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { IConstruct } from 'constructs';

export function addNagChecks(app: App): void {
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
}

/** Acknowledge one AwsSolutions finding (e.g. `AwsSolutions-IAM5[Resource::*]`) on `scope` and below. */
export function acknowledge(scope: IConstruct, id: string, reason: string): void {
  // Namespaced by the plugin, as the validation report prints it (`AwsSolutions::AwsSolutions-…`).
  Validations.of(scope).acknowledge({ id: `${NAG_NAMESPACE}::${id}`, reason });
}

export const NAG_NAMESPACE = 'AwsSolutions';

/** Construct ids aws-cdk-lib gives its per-stack framework functions. */
export const FRAMEWORK_FUNCTION_IDS = {
  awsCustomResource: 'AWS679f53fac002430cb0da5b7982bd2287',
  logRetention: 'LogRetentionaae0aa3c5b4d4f87b02d85b201efdd8a',
} as const;

/** aws-cdk-lib's AwsCustomResource function of `scope`'s stack (created with the first AwsCustomResource). */
export function acknowledgeAwsCustomResourceFunction(scope: IConstruct): void {
  const fn = Stack.of(scope).node.findChild(FRAMEWORK_FUNCTION_IDS.awsCustomResource);
  acknowledge(
    fn,
    'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
    "aws-cdk-lib's AwsCustomResource function: the AWS-managed basic execution policy only lets it write its own logs; each call's permissions are a separate, scoped policy.",
  );
}

/** aws-cdk-lib's log-retention function of `scope`'s stack (sets the retention of log groups a service creates). */
export function acknowledgeLogRetentionFunction(scope: IConstruct): void {
  const fn = Stack.of(scope).node.findChild(FRAMEWORK_FUNCTION_IDS.logRetention);
  acknowledge(
    fn,
    'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
    "aws-cdk-lib's log-retention function: the AWS-managed basic execution policy only lets it write its own logs.",
  );
  acknowledge(
    fn,
    'AwsSolutions-IAM5[Resource::*]',
    "aws-cdk-lib's log-retention function sets the retention of log groups RDS creates with generated names (the exported postgresql and upgrade logs), which are not known when the policy is written.",
  );
}
