// The VPC: public subnets for the load balancer and the NAT gateways, private subnets with
// egress for the tasks and the schema bootstrap (they reach SQS, Secrets Manager, ECR and
// CloudWatch through NAT), and isolated subnets for the database, which needs no route out.
// Flow logs record rejected and accepted traffic for incident review.

import { RemovalPolicy } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import type { LogRetentionDays, NetworkConfig } from './config.ts';

export interface NetworkProps extends NetworkConfig {
  logRetentionDays: LogRetentionDays;
}

export class Network extends Construct {
  readonly vpc: ec2.IVpc;
  /** Where the ECS tasks and the bootstrap function run. */
  readonly appSubnets: ec2.SubnetSelection = { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS };
  /** Where the database runs: no route to or from the internet. */
  readonly dataSubnets: ec2.SubnetSelection = { subnetType: ec2.SubnetType.PRIVATE_ISOLATED };
  /** Where the internet-facing load balancer runs. */
  readonly publicSubnets: ec2.SubnetSelection = { subnetType: ec2.SubnetType.PUBLIC };

  constructor(scope: Construct, id: string, props: NetworkProps) {
    super(scope, id);
    const vpc = new ec2.Vpc(this, 'Vpc', {
      // Environment-agnostic stacks see two AZs; that is enough for Multi-AZ RDS and the ALB.
      maxAzs: 2,
      natGateways: props.natGateways,
      subnetConfiguration: [
        { name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
        { name: 'app', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 20 },
        { name: 'data', subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 24 },
      ],
    });
    const flowLogs = new logs.LogGroup(this, 'FlowLogs', {
      retention: props.logRetentionDays as logs.RetentionDays,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    vpc.addFlowLog('FlowLog', { destination: ec2.FlowLogDestination.toCloudWatchLogs(flowLogs), trafficType: ec2.FlowLogTrafficType.ALL });
    this.vpc = vpc;
  }
}
