// The worker image's entry (scripts/bundle.ts makes it dist/worker/index.mjs): run the worker
// service. A file of its own for the reason runtime/apps/api-main.ts gives.
import { runWorker } from './worker.ts';

runWorker().catch((err: unknown) => {
  process.stderr.write(`jobs worker: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
