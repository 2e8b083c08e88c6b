#!/usr/bin/env -S npx tsx
// The CDK app: `npx cdk synth -c env=<dev|staging|prod>`. Everything else is in lib/.
import { App } from 'aws-cdk-lib';
import { buildJobPlatform } from '../lib/app.ts';
import { resolveConfig } from '../lib/config.ts';

const app = new App();
let config;
try {
  config = resolveConfig(app.node.tryGetContext('env'));
} catch (err) {
  console.error((err as Error).message);
  process.exit(1);
}
buildJobPlatform(app, config);
app.synth();
