// The ECS cluster both services run in, with Container Insights: the worker's scaling and its
// running-tasks alarm read RunningTaskCount from ECS/ContainerInsights.

import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import { Construct } from 'constructs';

export interface JobsClusterProps {
  vpc: ec2.IVpc;
}

export class JobsCluster extends Construct {
  readonly cluster: ecs.ICluster;

  constructor(scope: Construct, id: string, props: JobsClusterProps) {
    super(scope, id);
    this.cluster = new ecs.Cluster(this, 'Cluster', {
      vpc: props.vpc,
      containerInsightsV2: ecs.ContainerInsights.ENABLED,
    });
  }
}

/** Where Container Insights publishes per-service metrics (ClusterName + ServiceName dimensions), e.g. RunningTaskCount. */
export const CONTAINER_INSIGHTS_NAMESPACE = 'ECS/ContainerInsights';
