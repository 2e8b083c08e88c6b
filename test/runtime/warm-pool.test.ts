// A service opens the connections its first jobs need before it takes any (db/pool.ts warmPool):
// measured, the first jobs of a fresh process waited 250–500 ms for connections opened on demand.
// Best effort: a database that refuses or does not answer delays the start by at most the timeout.
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createPool, warmPool } from '../../runtime/db/pool.ts';
import { workerPoolSize } from '../../runtime/config/rules.ts';
import { createPlatform, waitFor, type Platform } from '../support/platform.ts';
import { createTestDb, type TestDb } from '../support/db.ts';

let db: TestDb | null = null;
let p: Platform | null = null;
const servers: net.Server[] = [];
afterEach(async () => {
  await p?.close();
  p = null;
  await db?.drop();
  db = null;
  for (const s of servers.splice(0)) s.close();
});

const backends = async (d: TestDb, app: string) =>
  (await d.pool.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [app])).rows[0].n as number;

describe('warming a pool', () => {
  it('opens n connections at once and leaves them idle in the pool', async () => {
    db = await createTestDb();
    const pool = createPool({ url: db.url, max: 8, applicationName: 'warm-test' });
    const r = await warmPool(pool, 6);
    expect(r.opened).toBe(6);
    await waitFor(() => pool.idleCount === 6, 2_000, 'six idle connections');
    expect(await backends(db, 'warm-test')).toBe(6);
    await pool.end();
  });

  it('a database that refuses connections: returns at once, nothing opened', async () => {
    const blackhole = net.createServer((s) => s.destroy());
    servers.push(blackhole);
    await new Promise<void>((r) => blackhole.listen(0, '127.0.0.1', r));
    const { port } = blackhole.address() as net.AddressInfo;
    const pool = createPool({ url: `postgres://x:y@127.0.0.1:${port}/db`, max: 4, applicationName: 'warm-refused' });
    pool.on('error', () => undefined);
    const r = await warmPool(pool, 4, 2_000);
    expect(r.opened).toBe(0);
    expect(r.ms).toBeLessThan(2_000);
    await pool.end();
  });

  it('a database that never answers: gives up after the timeout, the start goes on', async () => {
    const sockets: net.Socket[] = [];
    const silent = net.createServer((s) => void sockets.push(s));
    servers.push(silent);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const { port } = silent.address() as net.AddressInfo;
    const pool = createPool({ url: `postgres://x:y@127.0.0.1:${port}/db`, max: 2, applicationName: 'warm-silent' });
    pool.on('error', () => undefined);
    const r = await warmPool(pool, 2, 300);
    expect(r.opened).toBe(0);
    expect(r.ms).toBeGreaterThanOrEqual(290);
    expect(r.ms).toBeLessThan(5_000);
    for (const s of sockets) s.destroy();
    await pool.end().catch(() => undefined);
  });

  it('a worker opens the connections its first jobs use before its first receive, not its whole pool', async () => {
    p = await createPlatform({ timings: { concurrency: 10 } });
    const pool = createPool({ url: p.db.url, max: workerPoolSize(10), applicationName: 'warm-worker' });
    const w = p.worker({ pool });
    w.start();
    // No job was enqueued: every connection it holds was opened at start. Four (claims,
    // completions, heartbeat, one handler transaction), not the pool's 12: each costs the database
    // a backend start. With the whole pool warmed: 12, and this fails.
    await waitFor(async () => (await backends(p!.db, 'warm-worker')) >= 4, 5_000, 'the worker pool warmed');
    await new Promise((r) => setTimeout(r, 300));
    // (One more may be the start's own: registering the job types, the maintenance loops.)
    expect(await backends(p.db, 'warm-worker')).toBeLessThanOrEqual(5);
    await w.stop(0);
    await pool.end();
  });
});
