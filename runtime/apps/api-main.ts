// The API image's entry (scripts/bundle.ts makes it dist/api/index.mjs): run the API service.
// A file of its own rather than an "am I the entry?" test in api.ts: inside a bundle every module
// has the bundle's URL, so the test held in the `jobs` bundle too, and `jobs api` (or `jobs
// worker`) there started the service twice.
import { runApi } from './api.ts';

runApi().catch((err: unknown) => {
  process.stderr.write(`jobs api: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
