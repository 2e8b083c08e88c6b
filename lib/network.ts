// The VPC: public subnets for the load balancer and the NAT gateways (no public IPs handed out
// on launch), private subnets with egress for the tasks and the schema bootstrap, and isolated
// subnets for the database, which needs no route out. The S3 gateway endpoint (free: ECR image
// layers come from S3) is in every environment; where the config asks (prod), interface
// endpoints for everything the tasks call — SQS, ECR, Secrets Manager, CloudWatch metrics and
// Logs, ECS — so their HTTPS egress can be narrowed to the endpoints (`allowHttpsToAws`). Flow logs
// record rejected and accepted traffic for incident review.

import { type RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as cr from 'aws-cdk-lib/custom-resources';
import { Construct } from 'constructs';
import type { LogRetentionDays, NetworkConfig } from './config.ts';
import { awsCustomResourceLogs } from './custom-resource-logs.ts';
import { acknowledge, acknowledgeAwsCustomResourceFunction } from './nag.ts';

export interface NetworkProps extends NetworkConfig {
  logRetentionDays: LogRetentionDays;
  logRemovalPolicy: RemovalPolicy;
}

/** The AWS services the tasks and the bootstrap call, as interface endpoints (prod). */
export const INTERFACE_ENDPOINT_SERVICES = {
  Sqs: ec2.InterfaceVpcEndpointAwsService.SQS,
  EcrApi: ec2.InterfaceVpcEndpointAwsService.ECR,
  EcrDocker: ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
  SecretsManager: ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
  CloudWatchMetrics: ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING,
  Logs: ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
  // The worker reads its service's deployments (runtime/worker/deployment-watch.ts).
  Ecs: ec2.InterfaceVpcEndpointAwsService.ECS,
} as const;

export class Network extends Construct {
  readonly vpc: ec2.IVpc;
  /** Where the ECS tasks and the bootstrap function run. */
  readonly appSubnets: ec2.SubnetSelection = { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS };
  /** Where the database runs: no route to or from the internet. */
  readonly dataSubnets: ec2.SubnetSelection = { subnetType: ec2.SubnetType.PRIVATE_ISOLATED };
  /** Where the internet-facing load balancer runs. */
  readonly publicSubnets: ec2.SubnetSelection = { subnetType: ec2.SubnetType.PUBLIC };
  /** The interface endpoints' security group, when the environment has them. */
  readonly endpointSecurityGroup?: ec2.SecurityGroup;
  /** The region's S3 prefix list (the gateway endpoint's destinations), when egress is narrowed. */
  readonly s3PrefixListId?: string;

  constructor(scope: Construct, id: string, props: NetworkProps) {
    super(scope, id);
    const vpc = new ec2.Vpc(this, 'Vpc', {
      // Environment-agnostic stacks see two AZs; that is enough for Multi-AZ RDS and the ALB.
      maxAzs: 2,
      natGateways: props.natGateways,
      subnetConfiguration: [
        // The NAT gateways carry their Elastic IPs and the load balancer its own: nothing
        // launched here needs a public IP of its own.
        { name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24, mapPublicIpOnLaunch: false },
        { name: 'app', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 20 },
        { name: 'data', subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 24 },
      ],
    });
    const flowLogs = new logs.LogGroup(this, 'FlowLogs', {
      retention: props.logRetentionDays as logs.RetentionDays,
      removalPolicy: props.logRemovalPolicy,
    });
    vpc.addFlowLog('FlowLog', { destination: ec2.FlowLogDestination.toCloudWatchLogs(flowLogs), trafficType: ec2.FlowLogTrafficType.ALL });

    // Free, and keeps image layer pulls (and the custom resources' S3 responses) off the NAT.
    vpc.addGatewayEndpoint('S3', { service: ec2.GatewayVpcEndpointAwsService.S3, subnets: [this.appSubnets] });

    if (props.interfaceEndpoints) {
      const sg = new ec2.SecurityGroup(this, 'EndpointSecurityGroup', {
        vpc,
        description: 'Interface endpoints (SQS, ECR, Secrets Manager, CloudWatch, Logs, ECS): HTTPS from inside the VPC',
        allowAllOutbound: false,
      });
      // The services stack narrows its egress to this group; the endpoints answer the VPC only.
      sg.addIngressRule(ec2.Peer.ipv4(vpc.vpcCidrBlock), ec2.Port.tcp(443), 'HTTPS from the VPC');
      acknowledge(
        sg,
        'AwsSolutions-EC23',
        "The only ingress is HTTPS from the VPC's own CIDR block (a CloudFormation attribute, which the rule cannot evaluate); no address outside the VPC is admitted.",
      );
      for (const [name, service] of Object.entries(INTERFACE_ENDPOINT_SERVICES)) {
        vpc.addInterfaceEndpoint(name, { service, subnets: this.appSubnets, securityGroups: [sg], privateDnsEnabled: true });
      }
      this.endpointSecurityGroup = sg;
      this.s3PrefixListId = s3PrefixList(
        this,
        awsCustomResourceLogs(this, { retentionDays: props.logRetentionDays, removalPolicy: props.logRemovalPolicy }),
      );
    }
    this.vpc = vpc;
  }

  /**
   * Let a security group call AWS APIs over HTTPS: to the interface endpoints and S3 (its gateway
   * endpoint) where the environment has them, else anywhere on 443 through NAT. Called from the
   * consumer's side, so the rule lives in the consumer's stack.
   */
  allowHttpsToAws(sg: ec2.SecurityGroup, who: string): void {
    if (this.endpointSecurityGroup && this.s3PrefixListId) {
      sg.addEgressRule(this.endpointSecurityGroup, ec2.Port.tcp(443), `HTTPS from ${who} to the interface endpoints`);
      sg.addEgressRule(
        ec2.Peer.prefixList(this.s3PrefixListId),
        ec2.Port.tcp(443),
        `HTTPS from ${who} to S3 (gateway endpoint: ECR layers)`,
      );
    } else {
      sg.addEgressRule(ec2.Peer.anyIpv4(), ec2.Port.tcp(443), `HTTPS from ${who} to AWS APIs through NAT`);
    }
  }
}

/**
 * The AWS-managed prefix list of S3 in the deployment's region (`com.amazonaws.<region>.s3`),
 * looked up at deploy time: synth stays offline and the stacks environment-agnostic, and the ID
 * differs by region. One DescribePrefixLists call on create and update.
 */
function s3PrefixList(scope: Construct, logGroup: logs.ILogGroup): string {
  const region = Stack.of(scope).region;
  const call: cr.AwsSdkCall = {
    service: 'EC2',
    action: 'describePrefixLists',
    parameters: { Filters: [{ Name: 'prefix-list-name', Values: [`com.amazonaws.${region}.s3`] }] },
    physicalResourceId: cr.PhysicalResourceId.of(`s3-prefix-list-${region}`),
    outputPaths: ['PrefixLists.0.PrefixListId'],
  };
  const lookup = new cr.AwsCustomResource(scope, 'S3PrefixList', {
    onCreate: call,
    onUpdate: call,
    policy: cr.AwsCustomResourcePolicy.fromSdkCalls({ resources: cr.AwsCustomResourcePolicy.ANY_RESOURCE }),
    installLatestAwsSdk: false,
    logGroup,
  });
  acknowledge(
    lookup,
    'AwsSolutions-IAM5[Resource::*]',
    'ec2:DescribePrefixLists supports no resource-level permissions; the call is read-only and runs on create and update of the network.',
  );
  acknowledgeAwsCustomResourceFunction(lookup);
  return lookup.getResponseField('PrefixLists.0.PrefixListId');
}
