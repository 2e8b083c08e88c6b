// Where the CDK app finds the repository's own files: the runtime entry points, the migrations
// and the Dockerfiles. Absolute, so synth works from any working directory.
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

export const REPO_ROOT = fileURLToPath(new URL('..', import.meta.url));
export const MIGRATIONS_DIR = join(REPO_ROOT, 'runtime', 'db', 'migrations');
export const BOOTSTRAP_ENTRY = join(REPO_ROOT, 'runtime', 'bootstrap', 'handler.ts');
export const LOCK_FILE = join(REPO_ROOT, 'package-lock.json');
