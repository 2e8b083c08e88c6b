// cdk-nag AwsSolutions on the whole app, and the one way this code base acknowledges a finding:
// beside the construct it concerns, with a reason a reviewer would accept. An acknowledgement
// covers the construct and its children, never a whole stack.

import { Validations, type App } from 'aws-cdk-lib';
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
