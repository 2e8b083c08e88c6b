// The bearer token of on-call operators: the API's on-call routes (dead jobs, the DLQ, poison
// messages, stuck jobs; runtime/ops/api.ts) need it, and refuse the ERP clients' API token.
// Generated once into Secrets Manager and kept in the stateful stack beside the API token, so
// redeploying or replacing the services never changes it. The API gets it as the ECS secret
// API_OPERATOR_TOKEN; on-call reads it from the secret the `OperatorTokenSecretArn` output names.

import { RemovalPolicy } from 'aws-cdk-lib';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import { ENV } from '../runtime/config/env.ts';
import { acknowledge } from './nag.ts';

export interface OperatorTokenProps {
  removalPolicy: RemovalPolicy;
}

export class OperatorToken extends Construct {
  readonly secret: secretsmanager.ISecret;

  constructor(scope: Construct, id: string, props: OperatorTokenProps) {
    super(scope, id);
    const secret = new secretsmanager.Secret(this, 'Secret', {
      description: `On-call operator token of the ERP jobs API (${ENV.apiOperatorToken}): the on-call routes /v1/dead-jobs, /v1/dlq, /v1/poison-messages, /v1/stuck-jobs`,
      generateSecretString: { passwordLength: 48, excludePunctuation: true },
      removalPolicy: props.removalPolicy,
    });
    acknowledge(secret, 'AwsSolutions-SMG4',
      'ECS resolves the token only at task start, so a rotation Lambda would leave running API tasks on the old value; it is rotated by the manual procedure in docs/deploy.md (new value, then a forced API deployment).');
    this.secret = secret;
  }
}
