// Synthesizes one environment with the Control Tower guard rules on, in its own process, for
// test/cdk/guard.test.ts: cfn-guard runs synchronously inside synth, and a test worker blocked
// that long misses its own RPC deadlines. Writes the assembly (validation-report.json) and the
// acknowledgements it applied (acknowledgements.json) to OUTDIR; exits 1 with synth's error when
// validation fails. Usage: tsx test/cdk/guard-synth.ts <env> <outdir> [--add-queue-without-dlq]
// (the negative case: one stack holding only a queue without a dead-letter queue, checked by the
// same addGuardChecks; 3 s against an environment's 20. That acknowledgements sit on constructs,
// never on a stack, so none can cover a new resource, guard.test.ts checks on every environment.)

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { App, Stack, Validations } from 'aws-cdk-lib';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { EnvironmentName } from '../../lib/config.ts';
import { addGuardChecks } from '../../lib/guard.ts';
import { environment, synthConfig } from './support.ts';

const [name, outdir, flag] = process.argv.slice(2) as [EnvironmentName, string, string | undefined];
try {
  if (flag === '--add-queue-without-dlq') {
    // Encrypted and TLS-only (cdk-nag holds) but without a dead-letter queue (CT.SQS.PR.1).
    const app = new App({ outdir, analyticsReporting: false, builtinCloudFormationValidation: false });
    addGuardChecks(app);
    const stack = new Stack(app, `ErpJobs-${name}-GuardNegative`);
    new sqs.Queue(stack, 'WithoutDeadLetterQueue', { encryption: sqs.QueueEncryption.SQS_MANAGED, enforceSSL: true });
    app.synth();
    process.exit(0);
  }
  const s = synthConfig(environment(name), { guard: true, outdir });
  const acks = s.app.node
    .findAll()
    .flatMap((c) =>
      c.node.metadata
        .filter((m) => m.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
        .map((m) => [c.node.path, m.data as Record<string, string>] as const),
    )
    .flatMap(([path, data]) => Object.entries(data).map(([id, reason]) => ({ path, id, reason })));
  writeFileSync(join(outdir, 'acknowledgements.json'), JSON.stringify(acks, null, 2));
} catch (err) {
  console.error((err as Error).message);
  process.exit(1);
}
