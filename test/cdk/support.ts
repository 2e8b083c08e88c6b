// Shared by the CDK tests: synthesize the platform for one environment config, the way
// `cdk synth` does (cdk.json's feature flags, cdk-nag on), with CloudFormation's built-in
// template validation off for speed and asset bundling off unless a test needs the bundle.
// Each test file synthesizes each environment once (memoized) and asserts on the templates.
// Staging and prod refuse to synthesize without a certificate: the tests give them
// TEST_CERTIFICATE_ARN, as `-c apiCertificateArn=…` would.

import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App, CfnElement, Stack } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';
import { Template } from 'aws-cdk-lib/assertions';
import type { CloudAssembly } from 'aws-cdk-lib/cx-api';
import { buildJobPlatform, type JobPlatform } from '../../lib/app.ts';
import { ENVIRONMENTS, withOverrides, type EnvironmentConfig, type EnvironmentName } from '../../lib/config.ts';
import { REPO_ROOT } from '../../lib/paths.ts';
import { CDK_OUT_ENV } from '../setup/cdk-out.ts';

/** A fresh assembly directory for one App, in the run's directory (test/setup/cdk-out.ts removes it at the end). */
export function testOutdir(): string {
  return mkdtempSync(join(process.env[CDK_OUT_ENV] ?? tmpdir(), 'app-'));
}

/** cdk.json's context: the feature flags `cdk synth` runs with. */
export const CDK_JSON_CONTEXT = (JSON.parse(readFileSync(join(REPO_ROOT, 'cdk.json'), 'utf8')) as { context: Record<string, unknown> })
  .context;

export interface Synthesized extends JobPlatform {
  app: App;
  assembly: CloudAssembly;
  data: JobPlatform['data'];
  services: JobPlatform['services'];
  dataTemplate: Template;
  servicesTemplate: Template;
}

export interface SynthOptions {
  /** Run esbuild for the bootstrap function (slow-ish); otherwise CDK stages a placeholder. */
  bundle?: boolean;
  /** Run the Control Tower guard rules too (about 10 s per environment: test/cdk/guard.test.ts). */
  guard?: boolean;
  /** Where the assembly goes (default: a temporary directory, removed with the test process). */
  outdir?: string;
  /** Change the platform before synth (e.g. add a resource that breaks a rule). */
  before?: (p: JobPlatform) => void;
}

/** The certificate the tests synthesize staging and prod with (what `-c apiCertificateArn=…` gives). */
export const TEST_CERTIFICATE_ARN = 'arn:aws:acm:eu-west-1:111111111111:certificate/00000000-0000-0000-0000-000000000000';

/** The on-call address the tests synthesize staging and prod with (what `-c alarmEmails=…` gives). */
export const TEST_ALARM_EMAIL = 'erp-jobs-oncall@acme-erp.com';

/** A real environment's config as `cdk synth -c env=<name> -c apiCertificateArn=… -c alarmEmails=…` resolves it (dev without them). */
export function environment(name: EnvironmentName): EnvironmentConfig {
  const c = ENVIRONMENTS[name];
  return c.api.allowPlainHttp ? c : withOverrides(c, { apiCertificateArn: TEST_CERTIFICATE_ARN, alarmEmails: TEST_ALARM_EMAIL });
}

export function synthConfig(config: EnvironmentConfig, opts: SynthOptions = {}): Synthesized {
  const app = new App({
    outdir: opts.outdir ?? testOutdir(),
    context: { ...CDK_JSON_CONTEXT, 'aws:cdk:bundling-stacks': opts.bundle ? ['**'] : [] },
    builtinCloudFormationValidation: false,
    analyticsReporting: false,
  });
  const platform = buildJobPlatform(app, config, { guard: opts.guard ?? false });
  opts.before?.(platform);
  const assembly = app.synth();
  return {
    app,
    assembly,
    ...platform,
    dataTemplate: Template.fromStack(platform.data, { skipCyclicalDependenciesCheck: true }),
    servicesTemplate: Template.fromStack(platform.services, { skipCyclicalDependenciesCheck: true }),
  };
}

const cache = new Map<EnvironmentName, Synthesized>();
/** The platform of one of the real environments, synthesized once per test file. */
export function synthEnv(name: EnvironmentName, opts: SynthOptions = {}): Synthesized {
  let s = cache.get(name);
  if (!s) {
    s = synthConfig(environment(name), opts);
    cache.set(name, s);
  }
  return s;
}

/** A real environment's config with some knobs changed (deep enough for the tests). */
export function withChanges(name: EnvironmentName, change: (c: EnvironmentConfig) => void): EnvironmentConfig {
  const c = structuredClone(environment(name)) as EnvironmentConfig;
  change(c);
  return c;
}

type Resources = Record<string, { Type: string; Properties?: Record<string, unknown>; DependsOn?: string[] | string; Metadata?: unknown }>;

export function resourcesOfType(t: Template, type: string): Resources {
  return t.findResources(type) as Resources;
}

/** The only resource of a type; fails when there is not exactly one. */
export function only(t: Template, type: string): { id: string; props: Record<string, any>; dependsOn: string[] } {
  const found = Object.entries(resourcesOfType(t, type));
  if (found.length !== 1) throw new Error(`expected exactly one ${type}, found ${found.length}`);
  const [id, r] = found[0]!;
  const deps = r.DependsOn === undefined ? [] : Array.isArray(r.DependsOn) ? r.DependsOn : [r.DependsOn];
  return { id, props: (r.Properties ?? {}) as Record<string, any>, dependsOn: deps };
}

/** The logical id of an L2 construct's CloudFormation resource (its default child), or of an L1. */
export function idOf(construct: IConstruct): string {
  const cfn = (CfnElement.isCfnElement(construct) ? construct : construct.node.defaultChild) as CfnElement | undefined;
  if (!cfn) throw new Error(`${construct.node.path} has no CloudFormation resource`);
  // resolve(logicalId) honours an overridden logical id (e.g. the RDS-generated master secret's).
  return Stack.of(cfn).resolve(cfn.logicalId) as string;
}
