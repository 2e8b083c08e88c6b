// The `jobs` command as the worker image carries it (dist/cli/jobs.mjs, for operators' one-off
// ECS tasks): bundled by scripts/bundle.ts into a folder outside the repository, so nothing can
// come from node_modules, and run by plain node the way the image runs it.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bundle } from '../../scripts/bundle.ts';
import { createTestDb, type TestDb } from '../support/db.ts';

const run = promisify(execFile);
let out: string;
let dir: string;
let db: TestDb;

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'jobs-cli-bundle-'));
  dir = await bundle('cli', out);
  db = await createTestDb({ migrate: false });
}, 60_000);
afterAll(async () => {
  await db?.drop();
  await rm(out, { recursive: true, force: true });
});

async function jobs(args: string[]) {
  try {
    const r = await run(process.execPath, [join(dir, 'jobs.mjs'), ...args], {
      cwd: dir,
      // As in the image: no local stack to read settings from, the database from the environment.
      env: { PATH: process.env.PATH ?? '', JOBS_LOCAL_ENV: '0', DATABASE_URL: db.url },
    });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const err = e as { code: number; stdout: string; stderr: string };
    return { code: err.code, stdout: err.stdout, stderr: err.stderr };
  }
}

describe('the bundled jobs command (worker image)', () => {
  it("migrates from the migrations beside it (the platform's, then the ERP's own in app-migrations/), then answers on-call commands", async () => {
    // As if migrations/app held this file when the image was built, beside whatever the ERP has
    // put there (a version of its own: the ERP numbers from 0001).
    expect(existsSync(join(dir, 'app-migrations'))).toBe(true);
    await writeFile(join(dir, 'app-migrations', '9901_bundle_check.sql'), 'CREATE TABLE erp.bundle_check (id int PRIMARY KEY);\n');
    const m = await jobs(['migrate']);
    expect(m.stdout).toMatch(/applied app\/9901_bundle_check\.sql/);
    expect((await db.pool.query("SELECT to_regclass('erp.bundle_check') IS NOT NULL AS present")).rows[0].present).toBe(true);
    expect(m.stderr).toBe('');
    expect(m.code).toBe(0);
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM jobs.schema_migrations');
    expect(rows[0].n).toBeGreaterThanOrEqual(4);
    const dead = await jobs(['dead', 'list']);
    expect(dead.code).toBe(0);
    expect(dead.stdout).toMatch(/no dead jobs/i);
    const types = await jobs(['types']);
    expect(types.stdout).toMatch(/ledger\.post/);
  });

  it('says plainly that the local stack is not in it', async () => {
    const r = await jobs(['local']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(
      /the local stack needs the development dependency .+ run `jobs local` \(npm start\) from a checkout after npm ci/,
    );
  });
});

describe('the services as their images run them (dist/api/index.mjs, dist/worker/index.mjs)', () => {
  it.each(['api', 'worker'] as const)(
    '%s: `node index.mjs` starts the service (a bad setting: refused once, exit 1)',
    async (name) => {
      const dir = await bundle(name, out);
      const r = await run(process.execPath, [join(dir, 'index.mjs')], {
        cwd: dir,
        env: { PATH: process.env.PATH ?? '', DATABASE_URL: db.url, PORT: '70000', JOBS_LEASE_SECONDS: '6', JOBS_HEARTBEAT_SECONDS: '5' },
      }).then(
        () => ({ code: 0, stderr: '' }),
        (e: { code: number; stderr: string }) => ({ code: e.code, stderr: e.stderr }),
      );
      expect(r.code).toBe(1);
      expect(r.stderr.match(new RegExp(`jobs ${name}: refusing to start`, 'g'))).toHaveLength(1);
    },
    60_000,
  );
});
