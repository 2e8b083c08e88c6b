// AWS Control Tower's proactive controls (cfn-guard rules bundled by @cdklabs/cdk-validator-cfnguard)
// on every environment's templates, next to cdk-nag: nothing fails that is not acknowledged in
// lib/guard.ts with a reason, the acknowledgements live there only and are listed in
// docs/deploy.md, and a new resource that breaks a rule fails synth. Each environment is
// synthesized once with the rules on, in a child process (guard-synth.ts: cfn-guard blocks).

import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { ENVIRONMENT_NAMES } from '../../lib/config.ts';
import { GUARD_ACKNOWLEDGEMENTS, GUARD_NAMESPACE } from '../../lib/guard.ts';
import { REPO_ROOT } from '../../lib/paths.ts';
import { testOutdir } from './support.ts';

const run = promisify(execFile);

interface Report {
  pluginReports: { pluginName: string; violations?: { ruleName: string; violatingConstructs?: { constructPath?: string }[] }[] }[];
}
interface Acknowledgement {
  path: string;
  id: string;
  reason: string;
}

/** Synthesize an environment with the guard rules on; the assembly's report and the acknowledgements applied. */
async function synthWithGuard(name: string, ...flags: string[]): Promise<{ outdir: string; code: number; stderr: string }> {
  const outdir = testOutdir();
  const r = await run(process.execPath, ['--import', 'tsx', 'test/cdk/guard-synth.ts', name, outdir, ...flags], {
    cwd: REPO_ROOT,
    maxBuffer: 32 * 1024 * 1024,
    timeout: 300_000,
  })
    .then(() => ({ code: 0, stderr: '' }))
    .catch((e: { code: number; stderr: string }) => ({ code: e.code, stderr: e.stderr }));
  return { outdir, ...r };
}

describe.each(ENVIRONMENT_NAMES)('%s: Control Tower guard rules', (name) => {
  let report: Report;
  let acks: Acknowledgement[];
  beforeAll(async () => {
    const r = await synthWithGuard(name);
    expect(r.code, r.stderr).toBe(0);
    report = JSON.parse(readFileSync(join(r.outdir, 'validation-report.json'), 'utf8')) as Report;
    acks = (JSON.parse(readFileSync(join(r.outdir, 'acknowledgements.json'), 'utf8')) as Acknowledgement[]).filter((a) =>
      a.id.startsWith(`${GUARD_NAMESPACE}::`),
    );
  }, 300_000);

  it('ran over both stacks and left nothing unacknowledged; cdk-nag passes beside it', () => {
    const guard = report.pluginReports.find((r) => r.pluginName === GUARD_NAMESPACE);
    expect(guard, 'the guard plugin ran').toBeDefined();
    const open = (guard!.violations ?? []).map(
      (v) => `${v.ruleName}: ${(v.violatingConstructs ?? []).map((c) => c.constructPath).join(', ')}`,
    );
    expect(open).toEqual([]);
    expect(report.pluginReports.find((r) => r.pluginName === 'AwsSolutions')?.violations ?? []).toEqual([]);
  });

  it('acknowledges only through lib/guard.ts, on constructs (never a stack), each with its control and reason', () => {
    expect(acks.length).toBeGreaterThan(0);
    for (const a of acks) {
      const entry = GUARD_ACKNOWLEDGEMENTS.find((g) => a.id === `${GUARD_NAMESPACE}::${g.rule}`);
      expect(entry, a.id).toBeDefined();
      expect(a.reason).toBe(`${entry!.control}: ${entry!.reason}`);
      expect(a.path.split('/').length, `${a.id} on ${a.path}`).toBeGreaterThan(1);
    }
  });
});

describe('guard acknowledgements', () => {
  it('each has a control, a reason a reviewer can check, and a line in docs/deploy.md', () => {
    const deploy = readFileSync(join(REPO_ROOT, 'docs/deploy.md'), 'utf8');
    const section = deploy.slice(deploy.indexOf('### Control Tower guard rules'));
    for (const a of GUARD_ACKNOWLEDGEMENTS) {
      expect(a.control).toMatch(/^CT\.[A-Z0-9]+\.PR\.\d+$/);
      expect(a.reason.length, a.rule).toBeGreaterThanOrEqual(80);
      expect(section, `${a.control} ${a.rule} in docs/deploy.md`).toContain(`\`${a.rule}\``);
      expect(section).toContain(a.control);
    }
  });

  it('are written in lib/guard.ts only', () => {
    const offenders: string[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const p = join(dir, e.name);
        if (e.isDirectory()) walk(p);
        else if (p.endsWith('.ts') && !p.endsWith(join('lib', 'guard.ts')) && readFileSync(p, 'utf8').includes(`${GUARD_NAMESPACE}::`))
          offenders.push(p);
      }
    };
    walk(join(REPO_ROOT, 'lib'));
    walk(join(REPO_ROOT, 'bin'));
    expect(offenders).toEqual([]);
  });

  it('a resource that breaks a rule fails synth, naming the rule and the resource (a one-queue stack: guard-synth.ts)', async () => {
    const r = await synthWithGuard('dev', '--add-queue-without-dlq');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/CT\.SQS\.PR\.1[\s\S]*WithoutDeadLetterQueue/);
  }, 300_000);
});
