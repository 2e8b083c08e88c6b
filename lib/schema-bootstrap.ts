// Runs the runtime's migrations at deploy time, before either service starts: a custom resource
// whose handler (runtime/bootstrap/handler.ts, bundled here by esbuild with the migrations, the
// platform's and the ERP's own, copied beside it) calls the same migrate() as `jobs migrate`,
// inside the VPC, under the same advisory lock. The resource carries a hash of both migration
// folders, so a changed folder is an Update and the migrations run again; its failure fails the
// deployment. Services depend on `resource`.

import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CustomResource, Duration, type RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as cr from 'aws-cdk-lib/custom-resources';
import { Construct, type IDependable } from 'constructs';
import type { BootstrapProperties } from '../runtime/bootstrap/handler.ts';
import { ENV } from '../runtime/config/env.ts';
import type { LogRetentionDays } from './config.ts';
import type { JobDatabase } from './database.ts';
import { databaseFunction, ESM_BUNDLING } from './database-function.ts';
import { acknowledge } from './nag.ts';
import type { Network } from './network.ts';
import { APP_MIGRATIONS_DIR, BOOTSTRAP_ENTRY, MIGRATIONS_DIR } from './paths.ts';

export { LAMBDA_AMAZON_CA_BUNDLE } from './database-function.ts';

/**
 * sha256 over the migration files' names and contents, in order, the platform's then the
 * application's (named app/…): changes exactly when either folder does. Without application
 * migrations it is the platform folder's hash alone, as before there were any.
 */
export function migrationsHash(dir: string = MIGRATIONS_DIR, appDir: string = APP_MIGRATIONS_DIR): string {
  const h = createHash('sha256');
  const sqlFiles = (d: string) =>
    existsSync(d)
      ? readdirSync(d)
          .filter((f) => f.endsWith('.sql'))
          .sort()
      : [];
  for (const [folder, prefix] of [
    [dir, ''],
    [appDir, 'app/'],
  ] as const) {
    for (const file of sqlFiles(folder)) {
      h.update(prefix + file)
        .update('\0')
        .update(readFileSync(join(folder, file)))
        .update('\0');
    }
  }
  return h.digest('hex');
}

/** The shared ESM bundle, with the migrations copied beside it (the SDK is not used: the secret comes from the extension). */
const BUNDLING: nodejs.BundlingOptions = {
  ...ESM_BUNDLING,
  commandHooks: {
    beforeBundling: () => [],
    beforeInstall: () => [],
    // The ERP's own migrations (migrations/app) beside them as app-migrations/, where
    // runtime/db/migrate.ts looks in a bundle; made even while the folder holds none.
    afterBundling: (inputDir: string, outputDir: string) => [
      `cp -R "${inputDir}/runtime/db/migrations" "${outputDir}/migrations"`,
      `mkdir -p "${outputDir}/app-migrations"`,
      `if [ -d "${inputDir}/migrations/app" ]; then cp -R "${inputDir}/migrations/app/." "${outputDir}/app-migrations/"; fi`,
    ],
  },
};

/** The bootstrap's Lambda timeout: long enough for a large migration waiting on the advisory lock. */
export const BOOTSTRAP_TIMEOUT = Duration.minutes(10);

export interface SchemaBootstrapProps {
  network: Network;
  database: JobDatabase;
  /** The function role's fixed name: the database secrets' resource policies admit it by name (secret-readers.ts). */
  roleName: string;
  logRetentionDays: LogRetentionDays;
  logRemovalPolicy: RemovalPolicy;
}

export class SchemaBootstrap extends Construct {
  /** Depend on this to start after the schema is current. */
  readonly resource: IDependable;
  readonly migrationsHash: string;
  readonly function: lambda.IFunction;

  constructor(scope: Construct, id: string, props: SchemaBootstrapProps) {
    super(scope, id);
    this.migrationsHash = migrationsHash();

    const { fn, role, securityGroup } = databaseFunction(this, {
      network: props.network,
      database: props.database,
      who: 'the schema bootstrap',
      securityGroupDescription: 'Schema bootstrap function: PostgreSQL to the job store, HTTPS to Secrets Manager',
      roleName: props.roleName,
      roleDescription: 'Schema bootstrap function: logs, VPC network interfaces, read the database secrets (master and services)',
      description: 'Applies runtime/db/migrations to the job store (custom resource)',
      entry: BOOTSTRAP_ENTRY,
      // The migrations this function's bundle carries: a rollback's Update, sent while the function
      // still runs the new release, names the old release's hash, and migrates nothing.
      environment: { [ENV.migrationsHash]: this.migrationsHash },
      memorySize: 512,
      timeout: BOOTSTRAP_TIMEOUT,
      paramsAndSecrets: lambda.ParamsAndSecretsLayerVersion.fromVersion(lambda.ParamsAndSecretsVersions.V1_0_103, {
        // Read once per deployment: a cache would only hide a freshly rotated password.
        cacheEnabled: false,
      }),
      bundling: BUNDLING,
      runtimeReason:
        'Pinned to Node.js 22, the runtime of the service images (node:22), so the migrations run on the Node version the runtime is tested on; moves with the images.',
      logRetentionDays: props.logRetentionDays,
      logRemovalPolicy: props.logRemovalPolicy,
    });
    props.database.grantSecretRead(role);
    this.function = fn;

    const providerLogs = new logs.LogGroup(this, 'ProviderLogs', {
      retention: props.logRetentionDays as logs.RetentionDays,
      removalPolicy: props.logRemovalPolicy,
    });
    const provider = new cr.Provider(this, 'Provider', { onEventHandler: fn, logGroup: providerLogs });
    acknowledge(
      provider,
      'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
      'CDK custom-resource framework function: the AWS-managed basic execution policy only lets it write its own logs.',
    );
    acknowledge(
      provider,
      `AwsSolutions-IAM5[Resource::<${Stack.of(this).getLogicalId(fn.node.defaultChild as lambda.CfnFunction)}.Arn>:*]`,
      'CDK custom-resource framework function: it may invoke every version of the bootstrap function (ARN:*) and nothing else.',
    );
    acknowledge(
      provider,
      'AwsSolutions-L1',
      'CDK custom-resource framework function: aws-cdk-lib chooses and bundles its runtime; it moves with aws-cdk-lib upgrades.',
    );

    const properties: BootstrapProperties & { DatabaseEndpoint: string } = {
      DatabaseSecretArn: props.database.secret.secretArn,
      AppSecretArn: props.database.appSecret.secretArn,
      MigrationsHash: this.migrationsHash,
      // A replaced instance has a new endpoint: migrate it too.
      DatabaseEndpoint: props.database.instance.dbInstanceEndpointAddress,
    };
    const resource = new CustomResource(this, 'Schema', {
      serviceToken: provider.serviceToken,
      resourceType: 'Custom::JobsSchema',
      properties,
      // CloudFormation gives up shortly after the function would have timed out, not after an hour.
      serviceTimeout: BOOTSTRAP_TIMEOUT.plus(Duration.minutes(5)),
    });
    // The database ingress rule for the bootstrap lives under its security group: wait for it.
    resource.node.addDependency(securityGroup);
    this.resource = resource;
  }
}
