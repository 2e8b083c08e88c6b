// The job store's PostgreSQL: one RDS instance in the isolated subnets, storage encrypted, TLS
// required, two sets of credentials generated into Secrets Manager: the master user's, which only
// the schema bootstrap reads (it migrates), and the services' own role's (runtime/db/app-role.ts:
// row access, no DDL), which the bootstrap creates and ECS hands to the services as an ECS secret.
// Its security group admits no one
// until a consumer is allowed in by name (`allowConnectionsFrom`): the API, the worker and the
// schema bootstrap, nothing else.
// Diagnosable: the postgresql log exported to CloudWatch Logs with slow statements and lock waits,
// enhanced monitoring every minute, Performance Insights where the environment asks, a pinned
// minor version and the environment's backup and maintenance windows. The secrets outlive the
// stack where the database does, and only their named readers may read them (secret-readers.ts).

import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as logs from 'aws-cdk-lib/aws-logs';
import * as rds from 'aws-cdk-lib/aws-rds';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct } from 'constructs';
import type { DatabaseConfig, LogRetentionDays } from './config.ts';
import { acknowledge, acknowledgeLogRetentionFunction } from './nag.ts';
import { restrictSecretReaders } from './secret-readers.ts';

export interface JobDatabaseProps extends DatabaseConfig {
  vpc: ec2.IVpc;
  subnets: ec2.SubnetSelection;
  /** Retention of the exported postgresql log. */
  logRetentionDays: LogRetentionDays;
  /** Who may read the master secret (the schema bootstrap's role) and the services' secret (the bootstrap and both execution roles). */
  readers: { master: string[]; app: string[] };
}

/** The instance's parameters: TLS only, and what an incident review needs in the postgresql log. */
export function databaseParameters(p: Pick<DatabaseConfig, 'slowStatementMilliseconds'>): Record<string, string> {
  return {
    'rds.force_ssl': '1',
    // Statements slower than this, with their duration and text.
    log_min_duration_statement: String(p.slowStatementMilliseconds),
    // ... but not their bind parameters (the default logs them whole): a job's payload, an ERP's
    // rows, would sit in CloudWatch Logs for the log group's retention. The statements are all
    // parameterized, so the text says which statement without the data.
    log_parameter_max_length: '0',
    // A lock wait longer than deadlock_timeout (1 s) is logged with who holds the lock.
    log_lock_waits: '1',
    // Autovacuum runs over 1 s: the job table churns, and a vacuum that cannot keep up shows here first.
    log_autovacuum_min_duration: '1000',
  };
}

/** Enhanced monitoring's granularity (OS metrics of the instance). */
export const ENHANCED_MONITORING_INTERVAL = Duration.seconds(60);

export const DATABASE_NAME = 'erp_jobs';
export const DATABASE_ADMIN_USER = 'erp_jobs_admin';
/** The services' role: the schema bootstrap creates it with row access only (runtime/db/app-role.ts). */
export const DATABASE_APP_USER = 'erp_jobs_app';

export class JobDatabase extends Construct {
  readonly instance: rds.IDatabaseInstance;
  /** The RDS-generated master secret: {host, port, username, password, dbname, engine}. The schema bootstrap's alone. */
  readonly secret: secretsmanager.ISecret;
  /** The services' secret, same shape (attached to the instance): the role the bootstrap creates for them. */
  readonly appSecret: secretsmanager.ISecret;
  private readonly securityGroup: ec2.SecurityGroup;

