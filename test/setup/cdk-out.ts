// Vitest global setup: one directory for the run's CDK assemblies (test/cdk/support.ts testOutdir),
// removed when the run ends. Without an outdir CDK makes a temporary directory per App and never
// removes it: a run of the CDK tests left about 20 of 5 MB each in /tmp, run after run. The test
// processes inherit the path through the environment.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const CDK_OUT_ENV = 'ERP_JOBS_TEST_CDK_OUT';

export default function setup(): () => void {
  const root = mkdtempSync(join(tmpdir(), 'erp-jobs-cdk-test-'));
  process.env[CDK_OUT_ENV] = root;
  return () => rmSync(root, { recursive: true, force: true });
}
