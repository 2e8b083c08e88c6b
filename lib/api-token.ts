// The bearer token ERP clients present to the API. Generated once into Secrets Manager and kept
// in the stateful stack, so redeploying or replacing the services never changes what the
// clients are configured with. The API gets it as the ECS secret API_TOKEN.

import { RemovalPolicy } from 'aws-cdk-lib';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import { acknowledge } from './nag.ts';

export interface ApiTokenProps {
  removalPolicy: RemovalPolicy;
}

export class ApiToken extends Construct {
  readonly secret: secretsmanager.ISecret;

  constructor(scope: Construct, id: string, props: ApiTokenProps) {
    super(scope, id);
    const secret = new secretsmanager.Secret(this, 'Secret', {
      description: 'Bearer token of the ERP jobs API (API_TOKEN)',
      generateSecretString: { passwordLength: 48, excludePunctuation: true },
      removalPolicy: props.removalPolicy,
    });
    acknowledge(secret, 'AwsSolutions-SMG4',
      'A static bearer token shared with the ERP clients: rotating it needs the clients reconfigured in step, so it is rotated by the manual procedure in docs/deploy.md, not by a Lambda.');
    this.secret = secret;
  }
}
