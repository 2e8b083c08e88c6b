// Where the CDK app finds the repository's own files: the runtime entry points, the migrations
// and the Dockerfiles. Absolute, so synth works from any working directory.
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

export const REPO_ROOT = fileURLToPath(new URL('..', import.meta.url));
export const MIGRATIONS_DIR = join(REPO_ROOT, 'runtime', 'db', 'migrations');
/** The ERP's own migrations (README "Your tables"): applied after the platform's, tables in the `erp` schema. */
export const APP_MIGRATIONS_DIR = join(REPO_ROOT, 'migrations', 'app');
export const BOOTSTRAP_ENTRY = join(REPO_ROOT, 'runtime', 'bootstrap', 'handler.ts');
export const ROTATION_ENTRY = join(REPO_ROOT, 'runtime', 'rotation', 'handler.ts');
export const LOCK_FILE = join(REPO_ROOT, 'package-lock.json');
