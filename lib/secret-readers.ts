// Who may read each secret. The services' roles carry fixed names derived from the stack prefix
// (so the stateful stack can name them without referencing the services stack), and every
// secret's resource policy denies secretsmanager:GetSecretValue to any other principal: an
// administrator's or a CI role's identity policy cannot read a database password or a token by
// accident. CloudFormation's execution role (the CDK bootstrap's cfn-exec-role) stays allowed: it
// resolves the master password for the instance and writes the connection fields into the
// attached secrets. docs/deploy.md#secrets.

import { Aws } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';

/** IAM role names of the services stack's readers (IAM names are at most 64 characters). */
export function serviceRoleNames(stackPrefix: string) {
  const name = (what: string) => {
    const n = `${stackPrefix}-${what}`;
    if (n.length > 64) throw new Error(`IAM role name ${n} is longer than 64 characters: shorten stackPrefix`);
    return n;
  };
  return {
    apiExecution: name('api-execution'),
    workerExecution: name('worker-execution'),
    // The task roles read the database secret again while a task runs (runtime/db/credentials.ts).
    apiTask: name('api-task'),
    workerTask: name('worker-task'),
    // Rotates the services' secret, as the master user (lib/password-rotation.ts).
    passwordRotation: name('password-rotation'),
    schemaBootstrap: name('schema-bootstrap'),
  } as const;
}

/** The CDK bootstrap's CloudFormation execution role, whatever its qualifier. */
export const CLOUDFORMATION_EXECUTION_ROLE = 'cdk-*-cfn-exec-role-*';

/** Role ARNs (patterns) for role names in this account, with or without a path (SSO roles have one). */
export function roleArnPatterns(names: string[]): string[] {
  return names.flatMap((n) => [
    `arn:${Aws.PARTITION}:iam::${Aws.ACCOUNT_ID}:role/${n}`,
    `arn:${Aws.PARTITION}:iam::${Aws.ACCOUNT_ID}:role/*/${n}`,
  ]);
}

export const ONLY_NAMED_READERS_SID = 'OnlyNamedRolesReadTheSecret';

/** Deny reading `secret` to every principal but the named roles (and CloudFormation's execution role). */
export function restrictSecretReaders(secret: secretsmanager.ISecret, roleNames: string[]): void {
  const result = secret.addToResourcePolicy(
    new iam.PolicyStatement({
      sid: ONLY_NAMED_READERS_SID,
      effect: iam.Effect.DENY,
      principals: [new iam.AnyPrincipal()],
      actions: ['secretsmanager:GetSecretValue'],
      resources: ['*'],
      conditions: { StringNotLike: { 'aws:PrincipalArn': roleArnPatterns([...roleNames, CLOUDFORMATION_EXECUTION_ROLE]) } },
    }),
  );
  if (!result.statementAdded) throw new Error(`${secret.node.path}: cannot add a resource policy to this secret`);
}