  constructor(scope: Construct, id: string, props: JobDatabaseProps) {
    super(scope, id);
    this.securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc: props.vpc,
      description: 'Job store PostgreSQL: ingress only from the API, the worker and the schema bootstrap',
      // The database initiates no connections.
      allowAllOutbound: false,
    });
    const major = props.engineVersion.split('.')[0]!;
    const instance = new rds.DatabaseInstance(this, 'Instance', {
      engine: rds.DatabaseInstanceEngine.postgres({ version: rds.PostgresEngineVersion.of(props.engineVersion, major) }),
      instanceType: new ec2.InstanceType(props.instanceClass),
      vpc: props.vpc,
      vpcSubnets: props.subnets,
      securityGroups: [this.securityGroup],
      publiclyAccessible: false,
      databaseName: DATABASE_NAME,
      credentials: rds.Credentials.fromGeneratedSecret(DATABASE_ADMIN_USER),
      storageEncrypted: true,
      allocatedStorage: props.allocatedStorageGiB,
      maxAllocatedStorage: props.maxAllocatedStorageGiB,
      storageType: rds.StorageType.GP3,
      multiAz: props.multiAz,
      backupRetention: Duration.days(props.backupRetentionDays),
      preferredBackupWindow: props.backupWindow,
      preferredMaintenanceWindow: props.maintenanceWindow,
      deletionProtection: props.deletionProtection,
      removalPolicy: props.removal === 'snapshot' ? RemovalPolicy.SNAPSHOT : RemovalPolicy.DESTROY,
      copyTagsToSnapshot: true,
      // Pinned (engineVersion): an automatic minor upgrade would leave the template behind the
      // instance, and the next deployment would try to go back.
      autoMinorVersionUpgrade: false,
      caCertificate: rds.CaCertificate.RDS_CA_RSA2048_G1,
      parameters: databaseParameters(props),
      // Every log PostgreSQL on RDS can export: the server log and the major-version upgrade log.
      cloudwatchLogsExports: ['postgresql', 'upgrade'],
      cloudwatchLogsRetention: props.logRetentionDays as logs.RetentionDays,
      monitoringInterval: ENHANCED_MONITORING_INTERVAL,
      ...(props.performanceInsights
        ? { enablePerformanceInsights: true, performanceInsightRetention: rds.PerformanceInsightRetention.DEFAULT }
        : {}),
    });
    if (!instance.secret) throw new Error('JobDatabase: the generated credentials produced no secret');
    this.instance = instance;
    this.secret = instance.secret;
    const secretRemoval = props.removal === 'snapshot' ? RemovalPolicy.RETAIN : RemovalPolicy.DESTROY;
    // The generated master secret (under the instance): kept with the snapshot, else nobody could log in to a restore.
    const masterSecret = instance.node.findChild('Secret') as secretsmanager.Secret;
    masterSecret.applyRemovalPolicy(secretRemoval);
    restrictSecretReaders(masterSecret, props.readers.master);
    const appSecret = new rds.DatabaseSecret(this, 'AppSecret', { username: DATABASE_APP_USER });
    appSecret.applyRemovalPolicy(secretRemoval);
    restrictSecretReaders(appSecret, props.readers.app);
    // Attached: Secrets Manager adds host, port, dbname and engine, so the services read it like the RDS secret.
    this.appSecret = appSecret.attach(instance);
    acknowledge(
      appSecret,
      'AwsSolutions-SMG4',
      "Rotated every database.passwordRotationDays by the services stack's PasswordRotation (lib/password-rotation.ts, alternating users): its RotationSchedule lives in that stack, beside the function, where this rule, which looks within one stack, cannot see it.",
    );

    acknowledge(
      instance,
      'AwsSolutions-SMG4',
      "The master secret is read only by the schema bootstrap and the password rotation, afresh on each run, and it is the credential that repairs the services' roles: it is rotated by hand (docs/deploy.md#secrets), not by a function that could lock both out at once.",
    );
    acknowledge(
      instance,
      'AwsSolutions-RDS11',
      'The default port is kept on purpose: the instance sits in isolated subnets and its security group admits only the API, worker, bootstrap and password-rotation security groups, so a non-default port would add no protection.',
    );
    acknowledge(
      instance,
      'AwsSolutions-RDS6',
      'The services authenticate with the Secrets Manager credentials ECS injects; IAM database authentication would need per-connection token refresh in the pool and caps new connections per second, which the worker fleet would hit at scale-out.',
    );
    if (!props.multiAz) {
      acknowledge(
        instance,
        'AwsSolutions-RDS3',
        "Single-AZ by this environment's config (database.multiAz = false): a non-production environment trades failover for cost; prod runs Multi-AZ.",
      );
    }
    // The exported logs' retention is set by aws-cdk-lib's log-retention function (RDS creates the groups).
    acknowledgeLogRetentionFunction(this);
    acknowledge(
      instance,
      'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonRDSEnhancedMonitoringRole]',
      "Enhanced monitoring's role: the AWS-managed policy RDS documents for it, which only lets RDS write OS metrics to the RDSOSMetrics log group.",
    );
    if (!props.deletionProtection) {
      acknowledge(
        instance,
        'AwsSolutions-RDS10',
        "Deletion protection off by this environment's config (database.deletionProtection = false): a disposable development database; staging and prod enable it.",
      );
    }
  }

  /** Let a consumer (a service, the bootstrap function) open connections to the database port. */
  allowConnectionsFrom(peer: ec2.IConnectable, who: string): void {
    // Called from the consumer's side, so the ingress rule is created in the consumer's stack
    // (under its security group) and the stateful stack never references the services stack.
    peer.connections.allowToDefaultPort(this.instance, `PostgreSQL from ${who}`);
  }

  /** Read both secrets: the bootstrap function (it migrates as the master and sets the services' role). ECS execution roles get the app secret through ecs.Secret. */
  grantSecretRead(grantee: iam.IGrantable): void {
    this.secret.grantRead(grantee);
    this.appSecret.grantRead(grantee);
  }
}
