// The local stack's fault control on its own: a bearer token guards it, enqueue-and-rollback
// leaves nothing behind in a real database, a fault that has nothing to act on says so (409),
// and the worker-process faults send the real signals: SIGSTOP then SIGCONT after the pause,
// SIGKILL. Stand-in worker processes (plain node) keep this fast; the browser test drives the
// same control with real `jobs worker` processes.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCAL_TIMINGS } from '../../dev/stack.ts';
import { startFaultControl, type FaultControl } from '../../dev/fault-control.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { waitFor } from '../support/platform.ts';

const REPO = fileURLToPath(new URL('../../', import.meta.url));

/** The state letter of a process from /proc (T = stopped). */
const procState = (pid: number) => /^\d+ \(.*\) (\w)/.exec(readFileSync(`/proc/${pid}/stat`, 'utf8'))![1];

describe('local stack fault control', () => {
  let db: TestDb;
  let control: FaultControl;
  let base: string;
  let token: string;
  const children: ChildProcess[] = [];
  let n = 0;

  beforeAll(async () => {
    db = await createTestDb();
    control = await startFaultControl({
      databaseUrl: db.url,
      // No SQS is needed for what this test injects.
      env: {
        JOBS_QUEUE_URL: 'http://127.0.0.1:9/000000000000/none',
        JOBS_SQS_ENDPOINT: 'http://127.0.0.1:9',
        AWS_REGION: 'us-east-1',
        DATABASE_URL: db.url,
      },
      timings: LOCAL_TIMINGS,
      repoRoot: REPO,
      spawnWorker: () => {
        const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
        children.push(child);
        return { id: `fake-worker-${++n}`, child };
      },
    });
    base = control.apiEnv.JOBS_LIVE_FAULTS_URL!;
    token = control.apiEnv.JOBS_LIVE_FAULTS_TOKEN!;
    control.workers.start();
    control.workers.start();
  });
  afterAll(async () => {
    await control?.stop();
    for (const c of children) c.kill('SIGKILL');
    await db?.drop();
  });

  const req = async (method: string, path: string, opts: { token?: string; body?: unknown } = {}) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { ...(opts.token !== undefined ? { authorization: `Bearer ${opts.token}` } : {}), 'content-type': 'application/json' },
      ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}),
    });
    return { status: res.status, body: (await res.json()) as any };
  };

  it('listens on loopback only and refuses a request without the stack token', async () => {
    expect(base).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(token).toMatch(/^[0-9a-f]{48}$/);
    expect((await req('GET', '/faults')).status).toBe(401);
    expect((await req('GET', '/faults', { token: 'guess' })).status).toBe(401);
    const r = await req('GET', '/faults', { token });
    expect(r.status).toBe(200);
    expect(r.body.workers.map((w: { id: string; state: string }) => [w.id, w.state])).toEqual([
      ['fake-worker-1', 'running'],
      ['fake-worker-2', 'running'],
    ]);
    expect((await req('POST', '/faults/meltdown', { token })).status).toBe(404);
  });

  it('enqueue-and-rollback leaves no job and no outbox row', async () => {
    const r = await req('POST', '/faults/rollback', { token });
    expect(r.status).toBe(200);
    expect(r.body.result.jobIds).toHaveLength(1);
    const { rows } = await db.pool.query(
      'SELECT (SELECT count(*) FROM jobs.job)::int AS jobs, (SELECT count(*) FROM jobs.outbox)::int AS outbox',
    );
    expect(rows[0]).toEqual({ jobs: 0, outbox: 0 });
  });

  it('a duplicate with no running job to duplicate is a 409 that says so', async () => {
    const r = await req('POST', '/faults/duplicate', { token });
    expect(r).toMatchObject({ status: 409, body: { error: { message: expect.stringMatching(/no running job/) } } });
  });

  it('pause sends SIGSTOP, then SIGCONT after the given time; kill sends SIGKILL', async () => {
    const pid = control.workers.child('fake-worker-1')!.pid!;
    // 3 s: the checks of the stop fit in it on a loaded machine (0.5 s did not always: flake review).
    const r = await req('POST', '/faults/pause', { token, body: { workerId: 'fake-worker-1', seconds: 3 } });
    expect(r).toMatchObject({ status: 200, body: { result: { workerId: 'fake-worker-1', seconds: 3, jobs: [] } } });
    expect(control.workers.list()[0]!.state).toBe('paused');
    await waitFor(() => procState(pid) === 'T', 2000, 'the process to stop');
    await waitFor(() => procState(pid) !== 'T', 8000, 'SIGCONT');
    expect(control.workers.list()[0]!.state).toBe('running');

    const k = await req('POST', '/faults/kill', { token, body: { workerId: 'fake-worker-2', restartAfterMs: -1 } });
    expect(k).toMatchObject({ status: 200, body: { result: { workerId: 'fake-worker-2' } } });
    expect(control.workers.child('fake-worker-2')!.signalCode).toBe('SIGKILL');
    expect(control.workers.live()).toEqual(['fake-worker-1']);
    expect((await req('POST', '/faults/pause', { token, body: { workerId: 'fake-worker-2' } })).status).toBe(409);
  });
});
