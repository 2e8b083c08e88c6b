// The order test files start in. A fresh clone (CI) has no timings cached, so vitest starts the
// largest files first, and a small file that runs for two minutes (guard.test.ts: cfn-guard over
// every environment's templates) started among the last, with the other worker idle beside it
// for most of its run. The slowest files as CI measures them go first, longest first; the rest
// keep vitest's order (with a cache: failed first, then the slowest).
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Slowest first, from a fresh-clone CI run (seconds, at cdfbd9d). */
export const SLOW_FILES = [
  'test/cdk/guard.test.ts', // 118
  'test/ops/on-call.e2e.test.ts', // 79
  'test/runtime/worker.test.ts', // 45
  'test/live/browser.test.ts', // 40
  'test/e2e/infrastructure-faults.test.ts', // 38
  'test/runtime/db-failover.test.ts', // 31
  'test/e2e/local-stack.test.ts', // 31
  'test/runtime/deployment-watch.test.ts', // 24
];

export default class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const base = await super.sort(files);
    const rank = (f: TestSpecification) => {
      const i = SLOW_FILES.findIndex((s) => f.moduleId.replaceAll('\\', '/').endsWith(s));
      return i < 0 ? SLOW_FILES.length : i;
    };
    return base
      .map((f, i) => ({ f, i }))
      .sort((a, b) => rank(a.f) - rank(b.f) || a.i - b.i)
      .map((x) => x.f);
  }
}
