// The API's bearer tokens — the ERP clients' (API_TOKEN) and on-call's (API_OPERATOR_TOKEN; the
// on-call routes /v1/dead-jobs, /v1/dlq, /v1/poison-messages, /v1/stuck-jobs, /v1/pending-jobs need it and refuse
// the clients' token). Each is generated once into Secrets Manager and kept in the stateful stack,
// so redeploying or replacing the services never changes it. The API gets them as ECS secrets;
// on-call reads the operator token from the secret the `OperatorTokenSecretArn` output names.

import type { RemovalPolicy } from 'aws-cdk-lib';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import { acknowledge } from './nag.ts';

export interface BearerTokenProps {
  description: string;
  removalPolicy: RemovalPolicy;
  /** Why it is rotated by hand (docs/deploy.md) rather than by a rotation Lambda: cdk-nag SMG4. */
  manualRotationReason: string;
}

export class BearerToken extends Construct {
  readonly secret: secretsmanager.ISecret;

  constructor(scope: Construct, id: string, props: BearerTokenProps) {
    super(scope, id);
    const secret = new secretsmanager.Secret(this, 'Secret', {
      description: props.description,
      generateSecretString: { passwordLength: 48, excludePunctuation: true },
      removalPolicy: props.removalPolicy,
    });
    acknowledge(secret, 'AwsSolutions-SMG4', props.manualRotationReason);
    this.secret = secret;
  }
}
