// Composes the job platform for one environment: the stateful stack, the services stack that
// depends on it, the tags, and cdk-nag over everything. bin/app.ts picks the environment; the
// tests call this with any config they like.

import { Tags, type App } from 'aws-cdk-lib';
import { assertEnvironment, type EnvironmentConfig } from './config.ts';
import { addNagChecks } from './nag.ts';
import { JobsDataStack } from './stacks/data-stack.ts';
import { JobsServicesStack } from './stacks/services-stack.ts';

export interface JobPlatform {
  data: JobsDataStack;
  services: JobsServicesStack;
}

export function buildJobPlatform(app: App, config: EnvironmentConfig): JobPlatform {
  // Checked here too, so no caller can build an environment the rules reject.
  assertEnvironment(config);
  // Environment-agnostic on purpose: synth needs no account, no credentials and no lookups;
  // `cdk deploy` targets the account and region of the caller's credentials.
  const data = new JobsDataStack(app, `${config.stackPrefix}-Data`, { config });
  const services = new JobsServicesStack(app, `${config.stackPrefix}-Services`, { config, data });
  services.addStackDependency(data);
  Tags.of(app).add('project', 'erp-jobs');
  Tags.of(app).add('environment', config.envName);
  addNagChecks(app);
  return { data, services };
}
