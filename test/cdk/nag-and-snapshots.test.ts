// The whole app per environment: cdk-nag AwsSolutions passes with every acknowledgement carrying
// a reason, the checks really run (a non-compliant resource fails synth), the bootstrap bundle
// holds the handler and the migrations, and a snapshot per environment pins the templates with
// asset hashes blanked, so a runtime code change does not churn them.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { App, Validations } from 'aws-cdk-lib';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { describe, expect, it } from 'vitest';
import { buildJobPlatform } from '../../lib/app.ts';
import { ENVIRONMENT_NAMES, ENVIRONMENTS } from '../../lib/config.ts';
import { NAG_NAMESPACE } from '../../lib/nag.ts';
import { APP_MIGRATIONS_DIR, MIGRATIONS_DIR } from '../../lib/paths.ts';
import { CDK_JSON_CONTEXT, synthEnv, testOutdir } from './support.ts';

// Asset hashes (S3 keys, image tags, source hashes) and the migrations hash are sha256 hex.
const HASH = /[0-9a-f]{64}/g;
expect.addSnapshotSerializer({
  test: (v: unknown) => typeof v === 'string' && /[0-9a-f]{64}/.test(v),
  serialize: (v: string, config, indentation, depth, refs, printer) => printer(v.replace(HASH, '[HASH]'), config, indentation, depth, refs),
});

describe.each(ENVIRONMENT_NAMES)('%s', (name) => {
  // dev bundles the bootstrap function as `cdk synth` does; the others skip esbuild for speed.
  const s = synthEnv(name, { bundle: name === 'dev' });

  it('passes cdk-nag AwsSolutions with nothing left unacknowledged', () => {
    const report = JSON.parse(readFileSync(join(s.assembly.directory, 'validation-report.json'), 'utf8')) as {
      pluginReports: { pluginName: string; violations?: unknown[] }[];
    };
    const violations = report.pluginReports.flatMap((r) => (r.violations ?? []).map((v) => ({ plugin: r.pluginName, v })));
    // dev's API on plain HTTP and its alarms with no subscriber are on purpose, and said (warning
    // annotations in the report, which name how to acknowledge them); nothing else.
    const planned = (x: (typeof violations)[number]) =>
      name === 'dev' &&
      ['Annotation::erp-jobs:api-plain-http', 'Annotation::erp-jobs:alarms-page-nobody'].includes(
        (x.v as { ruleName?: string }).ruleName ?? '',
      );
    expect(violations.filter((x) => !planned(x))).toEqual([]);
    expect(violations.some(planned)).toBe(name === 'dev');
  });

  it('gives every acknowledged finding a reason a reviewer can check', () => {
    const acks = s.app.node
      .findAll()
      .flatMap((c) =>
        c.node.metadata
          .filter((m) => m.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
          .map((m) => [c.node.path, m.data as Record<string, string>] as const),
      )
      .flatMap(([path, data]) => Object.entries(data).map(([id, reason]) => ({ path, id, reason })))
      .filter((a) => a.id.startsWith(`${NAG_NAMESPACE}::`));
    expect(acks.length).toBeGreaterThan(0);
    for (const a of acks) {
      expect(a.id, a.path).toMatch(/^AwsSolutions::AwsSolutions-[A-Z]+\d+/);
      expect(a.reason.length, `${a.path} ${a.id}`).toBeGreaterThanOrEqual(60);
    }
    // Per-resource only: no stack-wide acknowledgement of an AwsSolutions rule.
    for (const a of acks) expect(a.path.split('/').length, `${a.id} on ${a.path}`).toBeGreaterThan(1);
  });

  it('matches the snapshot of both stacks (asset hashes blanked)', () => {
    expect({ data: s.dataTemplate.toJSON(), services: s.servicesTemplate.toJSON() }).toMatchSnapshot();
  });
});

describe('Lambda bundles', () => {
  it('the bootstrap holds the ESM handler and the migrations beside it; the password rotation its handler alone', () => {
    const s = synthEnv('dev', { bundle: true });
    const manifest = JSON.parse(readFileSync(join(s.assembly.directory, `${s.services.artifactId}.assets.json`), 'utf8')) as {
      files: Record<string, { source: { path: string; packaging: string } }>;
    };
    const dirs = Object.values(manifest.files)
      .map((f) => join(s.assembly.directory, f.source.path))
      .filter((d) => existsSync(join(d, 'index.mjs')));
    expect(dirs).toHaveLength(2);
    const dir = dirs.find((d) => existsSync(join(d, 'migrations')))!;
    // The rotation function: ESM, pg bundled, the AWS SDK left to the Lambda runtime, no migrations to apply.
    const rotation = dirs.find((d) => d !== dir)!;
    const rotationBundle = readFileSync(join(rotation, 'index.mjs'), 'utf8');
    expect(rotationBundle).toContain('createRequire');
    expect(rotationBundle).not.toMatch(/from ?["']pg["']/);
    expect(rotationBundle).toMatch(/from ?["']@aws-sdk\/client-secrets-manager["']/);
    expect(rotationBundle).toContain('finishSecret');
    expect(existsSync(join(rotation, 'migrations'))).toBe(false);
    const bundle = readFileSync(join(dir, 'index.mjs'), 'utf8');
    expect(bundle).toContain('createRequire');
    expect(bundle).not.toMatch(/from ?["']pg["']/);
    const sql = readdirSync(MIGRATIONS_DIR)
      .filter((f) => f.endsWith('.sql'))
      .sort();
    expect(sql.length).toBeGreaterThan(0);
    expect(readdirSync(join(dir, 'migrations')).sort()).toEqual(sql);
    // The ERP's own migrations beside them, where migrate() looks in a bundle (README "Your tables").
    const appFiles = existsSync(APP_MIGRATIONS_DIR) ? readdirSync(APP_MIGRATIONS_DIR).sort() : [];
    expect(readdirSync(join(dir, 'app-migrations')).sort()).toEqual(appFiles);
  });
});

describe('cdk-nag', () => {
  it('fails synth on a non-compliant resource, naming the rule', () => {
    const app = new App({
      outdir: testOutdir(),
      builtinCloudFormationValidation: false,
      context: { ...CDK_JSON_CONTEXT, 'aws:cdk:bundling-stacks': [] },
    });
    const { data } = buildJobPlatform(app, ENVIRONMENTS.dev);
    new sqs.Queue(data, 'Unencrypted', { encryption: sqs.QueueEncryption.UNENCRYPTED });
    expect(() => app.synth()).toThrow(/AwsSolutions-SQS(2|3|4)/);
  });
});
