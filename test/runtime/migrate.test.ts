import { mkdtemp, writeFile, cp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultMigrationsDir, migrate, pendingMigrations } from '../../runtime/db/migrate.ts';
import { createTestDb, type TestDb } from '../support/db.ts';

describe('migrate', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb({ migrate: false });
  });
  afterAll(() => db.drop());

  it('applies every migration once even when ten processes race to do it', async () => {
    const pools = Array.from({ length: 10 }, () => db.newPool(1));
    const results = await Promise.all(pools.map((p) => migrate(p)));
    const applied = results.flatMap((r) => r.applied);
    const files = (await pendingMigrations(pools[0]!)).length;
    expect(files).toBe(0);
    // Each file applied by exactly one racer.
    expect(new Set(applied).size).toBe(applied.length);
    expect(applied.length).toBeGreaterThanOrEqual(2);
    const again = await migrate(db.pool);
    expect(again.applied).toEqual([]);
  });

  it('refuses an applied migration whose text changed, naming the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'mig-'));
    await cp(defaultMigrationsDir(), dir, { recursive: true });
    await writeFile(join(dir, '0001_job_table.sql'), '-- edited\n', { flag: 'a' });
    await expect(migrate(db.pool, { dir })).rejects.toThrow(/0001_job_table\.sql was changed after it was applied/);
  });

  it('reports a new migration as pending until it is applied', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'mig-'));
    await cp(defaultMigrationsDir(), dir, { recursive: true });
    await writeFile(join(dir, '9999_extra.sql'), 'CREATE TABLE extra_table (id int);');
    expect(await pendingMigrations(db.pool, dir)).toEqual(['9999_extra.sql']);
    await migrate(db.pool, { dir });
    expect(await pendingMigrations(db.pool, dir)).toEqual([]);
  });
});
