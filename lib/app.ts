// Composes the job platform for one environment: the stateful stack, the services stack that
// depends on it, the tags, cdk-nag over everything, and — when asked (the tests; `-c guard=true`)
// — AWS Control Tower's guard rules, whose acknowledgements (lib/guard.ts) are always in place.
// bin/app.ts picks the environment; the tests call this with any config they like.

import { Tags, type App } from 'aws-cdk-lib';
import { assertEnvironment, type EnvironmentConfig, stackTags } from './config.ts';
import { acknowledgeGuardRules, addGuardChecks } from './guard.ts';
import { addNagChecks } from './nag.ts';
import { JobsDataStack } from './stacks/data-stack.ts';
import { JobsServicesStack } from './stacks/services-stack.ts';

export interface JobPlatform {
  data: JobsDataStack;
  services: JobsServicesStack;
}

export interface BuildOptions {
  /** Run the Control Tower guard rules at synth (about 10 s per environment). */
  guard?: boolean;
}

export function buildJobPlatform(app: App, config: EnvironmentConfig, opts: BuildOptions = {}): JobPlatform {
  // Checked here too, so no caller can build an environment the rules reject.
  assertEnvironment(config);
  // Environment-agnostic on purpose: synth needs no account, no credentials and no lookups;
  // `cdk deploy` targets the account and region of the caller's credentials.
  const data = new JobsDataStack(app, `${config.stackPrefix}-Data`, { config });
  const services = new JobsServicesStack(app, `${config.stackPrefix}-Services`, { config, data });
  services.addStackDependency(data);
  for (const [key, value] of Object.entries(stackTags(config))) Tags.of(app).add(key, value);
  addNagChecks(app);
  if (opts.guard) addGuardChecks(app);
  const platform = { data, services };
  acknowledgeGuardRules(platform, config);
  return platform;
}
